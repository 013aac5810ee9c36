"""Real-network throughput between two members in network namespaces (root), next to the raw UDP rate of a plain
Python socket pair in the same namespaces, measured in the same run.

- raw UDP: a blocking receiver counts 100-byte datagrams while a sender blasts them (no reliability: loss counts);
- UNICAST3 over UDP and over TCP: member A sends N 100-byte messages to B as fast as its window allows; the rate is
  N / (time until B delivered all N), exactly once and in order (checked by the tests, not here).
Run: python -m bench.bench_network [--messages 200000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import textwrap
import time

from bench.common import report
from orchestration.backends.netns import NetnsCluster, check_netns_available
from orchestration.cluster import ClusterSpec

RAW_RECEIVER = textwrap.dedent("""
    import socket, sys, time
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind((sys.argv[1], 9999))
    s.settimeout(2.0)
    print("ready", flush=True)
    n, first, last = 0, None, None
    try:
        while True:
            s.recv(2048)
            last = time.monotonic()
            first = first or last
            n += 1
    except socket.timeout:
        pass
    print(n, (last - first) if first and last else 0.0, flush=True)
""")
RAW_SENDER = textwrap.dedent("""
    import socket, sys
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    data = b"x" * 100
    target = (sys.argv[1], 9999)
    for _ in range(int(sys.argv[2])):
        try:
            s.sendto(data, target)
        except BlockingIOError:
            pass
""")


def raw_udp(cluster: NetnsCluster, n: int) -> tuple[float, float]:
    a, b = cluster.members["A"], cluster.members["B"]
    rx = subprocess.Popen(
        ["ip", "netns", "exec", b.netns, sys.executable, "-c", RAW_RECEIVER, b.ip], stdout=subprocess.PIPE, text=True
    )
    try:
        assert rx.stdout is not None and rx.stdout.readline().strip() == "ready"
        subprocess.run(["ip", "netns", "exec", a.netns, sys.executable, "-c", RAW_SENDER, b.ip, str(n)], check=True)
        received, seconds = rx.stdout.readline().split()
    finally:
        rx.wait(10)
    got = int(received)
    return got / max(float(seconds), 1e-9), 1 - got / n


def unicast3(cluster: NetnsCluster, n: int) -> tuple[float, int]:
    before = cluster.control("B", "stats")["counters"]["unicast3"]["msgs_delivered"]
    start = time.monotonic()
    cluster.control("A", "send", to="B", count=n, size=100)
    peak_rss = 0
    while True:
        stats = cluster.control("B", "stats")
        peak_rss = max(peak_rss, stats["max_rss_kib"], cluster.control("A", "stats")["max_rss_kib"])
        if stats["counters"]["unicast3"]["msgs_delivered"] - before >= n:
            break
        if time.monotonic() - start > 300:
            raise RuntimeError("UNICAST3 benchmark did not finish in 300 s")
        time.sleep(0.01)
    return n / (time.monotonic() - start), peak_rss


FAST_MEMBERSHIP = {
    "fd": {"interval": "0.5s", "timeout": "2s", "timeout_check_interval": "0.5s"},
    "merge": {"min_interval": "0.5s", "max_interval": "2s"},
    "gms": {"join_timeout": "1s", "discovery_timeout": "1s"},
}


def nakack2(cluster: NetnsCluster, n: int) -> tuple[float, int]:
    """A multicasts n 100-byte messages as fast as it can; the rate is n / time until both receivers had all."""

    def got(name: str) -> int:
        return cluster.control(name, "stats")["counters"]["nakack2"]["msgs_delivered"]

    before = {m: got(m) for m in ("B", "C")}
    start = time.monotonic()
    cluster.control("A", "multicast", count=n, size=100)
    peak_rss = 0
    while any(got(m) - before[m] < n for m in ("B", "C")):
        peak_rss = max(peak_rss, cluster.control("B", "stats")["max_rss_kib"])
        if time.monotonic() - start > 300:
            raise RuntimeError("NAKACK2 benchmark did not finish in 300 s")
        time.sleep(0.01)
    return n / (time.monotonic() - start), peak_rss


def wait_one_view(cluster: NetnsCluster, size: int) -> None:
    def agreed() -> bool:
        vs = [cluster.control(m, "view")["view"] for m in cluster.members]
        return all(v and len(v["members"]) == size for v in vs) and len({v["view_id"] for v in vs}) == 1

    cluster.wait_until(agreed, 30, f"one view of {size}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    check_netns_available()
    for transport in ("udp", "tcp"):
        with NetnsCluster(ClusterSpec(["A", "B"], transport=transport, backend="netns")) as cluster:
            cluster.start()
            idle_rss = cluster.control("B", "stats")["max_rss_kib"]
            if transport == "udp":
                raw = [raw_udp(cluster, args.messages) for _ in range(args.repeats)]
                rate = statistics.median(r[0] for r in raw)
                report(
                    "raw UDP, plain Python socket pair, 100 B",
                    rate,
                    "datagrams/s",
                    f"(median of {args.repeats}; loss {statistics.median(r[1] for r in raw):.1%})",
                )
            runs = [unicast3(cluster, args.messages) for _ in range(args.repeats)]
            u3 = statistics.median(r[0] for r in runs)
            peak = max(r[1] for r in runs)
            note = f"(median of {args.repeats}; RSS idle {idle_rss / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB)"
            report(f"UNICAST3 over {transport.upper()}, A -> B, 100 B, reliable", u3, "msgs/s", note)
            if transport == "udp":
                report("  ratio UNICAST3 / raw UDP", u3 / rate, "x")
    spec = ClusterSpec(["A", "B", "C"], stack="unicast3+nakack2", properties=FAST_MEMBERSHIP, backend="netns")
    with NetnsCluster(spec) as cluster:
        cluster.start()
        wait_one_view(cluster, 3)
        runs = [nakack2(cluster, args.messages) for _ in range(args.repeats)]
        peak = max(r[1] for r in runs)
        report(
            "NAKACK2 over UDP multicast, 3 members, per receiver",
            statistics.median(r[0] for r in runs),
            "msgs/s",
            f"(median of {args.repeats}; receiver RSS peak {peak / 1024:.0f} MiB)",
        )


if __name__ == "__main__":
    main()

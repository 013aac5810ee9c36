"""Real-network throughput between two members in network namespaces (root), next to the raw UDP rate of a plain
Python socket pair in the same namespaces, measured in the same run; then the same between Docker containers (the
docker backend), with the ratio to netns, the member containers' memory and `up` times for 3 and 10 members.

- raw UDP: a blocking receiver counts SIZE-byte datagrams (100 unless --size) while a sender blasts them (no
  reliability: loss counts), both in the interpreter the members run (orchestration/host/member_python.py);
- UNICAST3 over UDP and over TCP: member A sends N SIZE-byte messages to B as fast as its window allows; the rate is
  N / (time until B delivered all N), exactly once and in order (checked by the tests, not here).
- docker: a running engine is used; as root without one, one is started for the run and stopped after it.
Run: python -m bench.bench_network [--messages 200000] [--repeats 3] [--backends netns,docker] [--size 100]
(--size 1000 compares with JGroups 2.12 at 1000 B: UNICAST 58.5k, UNICAST2 83.8k msgs/s, NAKACK 70.7k per receiver.)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import textwrap
import time
from typing import Any

from bench.common import report
from orchestration.backends import backend_class
from orchestration.backends.netns import NetnsCluster, check_netns_available
from orchestration.cluster import ClusterSpec, member_names
from orchestration.host.member_python import member_python

SIZE = 100  # message payload bytes (--size)
# JGroups 2.12.2 (Debian's libjgroups-java) at 1000 B on this machine kind, issue #14's anchor (another day, another
# harness): msgs/s. bench_jgroups measures the jar's member in the same run, with histories on both sides
# (2026-11-26, three runs at load 4-6.6: UNICAST2 37.6-87.2k, NAKACK 65.1-69.2k per receiver).
JGROUPS_1000B = {"UNICAST": 58_500, "UNICAST2": 83_800, "NAKACK per receiver": 70_700}
SAME_RUN = "(bench_jgroups measures JGroups in the same run)"
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
            s.recv(65536)
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
    data = b"x" * int(sys.argv[3])
    target = (sys.argv[1], 9999)
    for _ in range(int(sys.argv[2])):
        try:
            s.sendto(data, target)
        except BlockingIOError:
            pass
""")


def raw_udp(cluster: NetnsCluster, n: int) -> tuple[float, float]:
    """Plain datagrams between A's and B's namespaces, in the interpreter the members run (member_python)."""
    a, b = cluster.members["A"], cluster.members["B"]
    python = member_python()
    rx = subprocess.Popen(
        ["ip", "netns", "exec", b.netns, python, "-c", RAW_RECEIVER, b.ip], stdout=subprocess.PIPE, text=True
    )
    try:
        assert rx.stdout is not None and rx.stdout.readline().strip() == "ready"
        subprocess.run(["ip", "netns", "exec", a.netns, python, "-c", RAW_SENDER, b.ip, str(n), str(SIZE)], check=True)
        received, seconds = rx.stdout.readline().split()
    finally:
        rx.wait(10)
    got = int(received)
    return got / max(float(seconds), 1e-9), 1 - got / n


def poll_interval(done: int, n: int, elapsed: float) -> float:
    """How long to wait before asking the receivers again: half the time the rate so far says is left, within
    10-250 ms. Every `stats` request costs a receiver CPU that the measured protocol competes for (JGroups' driver
    asks nothing), so few while the messages flow and 10 ms resolution at the end."""
    if done <= 0:
        return 0.05
    return min(0.25, max(0.01, (n - done) * elapsed / done / 2))


def unicast3(cluster: NetnsCluster, n: int, size: int | None = None) -> tuple[float, int]:
    """A sends n messages of `size` bytes (default SIZE) to B as fast as it can; the rate is n / time until B had all.
    Peak RSS of both."""

    def got() -> int:
        return cluster.control("B", "stats")["counters"]["unicast3"]["msgs_delivered"]

    before = got()
    start = time.monotonic()
    cluster.control("A", "send", to="B", count=n, size=SIZE if size is None else size)
    while (done := got() - before) < n:
        if time.monotonic() - start > 300:
            raise RuntimeError("UNICAST3 benchmark did not finish in 300 s")
        time.sleep(poll_interval(done, n, time.monotonic() - start))
    seconds = time.monotonic() - start
    return n / seconds, max(cluster.control(m, "stats")["max_rss_kib"] for m in ("A", "B"))  # max RSS: never shrinks


FAST_MEMBERSHIP = {
    "fd": {"interval": "0.5s", "timeout": "2s", "timeout_check_interval": "0.5s"},
    "merge": {"min_interval": "0.5s", "max_interval": "2s"},
    "gms": {"join_timeout": "1s", "discovery_timeout": "1s"},
}


def nakack2(cluster: NetnsCluster, n: int, size: int | None = None, protocol: str = "nakack2") -> tuple[float, int]:
    """A multicasts n messages of `size` bytes (default SIZE) as fast as it can; the rate is n / time until both
    receivers had all, counted by the stack's multicast `protocol` (nakack2, or mcast)."""

    def got(name: str) -> int:
        return cluster.control(name, "stats")["counters"][protocol]["msgs_delivered"]

    before = {m: got(m) for m in ("B", "C")}
    start = time.monotonic()
    cluster.control("A", "multicast", count=n, size=SIZE if size is None else size)
    while (done := min(got(m) - before[m] for m in ("B", "C"))) < n:
        if time.monotonic() - start > 300:
            raise RuntimeError(f"{protocol.upper()} benchmark did not finish in 300 s")
        time.sleep(poll_interval(done, n, time.monotonic() - start))
    seconds = time.monotonic() - start
    return n / seconds, cluster.control("B", "stats")["max_rss_kib"]  # max RSS: never shrinks


def wait_one_view(cluster: NetnsCluster, size: int) -> None:
    def agreed() -> bool:
        vs = [cluster.control(m, "view")["view"] for m in cluster.members]
        return all(v and len(v["members"]) == size for v in vs) and len({v["view_id"] for v in vs}) == 1

    cluster.wait_until(agreed, 30, f"one view of {size}")


def throughput(backend: str, messages: int, repeats: int) -> dict[str, float]:
    """UNICAST3 (UDP) and NAKACK2 rates on one backend, medians of `repeats`; member RSS."""
    out: dict[str, float] = {}
    cls = backend_class(backend)
    with cls(ClusterSpec(["A", "B"], backend=backend)) as cluster:
        cluster.start()
        runs = [unicast3(cluster, messages) for _ in range(repeats)]
        out["unicast3"] = statistics.median(r[0] for r in runs)
        out["unicast3_rss"] = max(r[1] for r in runs)
        if backend == "docker":
            out["container_mem"] = max(container_memory(cluster, n) for n in cluster.members)
    spec = ClusterSpec(["A", "B", "C"], stack="unicast3+nakack2", properties=FAST_MEMBERSHIP, backend=backend)
    with cls(spec) as cluster:
        cluster.start()
        wait_one_view(cluster, 3)
        runs = [nakack2(cluster, messages) for _ in range(repeats)]
        out["nakack2"] = statistics.median(r[0] for r in runs)
        out["nakack2_rss"] = max(r[1] for r in runs)
    return out


def container_memory(cluster: Any, name: str) -> int:
    """Bytes the member's container uses (its cgroup: the member process and docker-init), as `docker stats`."""
    container = cluster._member_container(cluster.members[name])
    stats = container.stats(stream=False)["memory_stats"]
    return int(stats["usage"] - stats.get("stats", {}).get("total_inactive_file", 0))


def up_time(backend: str, members: int) -> float:
    """Seconds from nothing to every member answering (start returns when all are ready)."""
    started = time.monotonic()
    with backend_class(backend)(ClusterSpec(member_names(members), stack="unicast3", backend=backend)) as cluster:
        cluster.start()
        return time.monotonic() - started


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--backends", default="netns,docker", help="netns and/or docker, comma-separated")
    ap.add_argument("--size", type=int, default=100, help="message payload bytes (1000: JGroups' figures)")
    args = ap.parse_args(argv)
    global SIZE
    SIZE = args.size
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    check_netns_available()
    if "netns" in backends:
        netns_transports(args.messages, args.repeats)
    if "docker" in backends:
        docker_column(args.messages, args.repeats)


def docker_column(messages: int, repeats: int) -> None:
    """netns and docker side by side in this run: rates, the docker/netns ratio, memory, up times."""
    from orchestration.host import docker_engine, docker_images

    problem = docker_engine.unavailable_reason()
    if problem:
        print(f"docker: not measured ({problem})")
        return
    with docker_engine.engine() as client:
        image = docker_images.member_image(client, build_base=True)
        print(
            f"docker: engine {client.version()['Version']}, member image {image} "
            f"({client.images.get(image).attrs['Size'] / 1e6:.0f} MB)"
        )
        netns = throughput("netns", messages, repeats)
        docker = throughput("docker", messages, repeats)
        for key, name in (
            ("unicast3", f"UNICAST3 over UDP, A -> B, {SIZE} B"),
            ("nakack2", "NAKACK2, 3 members, per receiver"),
        ):
            report(f"{name}: netns", netns[key], "msgs/s", f"(median of {repeats})")
            report(f"{name}: docker", docker[key], "msgs/s", f"(median of {repeats})")
            report("  ratio docker / netns", docker[key] / netns[key], "x")
        report("member RSS under load, docker", docker["unicast3_rss"] / 1024, "MiB", "(max_rss of the member process)")
        report("member container memory, docker", docker["container_mem"] / 2**20, "MiB", "(cgroup, like docker stats)")
        for members in (3, 10):
            for backend in ("netns", "docker"):
                times = [up_time(backend, members) for _ in range(repeats)]
                report(f"up, {members} members: {backend}", statistics.median(times), "s", f"(median of {repeats})")


def netns_transports(messages: int, repeats: int) -> None:
    for transport in ("udp", "tcp"):
        with NetnsCluster(ClusterSpec(["A", "B"], transport=transport, backend="netns")) as cluster:
            cluster.start()
            idle_rss = cluster.control("B", "stats")["max_rss_kib"]
            if transport == "udp":
                raw = [raw_udp(cluster, messages) for _ in range(repeats)]
                rate = statistics.median(r[0] for r in raw)
                report(
                    f"raw UDP, plain Python socket pair, {SIZE} B",
                    rate,
                    "datagrams/s",
                    f"(median of {repeats}; loss {statistics.median(r[1] for r in raw):.1%})",
                )
            runs = [unicast3(cluster, messages) for _ in range(repeats)]
            u3 = statistics.median(r[0] for r in runs)
            peak = max(r[1] for r in runs)
            note = f"(median of {repeats}; RSS idle {idle_rss / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB)"
            report(f"UNICAST3 over {transport.upper()}, A -> B, {SIZE} B, reliable", u3, "msgs/s", note)
            if transport == "udp":
                report("  ratio UNICAST3 / raw UDP", u3 / rate, "x")
                if SIZE == 1000:
                    anchor = JGROUPS_1000B["UNICAST2"]
                    report("  ratio UNICAST3 / #14's JGroups UNICAST2 anchor", u3 / anchor, "x", SAME_RUN)
    spec = ClusterSpec(["A", "B", "C"], stack="unicast3+nakack2", properties=FAST_MEMBERSHIP, backend="netns")
    with NetnsCluster(spec) as cluster:
        cluster.start()
        wait_one_view(cluster, 3)
        runs = [nakack2(cluster, messages) for _ in range(repeats)]
        peak = max(r[1] for r in runs)
        nak = statistics.median(r[0] for r in runs)
        report(
            f"NAKACK2 over UDP multicast, 3 members, per receiver, {SIZE} B",
            nak,
            "msgs/s",
            f"(median of {repeats}; receiver RSS peak {peak / 1024:.0f} MiB)",
        )
        if SIZE == 1000:
            anchor = JGROUPS_1000B["NAKACK per receiver"]
            report("  ratio NAKACK2 / #14's JGroups NAKACK anchor", nak / anchor, "x", SAME_RUN)


if __name__ == "__main__":
    main()

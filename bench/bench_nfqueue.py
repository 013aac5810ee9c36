"""The NFQUEUE handler's cost (root): throughput and added one-way latency of the queue path next to the direct path,
measured side by side in one run, in two namespaces <label>-a -> <label>-b joined by a veth pair.

- throughput: a sender in a blasts 1-message datagrams (100 B payload) at b for --seconds; a receiver in b counts.
  Paths: direct (no iptables rule); through the handler with no rules (accept-all, batch verdicts); through the
  handler with a count rule that never triggers (every packet parsed and matched); and, for reference, through
  NetfilterQueue 1.1 with an accept-all callback. The handler's queue is fail-open, so when it cannot keep up the
  kernel lets the excess bypass it: "judged/s" is what went through the handler, "received/s" what arrived.
- latency: --rate datagrams/s with a send timestamp in the payload (one host clock), direct vs through the handler.
- judge(): the pure per-packet cost of Judge.judge, in-process.
Run: python -m bench.bench_nfqueue [--seconds 3] [--repeats 3] [--rate 2000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

from bench.common import median_time, report
from chaos.nfqueue import HandlerProcess, Judge, compile_rules
from node import wire
from orchestration.backends.netns import veth_pair
from orchestration.cluster import new_label

PORT = 7800
DATA = wire.header_class("UNICAST3", "DATA")
NEVER = {"id": "never", "match": "UNICAST3.DATA(seqno=18446744073709551615)", "action": "drop", "count": 1}

RECEIVER = textwrap.dedent("""
    import json, socket, struct, sys, time
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)  # SO_RCVBUFFORCE
    s.bind((sys.argv[1], int(sys.argv[2])))
    limit, stamped = float(sys.argv[3]), sys.argv[4] == "1"
    s.settimeout(1.0)
    print("ready", flush=True)
    n, first, last, lat = 0, None, None, []
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            d = s.recv(70000)
        except socket.timeout:
            if first is not None:
                break  # idle for a second after traffic: the sender is done
            continue
        last = time.monotonic()
        if first is None:
            first = last
        n += 1
        if stamped:
            lat.append(last - struct.unpack("!d", d[-8:])[0])
    print(json.dumps({"n": n, "seconds": (last - first) if n > 1 else 0.0, "lat": lat}), flush=True)
""")

SENDER = textwrap.dedent("""
    import socket, struct, sys, time
    dst, seconds, rate = (sys.argv[1], int(sys.argv[2])), float(sys.argv[3]), float(sys.argv[4])
    datagram = bytes.fromhex(sys.argv[5])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    head = datagram[:-8]
    sent, start = 0, time.monotonic()
    end = start + seconds
    if rate <= 0:  # blast
        while time.monotonic() < end:
            for _ in range(500):
                try:
                    s.sendto(datagram, dst)
                    sent += 1
                except OSError:
                    pass
    else:  # paced, with a send timestamp in the last 8 bytes
        while True:
            now = time.monotonic()
            if now >= end:
                break
            due = start + sent / rate
            if now < due:
                time.sleep(min(due - now, 0.001))
                continue
            s.sendto(head + struct.pack("!d", time.monotonic()), dst)
            sent += 1
    print(sent, flush=True)
""")

NFQ_REFERENCE = textwrap.dedent("""
    import sys
    from netfilterqueue import NetfilterQueue
    q = NetfilterQueue()
    q.bind(0, lambda p: p.accept(), max_len=4096)
    print("ready", flush=True)
    try:
        q.run()
    except KeyboardInterrupt:
        pass
    finally:
        q.unbind()
""")


def sh(*args: str, check: bool = True) -> None:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {proc.stderr.strip()}")


class Pair:
    def __init__(self) -> None:
        self.label = new_label()
        self.sock_path = f"/tmp/{self.label}-b.nfq.sock"
        self._link = contextlib.ExitStack()

    def up(self) -> None:
        link = self._link.enter_context(veth_pair(self.label))
        self.ns_a, self.ns_b, self.ip_a, self.ip_b = link.ns_a, link.ns_b, link.ip_a, link.ip_b

    def down(self) -> None:
        self._link.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.sock_path)

    def queue_rule(self, on: bool) -> None:
        rule = ["-s", self.ip_a, "-p", "udp", "-j", "NFQUEUE", "--queue-num", "0", "--queue-bypass"]
        sh("ip", "netns", "exec", self.ns_b, "iptables", "-A" if on else "-D", "INPUT", *rule)

    def py(self, ns: str, script: str, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-c", script, *args],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )

    def transfer(self, seconds: float, rate: float) -> dict[str, Any]:
        """One sender run (blast if rate <= 0) into a fresh receiver; the receiver's figures."""
        datagram = wire.encode_datagram("bench", "A:1", "B:1", [DATA(1, 1, False, b"x" * 100)])
        rx = self.py(self.ns_b, RECEIVER, self.ip_b, str(PORT), str(seconds + 10), "1" if rate > 0 else "0")
        try:
            assert rx.stdout is not None and rx.stdout.readline().strip() == "ready"
            tx = self.py(self.ns_a, SENDER, self.ip_b, str(PORT), str(seconds), str(rate), datagram.hex())
            out, _ = tx.communicate(timeout=seconds + 30)
            result = json.loads(rx.stdout.readline())
            result["sent"] = int(out.strip() or 0)
            return result
        finally:
            rx.wait(seconds + 30)
            if rx.stdout:
                rx.stdout.close()


@contextlib.contextmanager
def namespaces() -> Iterator[Pair]:
    pair = Pair()
    try:
        pair.up()
        yield pair
    finally:
        pair.down()


def throughput(pair: Pair, seconds: float, repeats: int, handler: HandlerProcess | None) -> dict[str, float]:
    """Medians over repeats: received/s, judged by the handler/s, sent/s, and the share of received packets that
    bypassed the handler (fail-open when its queue was full)."""
    runs = []
    for _ in range(repeats):
        before = handler.stats()["packets"] if handler else 0
        r = pair.transfer(seconds, 0)
        judged = (handler.stats()["packets"] - before) if handler else 0
        runs.append(
            {
                "received": r["n"] / max(r["seconds"], 1e-9),
                "judged": judged / seconds,
                "sent": r["sent"] / seconds,
                "bypassed": max(0.0, 1 - judged / r["n"]) if handler and r["n"] else 0.0,
            }
        )
    return {k: statistics.median(run[k] for run in runs) for k in runs[0]}


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def judge_cost() -> None:
    never = Judge(compile_rules([NEVER]))
    one = _ip_udp(wire.encode_datagram("bench", "A:1", "B:1", [DATA(1, 1, False, b"x" * 100)]))
    five = _ip_udp(wire.encode_datagram("bench", "A:1", "B:1", [DATA(i, 1, False, b"x" * 100) for i in range(5)]))
    strip = Judge(compile_rules([{"id": "s", "match": "UNICAST3.DATA(seqno=2)", "action": "drop"}]))
    for name, eng, pkt in (
        ("judge(): never-matching rule, 1-message datagram", never, one),
        ("judge(): never-matching rule, 5-message datagram", never, five),
        ("judge(): strip 1 of 5 messages (rewrite)", strip, five),
    ):
        t = median_time(lambda e=eng, p=pkt: [e.judge(p) for _ in range(10_000)], repeats=5)
        report(name, t / 10_000 * 1e6, "us/packet", "(in-process, median of 5)")


def _ip_udp(payload: bytes) -> bytes:
    import socket
    import struct

    from chaos.nfqueue import ip_checksum

    udp = struct.pack("!HHHH", 40000, PORT, 8 + len(payload), 0) + payload
    hdr = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + len(udp),
        1,
        0,
        64,
        17,
        0,
        socket.inet_aton("10.0.0.1"),
        socket.inet_aton("10.0.0.2"),
    )
    return hdr[:10] + struct.pack("!H", ip_checksum(hdr)) + hdr[12:] + udp


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=3.0, help="length of one blast")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rate", type=float, default=2000, help="datagrams/s for the latency runs")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench_nfqueue needs root (network namespaces, iptables, NFQUEUE)")
    judge_cost()
    with namespaces() as pair:
        handler: HandlerProcess | None = None
        try:
            direct = throughput(pair, args.seconds, args.repeats, None)
            report("blast, direct (no queue rule)", direct["received"], "received/s", f"(sent {direct['sent']:,.0f}/s)")
            lat_direct = pair.transfer(args.seconds, args.rate)["lat"]

            handler = HandlerProcess.start(pair.ns_b, 0, pair.sock_path, tag=pair.label, local_ip=pair.ip_b)
            pair.queue_rule(True)
            judged = 0.0
            for name, rules in (("no rules", []), ("never-matching count rule", [NEVER])):
                handler.set_rules(rules)
                t = throughput(pair, args.seconds, args.repeats, handler)
                judged = t["judged"]
                report(
                    f"blast, through the handler, {name}",
                    t["received"],
                    "received/s",
                    f"(sent {t['sent']:,.0f}/s; judged {t['judged']:,.0f}/s; bypassed {t['bypassed']:.1%})",
                )
            report("  ratio judged/s with the count rule / direct received/s", judged / direct["received"], "x")
            lat_queue = pair.transfer(args.seconds, args.rate)["lat"]
            stats = handler.stop()
            handler = None
            q = stats["queue"]
            print(
                f"  handler totals: packets {stats['packets']:,}, unparsed {stats['unparsed']}, missed ids "
                f"{stats['missed_ids']:,}, queue_dropped {q.get('queue_dropped')}, user_dropped "
                f"{q.get('queue_user_dropped')}, max_held {stats['max_held']}"
            )
            for name, lat in (("direct", lat_direct), ("through the handler", lat_queue)):
                ms = [x * 1000 for x in lat]
                report(
                    f"one-way latency at {args.rate:,.0f}/s, {name}",
                    statistics.median(ms),
                    "ms median",
                    f"p99 {percentile(ms, 0.99):.3f} ms (n={len(ms)})",
                )
            added = statistics.median(lat_queue) - statistics.median(lat_direct)
            added_p99 = percentile(lat_queue, 0.99) - percentile(lat_direct, 0.99)
            report("  added by the queue path", added * 1e6, "us median", f"p99 +{added_p99 * 1e6:,.0f} us")
            report(
                "  ratio of median one-way latency, handler / direct",
                statistics.median(lat_queue) / statistics.median(lat_direct),
                "x",
            )

            try:
                import netfilterqueue  # noqa: F401
            except ImportError:
                print("(NetfilterQueue reference skipped: not installed)")
            else:
                ref = pair.py(pair.ns_b, NFQ_REFERENCE)
                try:
                    assert ref.stdout is not None and ref.stdout.readline().strip() == "ready"
                    t = throughput(pair, args.seconds, args.repeats, None)
                    report(
                        "blast, through NetfilterQueue 1.1 accept-all (reference)",
                        t["received"],
                        "received/s",
                        f"(sent {t['sent']:,.0f}/s; no fail-open: a full queue drops)",
                    )
                finally:
                    ref.terminate()
                    ref.wait(10)
                    if ref.stdout:
                        ref.stdout.close()
            pair.queue_rule(False)
        finally:
            if handler is not None:
                handler.terminate()


if __name__ == "__main__":
    main()

"""The wire tap: a passive observer of a cluster's datagrams, in the namespace of the cluster's switch.

    python -m chaos.wiretap --wire W --out FILE --port IFACE=MEMBER ... --ip ADDRESS=MEMBER ... [--bin-ms 100]
                            [--max-seconds S]

One AF_PACKET socket sees every frame in the namespace; a frame that enters a member's port (the switch side of its
veth: what that member sent) is read as IPv4 + UDP, its payload's messages named by the wire's key reader
(chaos/wire_keys.py), and counted per (time bin, sender, receiver, key): the receiver is the member whose address it
is sent to, `*` for the multicast group. Nothing is held or changed: the frames go on through the bridge as they
would without it, and a fault's rules (in the receivers' namespaces) act after the tap has seen them. A TCP segment
with a payload counts as `tcp` (a stream's messages do not align with its segments).

It prints one ready line (`{"ready": true}`) once its socket is bound, and on SIGTERM writes FILE (JSON lines: the
counts, `{"bin", "src", "dst", "key", "n"}` with bin = CLOCK_MONOTONIC ns // (bin_ms * 1e6), then one `end` line with
its totals: frames seen, datagrams read, not read, and frames the kernel dropped because the tap fell behind), then
exits. It exits the same way when its parent goes away or after --max-seconds, so a tap never outlives its run.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from collections import Counter
from pathlib import Path

from chaos.wire_keys import KeyReader, reader_for

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
PACKET_OUTGOING = 4
SOL_PACKET = 263
PACKET_STATISTICS = 6
RCVBUF = 8 << 20
POLL_S = 0.25
_STATS = struct.Struct("II")  # struct tpacket_stats: tp_packets, tp_drops
TCP_KEY = "tcp"
WIRE_FILE = "wire.jsonl"  # its file in a run folder (orchestration/backends/netns_tap.py, explore/coverage.py)


class Tally:
    """The counts: (bin, src, dst, key) -> datagrams, plus the totals."""

    def __init__(self, ports: dict[str, str], ips: dict[str, str], reader: KeyReader, bin_ns: int) -> None:
        self.ports, self.ips, self.reader, self.bin_ns = ports, ips, reader, bin_ns
        self.counts: Counter[tuple[int, str, str, str]] = Counter()
        self.frames = self.read = self.unread = 0

    def frame(self, ifname: str, pkttype: int, frame: bytes, now_ns: int) -> None:
        src = self.ports.get(ifname)
        if src is None or pkttype == PACKET_OUTGOING:
            return  # another interface, or what the switch forwards to the member
        self.frames += 1
        seen = ip_payload(frame)
        if seen is None:
            return
        proto, dst_ip, payload = seen
        dst = self.ips.get(dst_ip, "*" if is_multicast(dst_ip) else None)
        if dst is None:
            return
        if proto == socket.IPPROTO_TCP:
            keys: list[str] | None = [TCP_KEY] if payload else []
        else:
            keys = self.reader(payload)
        if keys is None:
            self.unread += 1
            return
        self.read += 1
        b = now_ns // self.bin_ns
        for key in keys:
            self.counts[(b, src, dst, key)] += 1

    def lines(self, kernel_drops: int) -> list[str]:
        out = [
            json.dumps({"bin": b, "src": s, "dst": d, "key": k, "n": n})
            for (b, s, d, k), n in sorted(self.counts.items())
        ]
        end: dict[str, object] = {"event": "end", "frames": self.frames, "read": self.read, "unread": self.unread}
        end |= {"kernel_drops": kernel_drops, "bin_ms": self.bin_ns // 1_000_000}
        return [*out, json.dumps(end)]


def ip_payload(frame: bytes) -> tuple[int, str, bytes] | None:
    """(IP protocol, destination address, UDP payload or TCP segment payload) of an Ethernet frame carrying the
    first (or only) fragment of an IPv4 UDP/TCP packet; None for anything else."""
    if len(frame) < 34 or struct.unpack_from("!H", frame, 12)[0] != ETH_P_IP:
        return None
    ihl = (frame[14] & 0x0F) * 4
    proto = frame[23]
    if struct.unpack_from("!H", frame, 20)[0] & 0x1FFF:  # a later fragment: no transport header
        return None
    total = struct.unpack_from("!H", frame, 16)[0]
    end = min(len(frame), 14 + total)
    dst = socket.inet_ntoa(frame[30:34])
    l4 = 14 + ihl
    if proto == socket.IPPROTO_UDP and end >= l4 + 8:
        return proto, dst, frame[l4 + 8 : end]
    if proto == socket.IPPROTO_TCP and end >= l4 + 20:
        return proto, dst, frame[l4 + (frame[l4 + 12] >> 4) * 4 : end]
    return None


def is_multicast(ip: str) -> bool:
    return 224 <= int(ip.split(".", 1)[0]) <= 239


def kernel_drops(sock: socket.socket) -> int:
    try:
        return _STATS.unpack(sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, _STATS.size))[1]
    except OSError:
        return 0


def pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k or not v:
            raise SystemExit(f"wiretap: --{what} wants KEY=MEMBER, not {item!r}")
        out[k] = v
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m chaos.wiretap", description=__doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--wire", required=True)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--port", action="append", default=[])
    p.add_argument("--ip", action="append", default=[])
    p.add_argument("--bin-ms", type=int, default=100)
    p.add_argument("--max-seconds", type=float, default=600.0)
    args = p.parse_args(argv)
    reader = reader_for(args.wire)
    if reader is None:
        print(json.dumps({"ready": False, "error": f"no key reader for wire {args.wire!r}"}), flush=True)
        return 2
    tally = Tally(pairs(args.port, "port"), pairs(args.ip, "ip"), reader, args.bin_ms * 1_000_000)
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    except OSError as e:
        print(json.dumps({"ready": False, "error": f"cannot open a packet socket: {e}"}), flush=True)
        return 2
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    parent, deadline = os.getppid(), time.monotonic() + args.max_seconds
    print(json.dumps({"ready": True}), flush=True)
    sys.stdout.close()
    while not stop and os.getppid() == parent and time.monotonic() < deadline:
        try:
            ready, _, _ = select.select([sock], [], [], POLL_S)
        except InterruptedError:
            continue
        while ready and not stop:
            try:
                frame, addr = sock.recvfrom(65535, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            tally.frame(addr[0], addr[2], frame, time.monotonic_ns())
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text("\n".join(tally.lines(kernel_drops(sock))) + "\n")
    tmp.replace(args.out)
    sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

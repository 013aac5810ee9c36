"""What the NFQUEUE judge costs per datagram on each wire it reads (no root: in-process, CPU time, median of 5 runs
of 5,000 judgements, side by side in one run): chaosbed's own wire (node/wire.py datagrams), JGroups 2.12's and
JGroups 5's (the golden datagrams captured from real members, tests/fixtures/), each with a rule that never matches
(every datagram walked and every message tested) and with one that cuts one message out of a list; and the decoders'
full decode of the same datagrams, for comparison.

    python -m bench.bench_wire_judge
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import median_time, report
from chaos.nfqueue import Judge, compile_rules
from chaos.nfqueue.ipudp import with_udp_payload
from chaos.profiles import jgroups5, jgroups212
from node import wire

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
N = 5_000


def _packet(payload: bytes) -> bytes:
    import socket
    import struct

    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 0, 1, 0, 64, 17, 0, socket.inet_aton("10.0.0.1"), socket.inet_aton("10.0.0.2")
    )
    return with_udp_payload(ip + struct.pack("!HHHH", 7800, 7800, 8, 0), payload)


def _golden(path: Path, kind: str) -> bytes:
    for line in path.read_text().splitlines():
        d = json.loads(line)
        if d["kind"] == kind:
            return bytes.fromhex(d["hex"])
    raise SystemExit(f"no {kind} in {path}: capture again")


def _golden_list(path: Path, key: str, tp: str) -> bytes:
    """The longest golden LIST whose every message is [key, tp]."""
    best: tuple[int, bytes] = (0, b"")
    for line in path.read_text().splitlines():
        d = json.loads(line)
        n = d["kind"].count(f"[{key} {tp}]")
        if d["kind"].startswith("LIST") and n > best[0] and d["kind"].count("[") == n:
            best = (n, bytes.fromhex(d["hex"]))
    if best[0] < 2:
        raise SystemExit(f"no LIST of several [{key} {tp}] in {path}: capture again")
    return best[1]


def _judge(wire_name: str, match: str) -> Judge:
    spec = {"id": "r", "match": match, "action": "drop"}
    return Judge(compile_rules([{**spec, "wire": wire_name} if wire_name != "chaosbed" else spec]))


def _each(fn: Callable[[], object]) -> float:
    """µs of CPU per call of fn (median of 5 runs of N calls)."""
    return median_time(lambda: [fn() for _ in range(N)], repeats=5, clock=time.process_time) / N * 1e6


def main() -> None:
    data = wire.header_class("UNICAST3", "DATA")
    ours = wire.encode_datagram("bench", "A:1", "B:1", [data(i, 1, False, b"x" * 100) for i in range(1, 6)])
    j212, j5 = FIXTURES / "jgroups212" / "datagrams.jsonl", FIXTURES / "jgroups5" / "udp" / "datagrams.jsonl"
    list212, list5 = _golden_list(j212, "NAKACK.MSG", "UDP"), _golden_list(j5, "UNICAST3.DATA", "TP")
    seqno212 = jgroups212.decode(list212).messages[1].headers[0].fields["seqno"]
    seqno5 = jgroups5.decode(list5).messages[1].headers[0].fields["seqno"]
    cases = [
        ("chaosbed", "5 messages (UNICAST3.DATA)", ours, "UNICAST3.DATA(seqno=9999)", "UNICAST3.DATA(seqno=3)"),
        ("jgroups-2.12", "SINGLE [UNICAST2.DATA UDP]", _golden(j212, "SINGLE [UNICAST2.DATA UDP]"),
         "UNICAST2.DATA(seqno=9999)", None),
        ("jgroups-2.12", f"LIST of {len(jgroups212.decode(list212).messages)} [NAKACK.MSG UDP]", list212,
         "NAKACK.MSG(seqno=9999)", f"NAKACK.MSG(seqno={seqno212})"),
        ("jgroups-5", "SINGLE [UNICAST3.DATA TP]", _golden(j5, "SINGLE [UNICAST3.DATA TP]"),
         "UNICAST3.DATA(seqno=9999)", None),
        ("jgroups-5", f"LIST of {jgroups5.decode(list5).count} [UNICAST3.DATA TP]", list5,
         "UNICAST3.DATA(seqno=9999)", f"UNICAST3.DATA(seqno={seqno5})"),
    ]  # fmt: skip
    decoders = {"chaosbed": wire.decode_datagram, "jgroups-2.12": jgroups212.decode, "jgroups-5": jgroups5.decode}
    for name, shape, payload, never, cut in cases:
        pkt = _packet(payload)
        walk = _judge(name, never)
        report(f"{name}: {shape}, a never-matching rule", _each(lambda j=walk, p=pkt: j.judge(p)), "us/datagram")
        if cut is not None:
            judge = _judge(name, cut)
            assert judge.judge(pkt)[1] is not None, f"{cut} cut nothing from {shape}"
            report(f"{name}: {shape}, cut one out", _each(lambda j=judge, p=pkt: _fresh(j).judge(p)), "us/datagram")
        report(f"{name}: {shape}, the full decode", _each(lambda d=decoders[name], p=payload: d(p)), "us/datagram")


def _fresh(j: Judge) -> Judge:
    """The judge with its counts reset, so a `count`-less rule cuts again on every call."""
    for r in j.rules:
        r.reset()
    return j


if __name__ == "__main__":
    main()

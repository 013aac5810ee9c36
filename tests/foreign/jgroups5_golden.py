"""The golden JGroups 5 datagrams (tests/fixtures/jgroups5/: the udp run, UNICAST3 + NAKACK2, and the nakack4 run,
NAKACK4 + UNICAST4, both captured from real members by foreign/jgroups/capture5.py), as the tests of the jgroups-5
profile read them."""

from __future__ import annotations

import json
import socket
import struct
from functools import cache
from pathlib import Path
from typing import Any

from chaos.nfqueue.ipudp import with_udp_payload

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "jgroups5"
RUNS = ("udp", "nakack4")
WIRE = "jgroups-5"


@cache
def golden() -> tuple[dict[str, Any], ...]:
    """Every kept datagram of both runs, each with its run's name under "run"."""
    out = []
    for run in RUNS:
        with open(FIXTURES / run / "datagrams.jsonl") as f:
            out += [{**json.loads(line), "run": run} for line in f]
    return tuple(out)


def data_of(d: dict[str, Any]) -> bytes:
    return bytes.fromhex(d["hex"])


def name_of(d: dict[str, Any]) -> str:
    return f"{d['run']}/n={d['n']} {d['kind']}"


@cache
def meta(run: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((FIXTURES / run / "capture.json").read_text())
    return result


def histories(run: str) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for path in sorted((FIXTURES / run / "history").glob("*.jsonl")):
        out[path.stem] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def packet(payload: bytes, src: str = "10.0.0.1") -> bytes:
    """The datagram as the kernel and the queue see it: an IPv4/UDP packet without options."""
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 0, 1, 0, 64, 17, 0, socket.inet_aton(src), socket.inet_aton("10.0.0.2"))
    return with_udp_payload(ip + struct.pack("!HHHH", 7800, 7800, 8, 0), payload)

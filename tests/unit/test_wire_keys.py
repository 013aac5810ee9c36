"""chaos/wire_keys.py: the message keys of real datagrams (the captures of tests/fixtures/, each with the kind the
capture tool wrote from the jar's own reading) and of chaosbed's wire; what no wire can read gives None."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from chaos.wire_keys import APPLICATION, TRANSPORT_HEADERS, reader_for
from node import wire

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CAPTURES = [
    (FIXTURES / "jgroups212" / "datagrams.jsonl", "jgroups-2.12"),
    (FIXTURES / "jgroups212" / "unicast" / "datagrams.jsonl", "jgroups-2.12"),
    (FIXTURES / "jgroups5" / "udp" / "datagrams.jsonl", "jgroups-5"),
    (FIXTURES / "jgroups5" / "nakack4" / "datagrams.jsonl", "jgroups-5"),
]


def expected_keys(kind: str) -> list[str]:
    """The keys a capture's `kind` ("LIST mcast [GMS.VIEW NAKACK2.MSG TP] [FD_ALL3 TP]") names, transport left out."""
    out: list[str] = []
    for group in re.findall(r"\[([^\]]*)\]", kind):
        keys = [k for k in group.split() if k not in TRANSPORT_HEADERS]
        out += keys or [APPLICATION]
    return out


@pytest.mark.parametrize(("path", "wire_name"), CAPTURES, ids=lambda v: str(v).split("fixtures/")[-1])
def test_every_captured_datagram_gives_the_keys_of_its_messages(path: Path, wire_name: str) -> None:
    read = reader_for(wire_name)
    assert read is not None
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert len(lines) > 10
    for d in lines:
        assert read(bytes.fromhex(d["hex"])) == expected_keys(d["kind"]), d["kind"]


def test_chaosbed_datagrams_give_their_header_keys() -> None:
    ack = wire.header_class("UNICAST3", "ACK")
    msgs = [ack(50, 1, 0), wire.header_class("UNICAST3", "CLOSE")(7)]
    read = reader_for("chaosbed")
    assert read is not None
    assert read(wire.encode_datagram("c1", "A", "B", msgs)) == ["UNICAST3.ACK", "UNICAST3.CLOSE"]


@pytest.mark.parametrize("wire_name", ["chaosbed", "jgroups-2.12", "jgroups-5"])
@pytest.mark.parametrize("payload", [b"", b"\x00", b"hello world, not a datagram", bytes(range(256))])
def test_what_a_wire_cannot_read_gives_none(wire_name: str, payload: bytes) -> None:
    read = reader_for(wire_name)
    assert read is not None and read(payload) is None


def test_a_system_without_a_wire_profile_has_no_reader() -> None:
    assert reader_for("none") is None

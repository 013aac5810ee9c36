"""The wire format: every header type round-trips; malformed input raises WireError and nothing else."""

from __future__ import annotations

import contextlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node import wire
from node.stack import build_stack

FIXED_MAX = {"u8": 0xFF, "u16": 0xFFFF, "u32": 0xFFFF_FFFF, "u64": 0xFFFF_FFFF_FFFF_FFFF}


def sample_value(kind: str, rng: random.Random):
    if kind == "bool":
        return rng.random() < 0.5
    if kind in FIXED_MAX:
        return rng.choice([0, 1, FIXED_MAX[kind], rng.randrange(FIXED_MAX[kind])])
    if kind == "ranges":
        out, lo = [], 1
        for _ in range(rng.randrange(0, 5)):
            first = lo + rng.randrange(0, 10)
            last = first + rng.randrange(0, 10)
            out.append((first, last))
            lo = last + 2
        return tuple(out)
    if kind == "str":
        return rng.choice(["", "A", "member-ü"])
    if kind == "viewid":
        return wire.ViewId(rng.choice(["A", "B/2"]), rng.randrange(1 << 40))
    if kind == "view":
        members = tuple(rng.sample(["A", "B", "C/3", "D"], rng.randrange(1, 5)))
        merged = tuple(sample_value("viewid", rng) for _ in range(rng.randrange(0, 3)))
        return wire.View(sample_value("viewid", rng), members, merged)
    if kind == "digest":
        return {m: (rng.randrange(100), rng.randrange(100, 200)) for m in rng.sample(["A", "B", "C"], rng.randrange(4))}
    raise AssertionError(kind)


def sample_message(spec: wire.HeaderSpec, rng: random.Random, payload: bytes = b""):
    return spec.cls(*[sample_value(f.kind, rng) for f in spec.fields], payload)


@pytest.mark.parametrize("key", sorted(wire.SPECS))
def test_every_header_type_round_trips(key: str) -> None:
    spec = wire.SPECS[key]
    rng = random.Random(key)
    for payload in (b"", b"hello", bytes(range(256)) * 10):
        msg = sample_message(spec, rng, payload)
        out: list[bytes] = []
        wire.encode_message(msg, out)
        data = b"".join(out)
        decoded, end = wire.decode_message(data, 0)
        assert end == len(data) == wire.message_size(msg)
        assert decoded == msg
        assert type(decoded) is spec.cls
        assert (spec.protocol, spec.name) == (decoded.PROTOCOL, decoded.NAME)


def test_batch_datagram_round_trips_in_order() -> None:
    rng = random.Random(1)
    msgs = [sample_message(spec, rng, b"p%d" % i) for i, spec in enumerate(list(wire.SPECS.values()) * 3)]
    data = wire.encode_datagram("c1", "A/2", "B", msgs)
    d = wire.decode_datagram(data)
    assert (d.cluster, d.src, d.dest, d.multicast) == ("c1", "A/2", "B", False)
    assert d.messages == msgs
    mc = wire.decode_datagram(wire.encode_datagram("c1", "A", None, msgs[:1]))
    assert mc.multicast and mc.dest == ""


def test_header_class_lookup_names_known_headers() -> None:
    assert wire.header_class("UNICAST3", "ACK")._fields == ("seqno", "conn_id", "timestamp", "payload")
    with pytest.raises(KeyError, match=r"UNICAST3\.ACK"):
        wire.header_class("UNICAST3", "NOPE")


def test_encode_rejects_out_of_range_values() -> None:
    ack = wire.header_class("UNICAST3", "ACK")
    with pytest.raises(wire.WireError):
        wire.encode_datagram("c", "A", "B", [ack(-1, 0, 0)])
    with pytest.raises(wire.WireError):
        wire.encode_datagram("c", "A", "B", [])
    with pytest.raises(wire.WireError):
        wire.encode_datagram("c", "x" * 300, "B", [ack(1, 1, 1)])


def _valid_datagram() -> bytes:
    rng = random.Random(7)
    msgs = [sample_message(spec, rng, b"data") for spec in wire.SPECS.values()]
    return wire.encode_datagram("cl", "A", "B", msgs)


def test_every_truncation_is_a_wire_error() -> None:
    data = _valid_datagram()
    for n in range(len(data)):
        with pytest.raises(wire.WireError):
            wire.decode_datagram(data[:n])


def test_wrong_version_magic_trailing_bytes_and_unknown_types() -> None:
    data = bytearray(_valid_datagram())
    bad_version = bytes([data[0], wire.WIRE_VERSION + 1, *data[2:]])
    with pytest.raises(wire.WireError, match="version"):
        wire.decode_datagram(bad_version)
    with pytest.raises(wire.WireError, match="magic"):
        wire.decode_datagram(b"\x00" + bytes(data[1:]))
    with pytest.raises(wire.WireError, match="trailing"):
        wire.decode_datagram(bytes(data) + b"\x00")
    # first message starts after the fixed head + 3 strings + count
    pos = 3 + 3 + len("cl") + len("A") + len("B") + 2
    unknown = bytes(data[:pos]) + bytes([250, 0]) + bytes(data[pos + 2 :])
    with pytest.raises(wire.WireError, match="unknown protocol"):
        wire.decode_datagram(unknown)
    flag_mismatch = bytes([data[0], data[1], wire.FLAG_MULTICAST, *data[3:]])
    with pytest.raises(wire.WireError, match="multicast"):
        wire.decode_datagram(flag_mismatch)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_wire_error(data: bytes) -> None:
    with contextlib.suppress(wire.WireError):
        wire.decode_datagram(data)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_valid_datagrams_raise_only_wire_error(data: st.DataObject) -> None:
    raw = bytearray(_valid_datagram())
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    with contextlib.suppress(wire.WireError):
        wire.decode_datagram(bytes(raw))


def test_stack_counts_and_drops_malformed_datagrams() -> None:
    stack = build_stack("B", "unicast3", cluster="cl")
    rng = random.Random(3)
    good = wire.encode_datagram("cl", "A", "B", [wire.header_class("UNICAST3", "DATA")(1, 5, True, b"x\0")])
    bad = (
        [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 100))) for _ in range(50)]
        + [good[:n] for n in range(len(good))]
        + [bytes([good[0], 9, *good[2:]])]
    )
    for d in bad:
        assert stack.receive(d, 0.0) is False
    c = stack.counters()["stack"]
    assert c["malformed_datagrams"] == len(bad)
    assert c["datagrams_received"] == 0
    assert stack.drain().delivers == []
    # the stack still works afterwards, and other clusters and other members' datagrams are dropped, counted
    assert stack.receive(good, 0.0)
    assert [d.payload for d in stack.drain().delivers] == [b"x\0"]
    assert not stack.receive(wire.encode_datagram("other", "A", "B", [wire.header_class("UNICAST3", "CLOSE")(1)]), 0)
    assert not stack.receive(wire.encode_datagram("cl", "A", "B/2", [wire.header_class("UNICAST3", "CLOSE")(1)]), 0)
    c = stack.counters()["stack"]
    assert (c["wrong_cluster"], c["wrong_dest"], c["malformed_datagrams"]) == (1, 1, len(bad))

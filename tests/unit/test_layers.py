"""The scapy layers agree with node/wire.py on every header type, both ways; they decode captures on our ports;
dissection never raises on garbage; and every row of the header table has a layer."""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.packet import Packet, Raw
from scapy.utils import rdpcap, wrpcap

from chaos import layers
from node import wire

FIXED_MAX = {"u8": 0xFF, "u16": 0xFFFF, "u32": 0xFFFF_FFFF, "u64": 0xFFFF_FFFF_FFFF_FFFF}
U64 = st.integers(0, FIXED_MAX["u64"])
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text of at most 255 UTF-8 bytes: cut the encoding at 255 and drop a multibyte character split by the cut.
STR = st.text(max_size=100).map(lambda s: s.encode()[:255].decode(errors="ignore"))
NONEMPTY_STR = STR.filter(bool)


@st.composite
def ranges(draw: st.DrawFn) -> tuple[tuple[int, int], ...]:
    """Ordered, disjoint ranges, anywhere in the u64 space."""
    first = draw(st.integers(0, 1 << 63))
    out = []
    for gap, width in draw(st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 1 << 20)), max_size=5)):
        first += gap
        out.append((first, first + width))
        first += width + 2
    return tuple(out)


VIEW_ID = st.builds(wire.ViewId, STR, U64)
VIEW = st.builds(
    wire.View,
    VIEW_ID,
    st.lists(NONEMPTY_STR, min_size=1, max_size=5).map(tuple),
    st.lists(VIEW_ID, max_size=3).map(tuple),
)
DIGEST = st.dictionaries(STR, st.tuples(U64, U64), max_size=5)
KINDS: dict[str, st.SearchStrategy[Any]] = {
    **{kind: st.integers(0, top) for kind, top in FIXED_MAX.items()},
    "bool": st.booleans(),
    "str": STR,
    "ranges": ranges(),
    "viewid": VIEW_ID,
    "view": VIEW,
    "digest": DIGEST,
}
PAYLOAD = st.one_of(st.just(b""), st.binary(max_size=300))


def message_of(key: str) -> st.SearchStrategy[Any]:
    """Node messages of one header type, every field drawn from its kind's strategy."""
    spec = wire.SPECS[key]
    return st.tuples(*(KINDS[f.kind] for f in spec.fields), PAYLOAD).map(lambda values: spec.cls(*values))


ANY_MESSAGE = st.sampled_from(sorted(wire.SPECS)).flatmap(message_of)
ADDRESSES = st.tuples(STR, NONEMPTY_STR, st.one_of(st.just(""), NONEMPTY_STR))  # cluster, src, dest ("" multicast)


def assert_layer_equals(layer: Packet, msg: Any) -> None:
    """Field by field, then as a whole through to_wire_message."""
    spec = wire.spec_of(msg)
    assert type(layer) is layers.LAYERS[spec.key]
    assert (layer.proto, layer.type) == (spec.proto_id, spec.type_id)
    for f, value in zip(spec.fields, msg[:-1], strict=True):
        assert layer.getfieldval(layer.FIELD_NAMES[f.name]) == value, f.name
    assert layer.load == msg.payload
    assert layer.payload_len == len(msg.payload)
    assert layers.to_wire_message(layer) == msg


def check_node_to_scapy(cluster: str, src: str, dest: str, msgs: list[Any]) -> None:
    data = wire.encode_datagram(cluster, src, dest, msgs)
    pkt = layers.dissect(data)
    assert (pkt.magic, pkt.version) == (wire.MAGIC, wire.WIRE_VERSION)
    assert (pkt.cluster, pkt.src, pkt.dest, pkt.count) == (cluster, src, dest, len(msgs))
    assert pkt.flags == (0 if dest else wire.FLAG_MULTICAST)
    assert len(pkt.messages) == len(msgs)
    for layer, msg in zip(pkt.messages, msgs, strict=True):
        assert_layer_equals(layer, msg)
    assert not pkt.payload  # nothing left over
    assert bytes(pkt) == data
    pkt.clear_cache()  # rebuild from the field values, not from the dissected bytes scapy keeps
    assert bytes(pkt) == data


def check_scapy_to_node(cluster: str, src: str, dest: str, msgs: list[Any]) -> None:
    built = []
    for msg in msgs:
        spec = wire.spec_of(msg)
        layer_cls = layers.LAYERS[spec.key]
        values = {
            layer_cls.FIELD_NAMES[f.name]: int(v) if f.kind == "bool" else v
            for f, v in zip(spec.fields, msg[:-1], strict=True)
        }
        built.append(layer_cls(**values, load=msg.payload))
    data = bytes(layers.Chaosbed(cluster=cluster, src=src, dest=dest, messages=built))
    assert wire.decode_datagram(data) == wire.Datagram(cluster, src, dest, msgs)
    assert data == wire.encode_datagram(cluster, src, dest, msgs)
    assert bytes(layers.datagram(cluster, src, dest or None, msgs)) == data


@pytest.mark.parametrize("key", sorted(wire.SPECS))
@SETTINGS
@given(data=st.data())
def test_node_encoding_dissects_to_equal_fields(key: str, data: st.DataObject) -> None:
    cluster, src, dest = data.draw(ADDRESSES)
    msgs = data.draw(st.lists(message_of(key), min_size=1, max_size=3))
    check_node_to_scapy(cluster, src, dest, msgs)


@pytest.mark.parametrize("key", sorted(wire.SPECS))
@SETTINGS
@given(data=st.data())
def test_scapy_built_layers_decode_in_the_node(key: str, data: st.DataObject) -> None:
    cluster, src, dest = data.draw(ADDRESSES)
    msgs = data.draw(st.lists(message_of(key), min_size=1, max_size=3))
    check_scapy_to_node(cluster, src, dest, msgs)


@settings(max_examples=100, deadline=None)
@given(addresses=ADDRESSES, msgs=st.lists(ANY_MESSAGE, min_size=1, max_size=8))
def test_mixed_batches_both_ways(addresses: tuple[str, str, str], msgs: list[Any]) -> None:
    check_node_to_scapy(*addresses, msgs)
    check_scapy_to_node(*addresses, msgs)
    for msg in msgs:
        assert layers.to_wire_message(layers.from_wire_message(msg)) == msg


def test_multicast_and_unicast_flags() -> None:
    ack = wire.header_class("UNICAST3", "ACK")(seqno=50, conn_id=1, timestamp=0)
    mcast = layers.dissect(wire.encode_datagram("c", "A", None, [ack]))
    assert mcast.flags.multicast and mcast.dest == ""
    ucast = layers.dissect(wire.encode_datagram("c", "A", "B", [ack]))
    assert not ucast.flags.multicast and ucast.dest == "B"
    assert bytes(layers.Chaosbed(src="A", messages=[layers.from_wire_message(ack)]))[2] == wire.FLAG_MULTICAST
    assert bytes(layers.Chaosbed(src="A", dest="B", messages=[layers.from_wire_message(ack)]))[2] == 0


def test_summary_and_show_read_like_rules() -> None:
    ack = wire.header_class("UNICAST3", "ACK")(seqno=50, conn_id=1, timestamp=0)
    xmit = wire.header_class("NAKACK2", "XMIT_REQ")(sender="B", ranges=((3, 5), (9, 9)))
    layer = layers.from_wire_message(ack)
    assert layer.summary() == "UNICAST3.ACK(seqno=50, conn_id=1, timestamp=0)"
    pkt = IP(bytes(IP(dst="10.0.0.2") / UDP() / layers.datagram("c", "A", "B", [ack, xmit])))
    summary = pkt.summary()
    assert "Chaosbed A > B [c] UNICAST3.ACK(seqno=50, conn_id=1, timestamp=0)" in summary
    assert "NAKACK2.XMIT_REQ(sender='B', ranges=[3..5, 9..9])" in summary
    shown = pkt.show(dump=True)
    assert "###[ UNICAST3.ACK ]###" in shown and "seqno     = 50" in shown


def test_layers_are_generated_from_the_table() -> None:
    assert set(layers.LAYERS) == set(wire.SPECS)
    assert set(layers.LAYERS_BY_IDS) == set(wire.SPECS_BY_IDS)
    for key, spec in wire.SPECS.items():
        cls = layers.LAYERS[key]
        assert cls.__name__ == f"{spec.protocol}_{spec.name}" and getattr(layers, cls.__name__) is cls
        assert cls().name == key  # scapy keeps the class attribute `name` as `_name`
        names = [f.name for f in cls.fields_desc]
        assert names == ["proto", "type", *(cls.FIELD_NAMES[f.name] for f in spec.fields), "payload_len", "load"]
        assert layers.LAYERS_BY_IDS[spec.proto_id, spec.type_id] is cls


def test_a_new_row_gets_a_working_layer_even_with_clashing_field_names() -> None:
    # A row like the ones in HEADER_TABLE, with every kind and field names scapy itself uses.
    rows = [("time", "u16"), ("flag", "bool"), ("payload", "u64"), ("name", "str"), ("r", "ranges")]
    rows += [("v", "view"), ("d", "digest"), ("vid", "viewid")]
    fields = tuple(wire.Field(n, k) for n, k in rows)
    fixed = struct.Struct("!BBH?Q")
    spec = wire.HeaderSpec("TEST", "ALL", 250, 7, fields, fixed, fields[3:], type(None))
    layer_cls = layers._make_layer(spec)
    renamed = {"time": "time_", "payload": "payload_", "name": "name_"}  # scapy's Packet has these attributes
    names = layer_cls.FIELD_NAMES
    assert names == {n: renamed.get(n, n) for n, _ in rows}
    view = wire.View(wire.ViewId("A", 4), ("A", "B"), (wire.ViewId("B", 2),))
    layer = layer_cls(time_=7, flag=1, payload_=1 << 60, name_="ü", r=[(1, 2)], v=view, d={"A": (1, 2)}, load=b"xy")
    raw = bytes(layer)
    expected = fixed.pack(250, 7, 7, True, 1 << 60)
    assert raw.startswith(expected)
    again = layer_cls(raw)
    assert (again.time_, again.name_, again.r, again.v, again.d) == (7, "ü", ((1, 2),), view, {"A": (1, 2)})
    assert (again.vid, again.load) == (wire.ViewId("", 0), b"xy")  # vid was left at its default
    assert again.summary().startswith("TEST.ALL(time=7, flag=1, payload=1152921504606846976, name='ü', r=[1..2]")


def test_pcap_round_trip(tmp_path: Path) -> None:
    ack = wire.header_class("UNICAST3", "ACK")(seqno=50, conn_id=1, timestamp=0)
    data = wire.header_class("UNICAST3", "DATA")(seqno=51, conn_id=1, first=False, payload=b"p" * 100)
    msg = wire.header_class("NAKACK2", "MSG")(seqno=3, payload=b"hello")
    view = wire.View(wire.ViewId("A", 2), ("A", "B"))
    install = wire.header_class("GMS", "VIEW")(view=view, digest={"A": (3, 3)}, subgroups=())
    datagrams = [
        (7800, 7800, ("c", "A", "B", [ack, data])),  # unicast
        (7800, 17800, ("c", "A", None, [msg, install])),  # multicast
        (17800, 40000, ("c", "A", None, [msg])),  # matched by the source port alone
    ]
    packets = [
        IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=sport, dport=dport) / Raw(wire.encode_datagram(*args))
        for sport, dport, args in datagrams
    ]
    packets.append(IP() / UDP(sport=1234, dport=5678) / Raw(wire.encode_datagram("c", "A", "B", [ack])))
    path = tmp_path / "chaosbed.pcap"
    wrpcap(str(path), packets)
    read = rdpcap(str(path))
    assert len(read) == 4
    for pkt, (_, _, (cluster, src, dest, msgs)) in zip(read[:3], datagrams, strict=True):
        assert pkt.haslayer(layers.Chaosbed)
        assert [type(m) for m in pkt[layers.Chaosbed].messages] == [layers.LAYERS[wire.spec_of(m).key] for m in msgs]
        assert layers.to_datagram(pkt) == wire.Datagram(cluster, src, dest or "", msgs)
    assert isinstance(read[0][layers.Chaosbed].messages[0], layers.UNICAST3_ACK)
    assert not read[3].haslayer(layers.Chaosbed)  # other ports are left alone


def test_bind_ports_adds_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(UDP, "payload_guess", UDP.payload_guess)  # restored after the test
    ack = wire.header_class("UNICAST3", "ACK")(seqno=1, conn_id=1, timestamp=0)
    raw = bytes(IP() / UDP(sport=1111, dport=9000) / Raw(wire.encode_datagram("c", "A", "B", [ack])))
    assert not IP(raw).haslayer(layers.Chaosbed)
    layers.bind_ports(9000)
    layers.bind_ports(9000)
    assert UDP.payload_guess.count(({"dport": 9000}, layers.Chaosbed)) == 1
    assert IP(raw)[layers.Chaosbed].messages[0].seqno == 1


def check_garbage(data: bytes) -> None:
    pkt = layers.dissect(data)
    assert isinstance(pkt, layers.Chaosbed)
    assert bytes(pkt) == data  # nothing lost: undecodable bytes are kept as Raw
    for m in pkt.messages:
        assert isinstance(m, (layers.UnknownMessage, Raw, *layers.LAYERS.values()))
    pkt.summary()
    pkt.show(dump=True)
    try:
        node = wire.decode_datagram(data)
    except wire.WireError:
        return
    assert layers.to_datagram(pkt) == node  # whatever the node accepts, scapy reads the same way
    udp = IP(bytes(IP() / UDP(sport=7800, dport=7800) / Raw(data)))
    assert bytes(udp[UDP].payload) == data


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=200))
def test_random_bytes_never_raise(data: bytes) -> None:
    check_garbage(data)


@settings(max_examples=200, deadline=None)
@given(addresses=ADDRESSES, msgs=st.lists(ANY_MESSAGE, min_size=1, max_size=4), seed=st.integers(0, 1 << 32))
def test_damaged_datagrams_never_raise(addresses: tuple[str, str, str], msgs: list[Any], seed: int) -> None:
    """Near-valid input reaches deeper than random bytes: cut, flip, splice valid datagrams."""
    data = bytearray(wire.encode_datagram(*addresses, msgs))
    rng = random.Random(seed)
    for _ in range(rng.randrange(1, 4)):
        op = rng.randrange(4)
        if op == 0 and len(data) > 1:
            del data[rng.randrange(1, len(data)) :]
        elif op == 1:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif op == 2:
            data[rng.randrange(len(data))] = rng.choice([0, 1, 0x7F, 0x80, 0xFF])
        else:
            data += rng.randbytes(rng.randrange(1, 20))
    check_garbage(bytes(data))


def test_unknown_and_truncated_messages() -> None:
    ack = wire.header_class("UNICAST3", "ACK")(seqno=50, conn_id=1, timestamp=0)
    good = wire.encode_datagram("c", "A", "B", [ack, ack])
    one = len(wire.encode_datagram("c", "A", "B", [ack])) - 3 - 6 - 2  # one encoded ACK
    unknown = good[: len(good) - one] + bytes([99, 0]) + b"rest"
    pkt = layers.dissect(unknown)
    assert isinstance(pkt.messages[0], layers.UNICAST3_ACK)
    assert isinstance(pkt.messages[1], layers.UnknownMessage)
    assert (pkt.messages[1].proto, pkt.messages[1].type, pkt.messages[1].load) == (99, 0, b"rest")
    truncated = layers.dissect(good[:-2])
    assert isinstance(truncated.messages[1], Raw) and bytes(truncated) == good[:-2]
    header_only = layers.dissect(good[:8])  # cut inside the src string
    assert header_only.magic == wire.MAGIC and isinstance(header_only.payload, Raw) and bytes(header_only) == good[:8]
    with pytest.raises(TypeError):
        layers.to_datagram(truncated)

"""The scapy layers of JGroups 5 (chaos/layers_jgroups5.py), generated from the profile's one header table: every
golden datagram dissects into the rules' terms with the decoder's field values and builds back to the same bytes; a
header built from scratch (compressed seqno and all) is what the decoder reads; a capture on chaosbed's ports reads as
JGroups 5, 2.12 or chaosbed by its version; malformed input never raises."""

from __future__ import annotations

import random

from scapy.packet import Raw

from chaos import layers_jgroups5 as layers
from chaos.profiles import jgroups5 as wire
from chaos.profiles import jgroups5_rules as rules
from tests.foreign.jgroups5_golden import data_of, golden, name_of


def test_every_rule_name_has_a_layer() -> None:
    assert set(rules.SPECS) <= set(layers.LAYERS)
    assert layers.LAYERS["UNICAST3.DATA"].__name__ == "J5_UNICAST3_DATA"


def test_golden_datagrams_dissect_with_the_decoders_values_and_build_back_byte_for_byte() -> None:
    for d in golden():
        data, where = data_of(d), name_of(d)
        pkt = layers.dissect(data)
        assert bytes(pkt) == data, where
        dg = wire.decode(data)
        assert len(pkt.messages) == len(dg.messages), where
        if dg.form == "LIST":
            assert (pkt.count, pkt.cluster.decode()) == (dg.count, dg.cluster), where
        for m, jm in zip(dg.messages, pkt.messages, strict=True):
            assert (jm.mtype, int(jm.leading), int(jm.flags)) == (m.type, m.leading, m.flags), where
            assert [h.key for h in m.headers] == [h.KEY.removesuffix(".HEARTBEAT").removesuffix(".FRAG")
                                                  for h in jm.headers], where  # fmt: skip
            load = jm.load if isinstance(jm.load, bytes) or jm.load is None else jm.load[0]
            assert load == (m.payload_bytes(data) if m.payload is not None else m.value), where
            for h, jh in zip(m.headers, jm.headers, strict=True):
                for name, value in h.fields.items():
                    got = jh.getfieldval(name if name != "from" else "from_")
                    got = got[0] if isinstance(got, tuple) else got
                    if isinstance(got, bytes):
                        got = got.decode()
                    assert got == value or (isinstance(value, bool) and got == int(value)), (where, h.key, name)
        assert pkt.summary().startswith(f"JGroups5 {dg.form} ["), where


def test_a_message_built_from_scratch_is_what_the_decoder_reads() -> None:
    uuid = b"\x02" + bytes(range(16))
    headers = [layers.LAYERS["UNICAST3.DATA"](seqno=70000, conn_id=2, first=1), layers.LAYERS["TP"](cluster=b"cb5")]
    m = layers.JMessage5(mtype=wire.BYTES, leading=3, flags=1, headers=headers, load=b"A>B#1\0xx")
    m.dest = (None, uuid)
    m.src = (None, uuid)
    built = bytes(layers.JGroups5(flags=0, messages=[m]))
    dg = wire.decode(built)
    assert dg.skippable, dg.error
    (msg,) = dg.messages
    assert [(h.key, h.fields) for h in msg.headers] == [
        ("UNICAST3.DATA", {"seqno": 70000, "conn_id": 2, "first": True}),
        ("TP", {"cluster": "cb5", "flag": 0, "index": None}),
    ]
    assert msg.msg_id(built) == "A>B#1" and msg.oob
    h = msg.headers[0]
    assert built[h.body + 1 : h.body + 5] == b"\x03\x70\x11\x01"  # 70000 = 0x011170: 3 bytes, least first
    negative = bytes(layers.LAYERS["NAKACK2.MSG"](seqno=-1))
    assert negative[5:] == b"\x08" + b"\xff" * 8


def test_a_capture_on_chaosbeds_ports_reads_as_jgroups_5_2_12_or_chaosbed() -> None:
    from scapy.layers.inet import IP, UDP

    from chaos import layers as chaosbed_layers
    from chaos import layers_jgroups212

    data = next(data_of(d) for d in golden() if d["kind"] == "SINGLE [UNICAST3.DATA TP]")
    pkt = IP(bytes(IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=7800, dport=7800) / data))
    assert isinstance(pkt[UDP].payload, layers.JGroups5)
    assert "UNICAST3.DATA(seqno=" in pkt.summary()
    old = IP(bytes(IP() / UDP(sport=7800, dport=7800) / (b"\x13\x02" + bytes(10))))
    assert isinstance(old[UDP].payload, layers_jgroups212.JGroups212)
    ours = IP(bytes(IP() / UDP(sport=7800, dport=7800) / b"CB\x01"))
    assert isinstance(ours[UDP].payload, chaosbed_layers.Chaosbed)


def test_malformed_input_dissects_without_raising() -> None:
    rng = random.Random(3)
    for d in golden()[:40]:
        data = data_of(d)
        for n in range(0, len(data), 7):
            layers.dissect(data[:n])
        flipped = bytearray(data)
        flipped[rng.randrange(3, len(data))] ^= 0xFF
        layers.dissect(bytes(flipped))
    kept = layers.dissect(b"\x29\x46\x01\x00")  # a LIST cut short: kept as it came, in a Raw payload
    assert kept.getlayer(Raw).load == b"\x29\x46\x01\x00" and not kept.fields

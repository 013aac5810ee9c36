"""The scapy layers of JGroups 2.12 (chaos/layers_jgroups212.py), generated from the profile's one header table: every
golden datagram dissects into the rules' terms with the decoder's field values and builds back to the same bytes; a
header built from scratch is what the decoder reads; a capture on chaosbed's ports reads as JGroups."""

from __future__ import annotations

import json
from pathlib import Path

from chaos import layers_jgroups212 as layers
from chaos.profiles import jgroups212 as wire
from chaos.profiles import jgroups212_rules as rules

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "jgroups212"


def golden() -> list[tuple[str, bytes]]:
    out = []
    for path in (FIXTURES / "datagrams.jsonl", FIXTURES / "unicast" / "datagrams.jsonl"):
        for line in path.read_text().splitlines():
            d = json.loads(line)
            out.append((d["kind"], bytes.fromhex(d["hex"])))
    return out


def test_every_rule_name_has_a_layer() -> None:
    assert set(rules.SPECS) <= set(layers.LAYERS)
    assert layers.LAYERS["UNICAST2.DATA"].__name__ == "J_UNICAST2_DATA"


def test_golden_datagrams_dissect_with_the_decoders_values_and_build_back_byte_for_byte() -> None:
    for kind, data in golden():
        pkt = layers.dissect(data)
        assert bytes(pkt) == data, kind
        dg = wire.decode(data)
        assert len(pkt.messages) == len(dg.messages), kind
        for m, jm in zip(dg.messages, pkt.messages, strict=True):
            assert [h.key for h in m.headers] == [
                h.KEY.removesuffix(".HEARTBEAT").removesuffix(".FRAG") for h in jm.headers
            ], kind
            assert (m.payload_bytes(data) or b"") == (jm.load if jm.leading & wire.BUF_SET else b"")
            for h, jh in zip(m.headers, jm.headers, strict=True):
                for name, value in h.fields.items():
                    got = jh.getfieldval(name if name != "from" else "from_")
                    got = got[0] if isinstance(got, tuple) else got
                    if isinstance(got, bytes):
                        got = got.decode()
                    assert got == value or (isinstance(value, bool) and got == int(value)), (kind, h.key, name)
        assert pkt.summary().startswith(f"JGroups212 {dg.form} ["), kind


def test_a_header_built_from_scratch_is_what_the_decoder_reads() -> None:
    built = bytes(layers.LAYERS["UNICAST2.DATA"](seqno=6, conn_id=1, first=1)) + bytes(
        layers.LAYERS["UDP"](cluster=b"cbgold")
    )
    message = b"\x03\x00" + b"\x02" + bytes(17) + b"\x02" + bytes(17) + (2).to_bytes(2, "big") + built
    dg = wire.decode(wire.VERSION.to_bytes(2, "big") + b"\x00" + message)
    assert dg.skippable, dg.error
    (m,) = dg.messages
    assert [(h.key, h.fields) for h in m.headers] == [
        ("UNICAST2.DATA", {"seqno": 6, "conn_id": 1, "first": True}),
        ("UDP", {"cluster": "cbgold"}),
    ]


def test_a_capture_on_chaosbeds_ports_reads_as_jgroups() -> None:
    from scapy.layers.inet import IP, UDP

    from chaos import layers as chaosbed_layers  # binds ports 7800 and 17800

    assert chaosbed_layers.DATA_PORTS == (7800, 17800)
    data = next(d for k, d in golden() if k == "SINGLE [UNICAST2.DATA UDP]")
    pkt = IP(bytes(IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=7800, dport=7800) / data))
    assert isinstance(pkt[UDP].payload, layers.JGroups212)
    assert "UNICAST2.DATA(seqno=" in pkt.summary()

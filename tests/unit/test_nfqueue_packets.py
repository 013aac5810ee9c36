"""The NFQUEUE handler's packet logic without a kernel: spans, matching, stripping, count/probability, validation."""

from __future__ import annotations

import random
import socket
import struct
import time

import pytest

from chaos import nfqueue
from chaos.nfqueue import (
    ACCEPT,
    DELAY,
    DROP,
    DUPLICATE,
    REORDER,
    Judge,
    RuleValidationError,
    compile_rule,
    compile_rules,
    datagram_spans,
    default_max_len,
    strip_messages,
)
from node import wire

ACK = wire.header_class("UNICAST3", "ACK")
DATA = wire.header_class("UNICAST3", "DATA")
SRC_A, SRC_C, DST = "10.9.9.11", "10.9.9.13", "10.9.9.12"


def checksum(header: bytes) -> int:
    """An independent ones-complement sum (0 for a header whose checksum field is right)."""
    total = 0
    for i in range(0, len(header), 2):
        total += (header[i] << 8) | header[i + 1]
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ip_udp(payload: bytes, src: str = SRC_A, dst: str = DST, proto: int = 17, options: bytes = b"") -> bytes:
    """An IPv4 packet (with a correct header checksum) carrying a UDP header (checksum 0) and payload."""
    ihl = 5 + len(options) // 4
    udp = struct.pack("!HHHH", 40000, 7800, 8 + len(payload), 0) + payload
    total = ihl * 4 + len(udp)
    hdr = struct.pack(
        "!BBHHHBBH4s4s", 0x40 | ihl, 0, total, 1, 0, 64, proto, 0, socket.inet_aton(src), socket.inet_aton(dst)
    )
    hdr += options
    hdr = hdr[:10] + struct.pack("!H", checksum(hdr)) + hdr[12:]
    return hdr + udp


def dgram(*msgs: object, dest: str = "B:1") -> bytes:
    return wire.encode_datagram("test", "A:1", dest, list(msgs))


def udp_payload(pkt: bytes) -> bytes:
    return pkt[(pkt[0] & 0x0F) * 4 + 8 :]


def rule(**kw: object) -> dict:
    return {"id": "r", "action": "drop", **kw}


def judge_of(*rules: dict) -> Judge:
    return Judge(compile_rules([dict(r) for r in rules]))


# --- spans ---------------------------------------------------------------------------------------------------------

SAMPLES = {
    "u8": 7,
    "u16": 513,
    "u32": 70_000,
    "u64": 1 << 40,
    "bool": True,
    "str": "B:2",
    "ranges": ((1, 2), (5, 9)),
    "viewid": wire.ViewId("A:1", 4),
    "view": wire.View(wire.ViewId("A:1", 4), ("A:1", "B:1"), (wire.ViewId("C:1", 2),)),
    "digest": {"A:1": (3, 4), "B:1": (1, 1)},
}


def sample(spec: wire.HeaderSpec, payload: bytes) -> object:
    return spec.cls(*[SAMPLES[f.kind] for f in spec.fields], payload)


def test_spans_agree_with_the_wire_decoder_for_every_header_type() -> None:
    msgs = [sample(spec, b"p" * i) for i, spec in enumerate(wire.SPECS.values())]
    data = dgram(*msgs)
    head, spans = datagram_spans(data)
    assert head == wire.datagram_overhead("test", "A:1", "B:1")
    pos = head
    for msg, (start, end, proto, typ) in zip(msgs, spans, strict=True):
        decoded, after = wire.decode_message(data, pos)
        assert (start, end) == (pos, after) and decoded == msg
        assert (proto, typ) == (type(msg).PROTO_ID, type(msg).TYPE_ID)
        pos = after
    assert pos == len(data)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xcb",
        b"\xcb\x01\x00",
        b"\xcc" + dgram(ACK(1, 1, 1))[1:],  # bad magic
        b"\xcb\x02" + dgram(ACK(1, 1, 1))[2:],  # other version
        dgram(ACK(1, 1, 1))[:-1],  # truncated
        dgram(ACK(1, 1, 1)) + b"x",  # trailing byte
    ],
)
def test_malformed_datagrams_raise_wire_error(data: bytes) -> None:
    with pytest.raises(wire.WireError):
        datagram_spans(data)


# --- matching ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("match", "hits"),
    [
        ("UNICAST3.ACK(seqno=50)", [50]),
        ("UNICAST3.ACK(seqno=48..51)", [48, 49, 50, 51]),
        ("UNICAST3.ACK(seqno=48..51, conn_id=7)", [49, 51]),  # odd seqnos carry conn_id 7
        ("UNICAST3.ACK(conn_id=7, timestamp=1000..1003)", [1, 3]),  # timestamp = 1000 + seqno
        ("UNICAST3.ACK()", list(range(60))),
        ("UNICAST3.DATA()", []),
        ("UNICAST2.DATA(seqno=50)", []),  # same field layout, other protocol
    ],
)
def test_message_rules_match_fields_and_ranges(match: str, hits: list[int]) -> None:
    e = judge_of(rule(match=match))
    dropped = []
    for seqno in range(60):
        pkt = ip_udp(dgram(ACK(seqno, 7 if seqno % 2 else 8, 1000 + seqno)))
        if e.judge(pkt)[0] == DROP:
            dropped.append(seqno)
    assert dropped == hits
    assert e.rule_stats()["r"]["matched"] == len(hits) == e.rule_stats()["r"]["dropped"]


def test_bool_fields_match() -> None:
    e = judge_of(rule(match="UNICAST3.DATA(first=true)"))
    assert e.judge(ip_udp(dgram(DATA(1, 1, True))))[0] == DROP
    assert e.judge(ip_udp(dgram(DATA(2, 1, False))))[0] == ACCEPT


def test_sources_restrict_a_rule() -> None:
    e = judge_of(rule(match="UNICAST3.ACK()", sources=[SRC_C]), rule(id="link", sources=[SRC_C]))
    assert e.judge(ip_udp(dgram(ACK(1, 1, 1)), src=SRC_A)) == (ACCEPT, None, 0.0)
    assert e.judge(ip_udp(dgram(ACK(1, 1, 1)), src=SRC_C))[0] == DROP


def test_a_link_rule_applies_to_any_protocol() -> None:
    e = judge_of(rule(sources=[SRC_A]))
    tcp = ip_udp(b"not udp at all", proto=6)
    assert e.judge(tcp)[0] == DROP
    assert e.unparsed == 0  # a link rule needs no parsing


# --- stripping -----------------------------------------------------------------------------------------------------


def test_stripping_one_message_of_five_rewrites_a_valid_packet() -> None:
    msgs = [ACK(s, 1, 2, b"pay%d" % s) for s in range(1, 6)]
    pkt = ip_udp(dgram(*msgs))
    e = judge_of(rule(match="UNICAST3.ACK(seqno=3)"))
    kind, out, _ = e.judge(pkt)
    assert kind == ACCEPT and out is not None and e.rewritten == 1
    assert checksum(out[:20]) == 0, "IP header checksum must be valid"
    assert struct.unpack_from("!H", out, 2)[0] == len(out)
    assert out[:2] == pkt[:2] and out[4:10] == pkt[4:10] and out[12:20] == pkt[12:20]
    sport, dport, ulen, ucsum = struct.unpack_from("!HHHH", out, 20)
    assert (sport, dport, ulen, ucsum) == (40000, 7800, len(out) - 20, 0)
    decoded = wire.decode_datagram(udp_payload(out))
    assert decoded.messages == [m for m in msgs if m.seqno != 3]
    assert (decoded.cluster, decoded.src, decoded.dest) == ("test", "A:1", "B:1")


def test_rewritten_packet_checks_out_in_scapy() -> None:
    scapy_inet = pytest.importorskip("scapy.layers.inet")
    pkt = ip_udp(dgram(*[ACK(s, 1, 2) for s in range(5)]))
    _, out, _ = judge_of(rule(match="UNICAST3.ACK(seqno=0..1)")).judge(pkt)
    assert out is not None
    parsed = scapy_inet.IP(out)
    fresh = scapy_inet.IP(out)
    del fresh.chksum
    assert parsed.chksum == scapy_inet.IP(bytes(fresh)).chksum
    assert parsed.len == len(out) and parsed[scapy_inet.UDP].len == len(out) - 20
    assert len(wire.decode_datagram(bytes(parsed[scapy_inet.UDP].payload)).messages) == 3


def test_strip_messages_api() -> None:
    msgs = [ACK(s, 1, 2) for s in range(5)]
    pkt = ip_udp(dgram(*msgs))
    head, spans = datagram_spans(udp_payload(pkt))
    out = strip_messages(pkt, head, [spans[0], spans[4]])
    assert wire.decode_datagram(udp_payload(out)).messages == [msgs[0], msgs[4]]
    with pytest.raises(ValueError):
        strip_messages(pkt, head, [])


def test_stripping_every_message_drops_the_packet() -> None:
    e = judge_of(rule(match="UNICAST3.ACK()"))
    assert e.judge(ip_udp(dgram(ACK(1, 1, 1), ACK(2, 1, 1))))[0] == DROP
    assert e.rewritten == 0


def test_a_multicast_datagram_can_be_stripped() -> None:
    pkt = ip_udp(dgram(ACK(1, 1, 1), DATA(2, 1, False), dest=""), dst="239.1.2.3")
    kind, out, _ = judge_of(rule(match="UNICAST3.ACK()")).judge(pkt)
    assert kind == ACCEPT and out is not None
    d = wire.decode_datagram(udp_payload(out))
    assert d.multicast and d.messages == [DATA(2, 1, False)]


# --- unparsable input ----------------------------------------------------------------------------------------------


def unparsable() -> list[bytes]:
    good = ip_udp(dgram(ACK(50, 1, 1)))
    return [
        b"",
        b"\x45",
        b"\x60" + good[1:],  # IPv6 version nibble
        ip_udp(b"\x00" * 40),  # not our magic
        ip_udp(dgram(ACK(50, 1, 1))[:-3]),  # truncated datagram (lengths consistent)
        good[:-3],  # truncated packet (IP total length says more)
        ip_udp(dgram(ACK(50, 1, 1)), proto=6),  # TCP
        ip_udp(dgram(ACK(50, 1, 1)), options=b"\x01\x01\x01\x00"),  # IP options
        good[:6] + b"\x20\x00" + good[8:],  # a fragment (MF set)
    ]


@pytest.mark.parametrize("pkt", unparsable())
def test_unparsable_packets_pass_untouched_and_are_counted(pkt: bytes) -> None:
    e = judge_of(rule(match="UNICAST3.ACK(seqno=50)"), rule(id="d", action="delay", match="UNICAST3.ACK()", delay_ms=5))
    assert e.judge(pkt) == (ACCEPT, None, 0.0)
    assert e.unparsed == 1
    assert e.rule_stats()["r"]["matched"] == 0


def test_random_corruption_never_raises() -> None:
    rng = random.Random(7)
    good = ip_udp(dgram(*[ACK(s, 1, 2, b"x" * s) for s in range(6)]))
    e = judge_of(rule(match="UNICAST3.ACK(seqno=3)"), rule(id="dup", action="duplicate", match="UNICAST3.ACK()"))
    for _ in range(3000):
        pkt = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            pkt[rng.randrange(len(pkt))] = rng.randrange(256)
        pkt = pkt[: rng.randint(0, len(pkt))] if rng.random() < 0.3 else pkt
        _, out, _ = e.judge(bytes(pkt))
        if out is not None:  # whatever we rewrite is structurally sound (strings may be corrupt, as they came)
            assert checksum(out[:20]) == 0 and struct.unpack_from("!H", out, 2)[0] == len(out)
            assert 1 <= len(datagram_spans(udp_payload(out))[1]) <= 5


# --- count and probability -----------------------------------------------------------------------------------------


def test_count_one_acts_on_exactly_one_message() -> None:
    e = judge_of(rule(match="UNICAST3.ACK(seqno=50)", count=1))
    verdicts = [e.judge(ip_udp(dgram(ACK(s % 100, 1, 1))))[0] for s in range(1000)]
    assert verdicts.count(DROP) == 1 and verdicts.index(DROP) == 50
    assert e.rule_stats()["r"] == {"matched": 10, "dropped": 1, "delayed": 0, "duplicated": 0, "reordered": 0}


def test_count_counts_messages_inside_a_batch() -> None:
    e = judge_of(rule(match="UNICAST3.ACK()", count=3))
    _, out, _ = e.judge(ip_udp(dgram(*[ACK(s, 1, 1) for s in range(5)])))
    assert out is not None
    assert [m.seqno for m in wire.decode_datagram(udp_payload(out)).messages] == [3, 4]
    _, out, _ = e.judge(ip_udp(dgram(*[ACK(s, 1, 1) for s in range(5)])))
    assert out is None  # the count is used up: the rule passes everything


def test_probability_is_seeded_and_reproducible() -> None:
    def run(seed: int) -> list[int]:
        e = judge_of(rule(match="UNICAST3.ACK()", probability=0.3, seed=seed))
        return [e.judge(ip_udp(dgram(ACK(s, 1, 1))))[0] for s in range(1000)]

    a, b, c = run(1), run(1), run(2)
    assert a == b and a != c
    assert 230 <= a.count(DROP) <= 370  # binomial(1000, 0.3): mean 300, sd 14.5


def test_probability_and_count_together() -> None:
    e = judge_of(rule(match="UNICAST3.ACK()", probability=0.5, count=5, seed=3))
    verdicts = [e.judge(ip_udp(dgram(ACK(s, 1, 1))))[0] for s in range(200)]
    assert verdicts.count(DROP) == 5
    assert e.rule_stats()["r"]["matched"] == 200


def test_probability_zero_never_acts() -> None:
    e = judge_of(rule(match="UNICAST3.ACK()", probability=0))
    assert all(e.judge(ip_udp(dgram(ACK(s, 1, 1))))[0] == ACCEPT for s in range(100))


# --- release actions -----------------------------------------------------------------------------------------------


def test_delay_with_jitter_stays_in_bounds_and_is_seeded() -> None:
    e = judge_of(rule(action="delay", delay_ms=50, jitter_ms=10, seed=4))
    delays = [e.judge(ip_udp(dgram(ACK(s, 1, 1))))[2] for s in range(500)]
    assert all(0.040 <= d <= 0.060 for d in delays) and len(set(delays)) > 400
    e2 = judge_of(rule(action="delay", delay_ms=50, jitter_ms=10, seed=4))
    assert delays == [e2.judge(ip_udp(dgram(ACK(s, 1, 1))))[2] for s in range(500)]


def test_delay_is_clamped_at_zero() -> None:
    e = judge_of(rule(action="delay", delay_ms=1, jitter_ms=100, seed=1))
    assert min(e.judge(ip_udp(dgram(ACK(s, 1, 1))))[2] for s in range(200)) == 0.0


def test_drops_come_first_then_the_first_release_rule_decides() -> None:
    e = judge_of(
        rule(id="dup", action="duplicate", match="UNICAST3.DATA()"),
        rule(id="delay", action="delay", delay_ms=20, match="UNICAST3.ACK()"),
        rule(id="strip", match="UNICAST3.DATA()"),
    )
    kind, out, delay = e.judge(ip_udp(dgram(ACK(1, 1, 1), DATA(1, 1, False))))
    # the strip removed the DATA before the release rules ran, so the duplicate rule saw no DATA
    assert (kind, delay) == (DELAY, 0.02) and out is not None
    assert wire.decode_datagram(udp_payload(out)).messages == [ACK(1, 1, 1)]
    stats = e.rule_stats()
    assert stats["dup"]["matched"] == 0 and stats["delay"]["delayed"] == 1 and stats["strip"]["dropped"] == 1


def test_a_release_rule_that_does_not_trigger_lets_the_next_one_decide() -> None:
    e = judge_of(
        rule(id="reorder", action="reorder", probability=0.0),
        rule(id="dup", action="duplicate", match="UNICAST3.ACK(seqno=1)"),
    )
    assert e.judge(ip_udp(dgram(ACK(1, 1, 1))))[0] == DUPLICATE
    assert e.judge(ip_udp(dgram(ACK(2, 1, 1))))[0] == ACCEPT
    assert e.rule_stats()["reorder"]["matched"] == 2


def test_reorder_and_link_delay_apply_to_tcp() -> None:
    tcp = ip_udp(b"x" * 30, proto=6)
    assert judge_of(rule(action="reorder")).judge(tcp)[0] == REORDER
    assert judge_of(rule(action="delay", delay_ms=5)).judge(tcp) == (DELAY, None, 0.005)


def test_release_count_counts_triggering_messages() -> None:
    e = judge_of(rule(action="duplicate", match="UNICAST3.ACK()", count=2))
    kinds = [e.judge(ip_udp(dgram(ACK(1, 1, 1), ACK(2, 1, 1))))[0] for _ in range(4)]
    assert kinds == [DUPLICATE, DUPLICATE, ACCEPT, ACCEPT]
    assert e.rule_stats()["r"]["matched"] == 8 and e.rule_stats()["r"]["duplicated"] == 2


def test_replacing_rules_keeps_the_state_of_the_same_ids() -> None:
    e = judge_of(rule(match="UNICAST3.ACK()", count=2), rule(id="other", action="delay", delay_ms=1))
    e.judge(ip_udp(dgram(ACK(1, 1, 1))))
    e.set_rules(compile_rules([rule(match="UNICAST3.ACK()", count=2), rule(id="new", match="UNICAST3.DATA()")]))
    assert e.rule_stats()["r"]["dropped"] == 1 and e.rule_stats()["new"]["matched"] == 0
    assert "other" not in e.rule_stats()
    assert [e.judge(ip_udp(dgram(ACK(s, 1, 1))))[0] for s in range(3)] == [DROP, ACCEPT, ACCEPT]
    e.set_rules(compile_rules([rule(match="UNICAST3.ACK()", count=3)]))  # a new count starts afresh
    assert [e.judge(ip_udp(dgram(ACK(s, 1, 1))))[0] for s in range(4)] == [DROP, DROP, DROP, ACCEPT]
    assert e.rule_stats()["r"]["dropped"] == 5


def test_no_rules_accepts_everything_without_parsing() -> None:
    e = Judge()
    assert e.judge(b"garbage") == (ACCEPT, None, 0.0) and e.unparsed == 0


# --- time windows (active_from_ns / active_until_ns, CLOCK_MONOTONIC ns) -------------------------------------------


def stats_of(e: Judge, rid: str = "r") -> tuple[int, int]:
    s = e.rule_stats()[rid]
    return s["matched"], s["dropped"]


def test_a_windowed_link_drop_acts_only_inside_its_half_open_window() -> None:
    e = judge_of(rule(sources=[SRC_A], active_from_ns=1_000, active_until_ns=2_000))  # a timed partition of A
    pkt = ip_udp(dgram(ACK(1, 1, 1)))
    at = [0, 999, 1_000, 1_001, 1_999, 2_000, 2_001, 10**12]
    assert [e.judge(pkt, t)[0] for t in at] == [ACCEPT, ACCEPT, DROP, DROP, DROP, ACCEPT, ACCEPT, ACCEPT]
    assert stats_of(e) == (3, 3)  # outside its window a rule neither matches nor counts
    assert e.judge(pkt, 1_500)[0] == DROP  # a clock reading before the cached span still finds the right rules
    assert e.judge(ip_udp(dgram(ACK(1, 1, 1)), src=SRC_C), 1_500)[0] == ACCEPT  # other sources pass


def test_a_count_starts_when_the_rule_becomes_active() -> None:
    e = judge_of(rule(match="UNICAST3.ACK()", count=2, active_from_ns=5_000))
    acks = [ip_udp(dgram(ACK(s, 1, 1))) for s in range(10)]
    assert [e.judge(p, 4_000 + i)[0] for i, p in enumerate(acks)] == [ACCEPT] * 10
    assert stats_of(e) == (0, 0)
    assert [e.judge(p, 5_000 + i)[0] for i, p in enumerate(acks[:4])] == [DROP, DROP, ACCEPT, ACCEPT]
    assert stats_of(e) == (4, 2)


def test_only_the_rules_active_now_decide() -> None:
    e = judge_of(
        rule(id="drop", sources=[SRC_A], active_from_ns=1_000, active_until_ns=2_000),
        rule(id="late", action="delay", delay_ms=50, active_from_ns=1_500, active_until_ns=3_000),
        rule(id="until", action="duplicate", active_until_ns=1_000),
    )
    pkt = ip_udp(dgram(ACK(1, 1, 1)))
    kinds = [e.judge(pkt, t)[0] for t in (500, 999, 1_000, 1_600, 2_000, 2_999, 3_000)]
    assert kinds == [DUPLICATE, DUPLICATE, DROP, DROP, DELAY, DELAY, ACCEPT]
    assert [e.rule_stats()[r]["matched"] for r in ("drop", "late", "until")] == [2, 2, 2]
    assert [r.id for r in e.active_rules(1_700)] == ["drop", "late"]


def test_judge_reads_the_monotonic_clock_only_for_timed_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    now = time.monotonic_ns()
    pkt = ip_udp(dgram(ACK(1, 1, 1)))
    e = judge_of(rule(id="now", active_from_ns=max(0, now - 10**9), active_until_ns=now + 60 * 10**9))
    assert e.judge(pkt)[0] == DROP  # now_ns=None: time.monotonic_ns()
    assert judge_of(rule(active_from_ns=now + 60 * 10**9)).judge(pkt)[0] == ACCEPT
    untimed = judge_of(rule())
    monkeypatch.setattr(time, "monotonic_ns", lambda: pytest.fail("an untimed judge read the clock"))
    assert untimed.judge(pkt)[0] == DROP


def test_new_rules_replace_the_cached_active_set() -> None:
    e = judge_of(rule(match="UNICAST3.ACK()", active_from_ns=1_000, active_until_ns=2_000))
    ack = ip_udp(dgram(ACK(1, 1, 1)))
    assert e.judge(ack, 1_500)[0] == DROP  # caches the span [1000, 2000)
    e.set_rules(compile_rules([rule(match="UNICAST3.ACK()", active_from_ns=0, active_until_ns=1_200)]))
    assert e.judge(ack, 1_500)[0] == ACCEPT
    assert e.judge(ack, 1_100)[0] == DROP and stats_of(e) == (2, 2)  # same id: its counters carry over
    e.set_rules(compile_rules([rule(match="UNICAST3.ACK()")]))  # untimed again: always active
    assert e.judge(ack, 10**15)[0] == DROP and not e.timed


def test_an_empty_window_never_acts() -> None:
    e = judge_of(rule(active_from_ns=1_000, active_until_ns=1_000))
    assert [e.judge(ip_udp(dgram(ACK(1, 1, 1))), t)[0] for t in (999, 1_000, 1_001)] == [ACCEPT] * 3


# --- validation ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"action": "drop"}, "id"),
        ({"id": "x", "action": "explode"}, "action"),
        ({"id": "x", "action": "drop", "sources": ["10.1.2.300"]}, "sources"),
        ({"id": "x", "action": "drop", "sources": "10.1.2.3"}, "sources"),
        ({"id": "x", "action": "drop", "match": "UNICAST3.NOPE()"}, "match"),
        ({"id": "x", "action": "drop", "match": "UNICAST3.XMIT_REQ(ranges=1)"}, "match"),
        ({"id": "x", "action": "drop", "match": "UNICAST3.ACK(seqno=-1)"}, "match"),
        ({"id": "x", "action": "drop", "match": "UNICAST3.DATA(first=2)"}, "match"),
        ({"id": "x", "action": "drop", "match": 5}, "match"),
        ({"id": "x", "action": "drop", "probability": 1.5}, "probability"),
        ({"id": "x", "action": "drop", "probability": "half"}, "probability"),
        ({"id": "x", "action": "drop", "count": -1}, "count"),
        ({"id": "x", "action": "drop", "count": 1.5}, "count"),
        ({"id": "x", "action": "delay", "delay_ms": -5}, "delay_ms"),
        ({"id": "x", "action": "delay", "jitter_ms": True}, "jitter_ms"),
        ({"id": "x", "action": "drop", "delay_ms": 5}, "delay_ms"),
        ({"id": "x", "action": "drop", "seed": "s"}, "seed"),
        ({"id": "x", "action": "drop", "colour": "red"}, "colour"),
        ({"id": "x", "action": "drop", "active_from_ns": "soon"}, "active_from_ns"),
        ({"id": "x", "action": "drop", "active_from_ns": -1}, "active_from_ns"),
        ({"id": "x", "action": "drop", "active_from_ns": True}, "active_from_ns"),
        ({"id": "x", "action": "drop", "active_until_ns": 1.5e9}, "active_until_ns"),
        ({"id": "x", "action": "drop", "active_from_ns": 2000, "active_until_ns": 1999}, "active_until_ns"),
    ],
)
def test_bad_rules_are_rejected_naming_the_field(spec: dict, field: str) -> None:
    with pytest.raises(RuleValidationError) as err:
        compile_rule(spec)
    assert field in str(err.value)
    if "id" in spec:
        assert repr(spec["id"]) in str(err.value)


def test_duplicate_ids_are_rejected() -> None:
    with pytest.raises(RuleValidationError, match="'a'"):
        compile_rules([{"id": "a", "action": "drop"}, {"id": "a", "action": "delay"}])
    with pytest.raises(RuleValidationError):
        compile_rules({"id": "a"})


def test_a_valid_rule_compiles_with_defaults() -> None:
    r = compile_rule({"id": "a", "action": "delay", "delay_ms": 50, "match": "unicast3.ack(seqno=1..2)"})
    assert r.spec == {
        "id": "a",
        "sources": [],
        "match": "unicast3.ack(seqno=1..2)",
        "action": "delay",
        "probability": 1.0,
        "count": None,
        "delay_ms": 50.0,
        "jitter_ms": 0.0,
        "seed": 0,
        "active_from_ns": None,
        "active_until_ns": None,
    }
    assert not r.link and not r.timed and r.tests[0][0] == 2  # seqno sits right after proto and type


# --- queue sizing --------------------------------------------------------------------------------------------------


def test_default_max_len() -> None:
    assert default_max_len(0, 0) == 4096
    assert default_max_len(10_000, 50) == 4096  # 1000 x 2 < floor
    assert default_max_len(50_000, 100, 20) == 12_000
    assert default_max_len(100_000, 1000) == 65_535
    assert nfqueue.DEFAULT_MAX_LEN == 4096

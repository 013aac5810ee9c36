"""The jgroups-5 wire profile (chaos/profiles/jgroups5_rules.py, jgroups5_u32.py, jgroups5_spans.py,
chaos/nfqueue/wires.py) on the golden datagrams captured from real 5.5.6 members (tests/fixtures/jgroups5/). For
every rule a golden datagram can be asked about (every header type on the wire, alone and with each of its field
values, ranges around them and values nobody has), on every datagram:
- the span walker finds the decoder's messages and headers, and a LIST's count;
- the kernel's u32 drop rules (evaluated by chaos/u32.py as xt_u32 does) drop exactly the SINGLE datagrams whose
  message matches with its first header, every one of them; the RETURN rules only let through datagrams no rule
  matches;
- the NFQUEUE judge drops a matching SINGLE datagram, cuts the matching messages out of a LIST (the bytes equal the
  decoder's `cut`: the count lowered, the rest decodes to the other messages) and leaves the rest untouched;
- kernel and handler together decide every datagram as the decoder's reading says: no wrong drop, no missed one;
- a datagram of a shape the profile does not know passes untouched and is counted.
"""

from __future__ import annotations

import random
from functools import cache
from typing import Any

import pytest

from chaos import kernel, u32
from chaos.fault_table import QueueBypass
from chaos.nfqueue import ACCEPT, DROP, Judge, RuleValidationError, compile_rules
from chaos.profiles import PROFILES, Discard, parse_match
from chaos.profiles import jgroups5 as wire
from chaos.profiles import jgroups5_rules as rules
from chaos.profiles import jgroups5_u32 as ju
from chaos.profiles.jgroups5_spans import walk
from chaos.rules import Match, RuleError
from tests.foreign.jgroups5_golden import WIRE, data_of, golden, name_of, packet

# the names issue #35 asks for, each with what it must find on the golden wire
ISSUE_NAMES = (
    "UNICAST3.DATA(seqno=3)", "UNICAST3.DATA(first=1)", "UNICAST3.ACK()", "UNICAST3.SEND_FIRST_SEQNO()",
    "UNICAST3.XMIT_REQ()", "UNICAST3.CLOSE()", "NAKACK2.MSG(seqno=3)", "NAKACK2.XMIT_REQ()", "NAKACK2.HIGHEST_SEQNO()",
    "NAKACK4.ACK()", "GMS.VIEW()", "GMS.JOIN_RSP()", "MERGE3.INFO()", "STABLE.GOSSIP()",
)  # fmt: skip


def _rule_name(h: wire.Header) -> str:
    return h.key if h.type_name else f"{h.protocol}.{rules.UNTYPED[h.protocol]}"


def _fields_of(h: wire.Header) -> dict[str, int]:
    return {k: int(v) for k, v in h.fields.items() if isinstance(v, bool | int)}


@cache
def datagrams() -> tuple[tuple[str, bytes, bytes, wire.Datagram], ...]:
    """(name, UDP payload, IPv4 packet, decoding) of every golden datagram."""
    return tuple((name_of(d), data_of(d), packet(data_of(d)), wire.decode(data_of(d))) for d in golden())


@cache
def expressions() -> tuple[str, ...]:
    """Every header type on the golden wire, alone, and per field with the smallest, the middle and the largest
    value seen, a range from each and a value nothing has."""
    out: set[str] = set()
    seen: dict[tuple[str, str, str], set[int]] = {}
    for *_, dg in datagrams():
        for m in dg.messages:
            for h in m.headers:
                if h.protocol == "TP":
                    continue
                name = _rule_name(h)
                out.add(f"{name}()")
                values = _fields_of(h)
                for f in rules.SPECS[name].fields:
                    if f.name in values:
                        seen.setdefault((name, f.name, f.kind), set()).add(values[f.name])
    for (name, field, kind), values in seen.items():
        ordered = sorted(values)
        for v in {ordered[0], ordered[len(ordered) // 2], ordered[-1]}:
            out.add(f"{name}({field}={v})")
            if kind != "bool":
                out.add(f"{name}({field}={v}..{v + 300})")
            if kind in ("longc", "intc"):
                out.add(f"{name}({field}={v + 70000})")
    return tuple(sorted(out))


def truth(match: Match, dg: wire.Datagram) -> list[bool]:
    """Per message of the datagram, whether any of its headers matches (the decoder's reading)."""
    spec = rules.spec_of(match)
    hits = []
    for m in dg.messages:
        hit = False
        for h in m.headers:
            if (h.id, h.magic) == (spec.header.id, spec.header.magic) and h.type == spec.type_code:
                values = _fields_of(h)
                hit = all(_holds(v, values.get(n)) for n, v in match.fields)
        hits.append(hit)
    return hits


def _holds(want: int | tuple[int, int], value: int | None) -> bool:
    lo, hi = want if isinstance(want, tuple) else (want, want)
    return value is not None and lo <= value <= hi


def _first_matches(match: Match, dg: wire.Datagram) -> bool:
    """What u32 must drop: a SINGLE datagram (UUID addresses) whose message's first header matches."""
    if dg.form != "SINGLE" or not all(isinstance(a, wire.Uuid) for a in (dg.messages[0].src, dg.messages[0].dest) if a):
        return False
    first = dg.messages[0].headers[0]
    spec = rules.spec_of(match)
    return (first.id, first.magic) == (spec.header.id, spec.header.magic) and truth(match, dg)[0]


def kernel_drops(match: Match, pkt: bytes) -> bool:
    return any(u32.matches(u32.chunks(tests), pkt) for tests in ju.u32_drop(match))


def kernel_returns(protocols: set[str], pkt: bytes) -> bool:
    return any(u32.matches(u32.chunks(tests), pkt) for tests in ju.u32_decided(protocols))


def judge_for(expr: str, **extra: Any) -> Judge:
    return Judge(compile_rules([{"id": "r", "match": expr, "action": "drop", "wire": WIRE, **extra}]))


# --- tests ------------------------------------------------------------------------------------------------------------


def test_the_names_the_issue_asks_for_parse_and_find_their_messages_on_the_golden_wire() -> None:
    for expr in ISSUE_NAMES:
        match = parse_match(expr, WIRE)
        found = sum(sum(truth(match, dg)) for *_, dg in datagrams())
        assert found > 0, f"{expr} matches nothing among the golden datagrams"
    assert len(expressions()) > 120


def test_the_span_walker_finds_the_decoders_messages_headers_and_count() -> None:
    for name, data, _, dg in datagrams():
        count_at, spans = walk(data)
        assert count_at == dg.count_at, name
        assert spans == [(m.start, m.end, tuple(((h.id << 16) | h.magic, h.body) for h in m.headers))
                         for m in dg.messages], name  # fmt: skip


def test_every_rule_name_parses_and_the_bad_ones_say_why() -> None:
    for expr in expressions():
        match = parse_match(expr, WIRE)
        assert match.wire == WIRE and str(match) == expr
    assert str(parse_match("STABLE.STABLE_GOSSIP()", WIRE)) == "STABLE.GOSSIP()"  # STABLE.java's constant's name
    assert parse_match("unicast3.data(first=true)", WIRE).fields == (("first", 1),)
    assert [n for n in rules.rule_names() if n.startswith("UNICAST3.")] == [
        "UNICAST3.ACK(seqno, conn_id, timestamp)", "UNICAST3.CLOSE(conn_id)", "UNICAST3.DATA(seqno, conn_id, first)",
        "UNICAST3.SEND_FIRST_SEQNO(timestamp)", "UNICAST3.XMIT_REQ()",
    ]  # fmt: skip
    for bad, words in (
        ("UNICAST2.DATA()", "unknown JGroups 5 header UNICAST2.DATA; valid headers: FD_ALL.HEARTBEAT"),
        ("UNICAST3.DATA(seq=1)", "UNICAST3.DATA has no field 'seq'; its fields: seqno, conn_id, first"),
        ("MERGE3.INFO(view_id=3)", "MERGE3.INFO has no field 'view_id'; its fields: (none before its first address"),
        ("UNICAST3.DATA(conn_id=70000)", "outside a i16 field"),
        ("UNICAST3.ACK(timestamp=4294967296)", "outside a intc field"),
        ("UNICAST3.DATA(first=maybe)", "is a bool"),
        ("TP.HEADER()", "use partition or loss"),
        ("UNICAST3.DATA(seqno=1", "cannot parse"),
    ):
        with pytest.raises(RuleError) as e:
            parse_match(bad, WIRE)
        assert words in str(e.value), (bad, str(e.value))


def test_u32_drops_exactly_the_single_datagrams_whose_first_header_matches() -> None:
    """0 wrong drops over every (rule, golden datagram) pair, and none left to the handler that u32 can decide."""
    checked = dropped = 0
    for expr in expressions():
        match = parse_match(expr, WIRE)
        for name, _, pkt, dg in datagrams():
            want = _first_matches(match, dg)
            assert kernel_drops(match, pkt) == want, f"{expr}: u32 {'misses' if want else 'drops'} {name}"
            checked += 1
            dropped += want
    assert dropped > 300 and checked > 30_000


def test_compressed_ranges_become_exact_byte_patterns() -> None:
    """u32 compares bytes: a range of compressed numbers is a few patterns of a length byte and little-endian bytes
    that hold exactly the numbers of the range, whatever their lengths (0 has none, a negative one all)."""
    rng = random.Random(5)
    edges = [0, 1, 2, 254, 255, 256, 257, 65535, 65536, 2**24, 2**31 - 1, 2**32, 2**56, 2**63 - 1, -1, -(2**63)]
    values = [
        *edges,
        *(rng.randrange(-(2**63), 2**63) for _ in range(200)),
        *(rng.randrange(70000) for _ in range(200)),
    ]
    ranges = [(0, 0), (1, 255), (3, 300), (250, 70000), (0, 2**40), (-5, -1), (-(2**63), 2**63 - 1), (255, 256)]
    ranges += [tuple(sorted((rng.randrange(-1000, 2**20), rng.randrange(-1000, 2**20)))) for _ in range(40)]
    for lo, hi in ranges:
        pieces = ju.compressed_pieces(lo, hi, 64)
        for v in values:
            n = 0 if v == 0 else 8 if v < 0 else (v.bit_length() + 7) // 8
            b = (v % 2**64).to_bytes(8, "little")[:n]
            hits = [p for p in pieces if p[0] == n and all(a <= b[i] <= z for i, a, z in p[1])]
            assert len(hits) == (1 if lo <= v <= hi else 0), (lo, hi, v, hits)


def test_return_rules_only_pass_datagrams_no_rule_of_the_source_matches() -> None:
    for expr in expressions():
        match = parse_match(expr, WIRE)
        for name, _, pkt, dg in datagrams():
            if kernel_drops(match, pkt) or not kernel_returns({match.protocol}, pkt):
                continue
            assert not any(truth(match, dg)), f"{expr}: a RETURN rule passes {name}, which matches"


def test_the_handler_drops_singles_and_cuts_lists_byte_for_byte() -> None:
    cut_some = 0
    for expr in expressions():
        for name, data, pkt, dg in datagrams():
            hits = truth(parse_match(expr, WIRE), dg)
            j = judge_for(expr)
            verdict, out, _ = j.judge(pkt)
            if not any(hits):
                assert (verdict, out) == (ACCEPT, None), f"{expr} touched {name}"
            elif all(hits):
                assert verdict == DROP, f"{expr}: {name} must be dropped"
            else:
                assert verdict == ACCEPT and out is not None, f"{expr}: {name} must lose some messages"
                cut = data
                for i in reversed([i for i, hit in enumerate(hits) if hit]):
                    cut = wire.cut(cut, dg, i)
                    dg = wire.decode(cut)
                assert out == packet(cut), f"{expr}: the rewritten {name} is not the decoder's cut"
                rest = wire.decode(out[28:])
                assert rest.skippable and rest.count == len(rest.messages) == hits.count(False)
                cut_some += 1
            assert j.rules[0].dropped == j.rules[0].matched == sum(hits)
    assert cut_some > 20


def test_kernel_and_handler_together_decide_every_datagram_as_the_decoder_reads_it() -> None:
    """The path a stateless drop takes (u32 DROP, then the RETURN rules, then the handler): the datagram that
    arrives is the one with exactly the matching messages removed."""
    wrong = 0
    for expr in expressions():
        match = parse_match(expr, WIRE)
        for _, _, pkt, dg in datagrams():
            hits = truth(match, dg)
            if kernel_drops(match, pkt):
                arrives = None
            elif kernel_returns({match.protocol}, pkt):
                arrives = pkt
            else:
                verdict, out, _ = judge_for(expr).judge(pkt)
                arrives = None if verdict == DROP else out or pkt
            kept = [] if arrives is None else wire.decode(arrives[28:]).messages
            wrong += len(kept) != hits.count(False)
    assert wrong == 0


def test_count_acts_on_the_first_n_matching_messages() -> None:
    acks = [data_of(d) for d in golden() if d["kind"] == "SINGLE [UNICAST3.ACK TP]"]
    j = judge_for("UNICAST3.ACK()", count=2)
    verdicts = [j.judge(packet(d))[0] for d in acks]
    assert len(acks) > 4 and verdicts[:2] == [DROP, DROP] and set(verdicts[2:]) == {ACCEPT}
    assert (j.rules[0].matched, j.rules[0].dropped) == (len(acks), 2)


def test_a_shape_the_profile_does_not_know_passes_untouched_and_is_counted() -> None:
    data = next(data_of(d) for d in golden() if d["kind"] == "SINGLE [UNICAST3.DATA TP]")
    h = wire.decode(data).messages[0].headers[1]  # TP's, after UNICAST3's
    bad = bytearray(data)
    bad[h.start + 2 : h.start + 4] = (999).to_bytes(2, "big")
    old = bytearray(data)
    old[0:2] = ((5 << 11) | (2 << 6) | 29).to_bytes(2, "big")  # 5.2.29: another layout of TpHeader
    other = packet(b"not jgroups at all")
    j = judge_for("UNICAST3.DATA()")
    for pkt in (packet(bytes(bad)), packet(bytes(old)), other):
        assert j.judge(pkt)[:2] == (ACCEPT, None)
    assert (j.unparsed, j.unknown, j.rules[0].matched) == (3, 2, 0)  # the third is no JGroups 5 datagram
    assert kernel_drops(parse_match("UNICAST3.DATA()", WIRE), packet(bytes(bad)))  # its first header is UNICAST3's
    assert not kernel_drops(parse_match("UNICAST3.DATA()", WIRE), packet(bytes(old)))
    queued = ju.u32_datagrams()
    assert u32.matches(queued, packet(bytes(old))) and not u32.matches(queued, other)
    warning = QueueBypass("B", 10, 0, 0, 0, ["f1"], unknown_shapes=j.unknown).warning()
    assert warning is not None and "could not read 2 datagrams of a shape its wire profile does not know" in warning
    assert "passed untouched" in warning and "f1" in warning


def test_render_puts_stateless_drops_in_the_kernel_and_the_rest_in_the_queue() -> None:
    profile = PROFILES[WIRE]
    match = parse_match("UNICAST3.DATA(seqno=6)", WIRE)
    ns = kernel.NamespaceRules()
    profile.render(ns, [Discard("10.0.0.1", match, True)])
    targets = [r.target for r in ns.u32_rules]
    assert targets == ["DROP"] * targets.count("DROP") + ["RETURN"] * targets.count("RETURN") and "RETURN" in targets
    assert ns.queue_u32 == {"10.0.0.1": ("0>>24=0x45", "28>>27=5")}
    lines = kernel.iptables_script(ns).splitlines()
    assert lines.index(next(x for x in lines if "-j RETURN" in x)) < lines.index(
        next(x for x in lines if "NFQUEUE" in x)
    )
    for line in lines:
        for expr in line.split('--u32 "')[1:]:
            tests = expr.split('"')[0].split("&&")
            assert len(tests) <= u32.MAX_TESTS and all(len(u32.parse_test(t).ops) <= 10 for t in tests), line
    counted = kernel.NamespaceRules()  # a count: the handler decides everything
    profile.render(counted, [Discard("10.0.0.1", match, False)])
    assert counted.u32_rules == [] and "10.0.0.1" in counted.queue_u32
    shaped = kernel.NamespaceRules(queue_all={"10.0.0.1"})  # a delay on the source: nothing may bypass the handler
    profile.render(shaped, [Discard("10.0.0.1", match, True)])
    assert {r.target for r in shaped.u32_rules} == {"DROP"}
    wide = parse_match("UNICAST3.DATA(seqno=1..100000000, conn_id=-5..5)", WIRE)  # u32 cannot say a signed range
    assert ju.u32_drop(wide) == ()


def test_a_mix_of_wires_in_one_handler_is_refused() -> None:
    specs = [
        {"id": "a", "match": "UNICAST2.DATA()", "action": "drop", "wire": "jgroups-2.12"},
        {"id": "b", "match": "UNICAST3.DATA()", "action": "drop", "wire": WIRE},
    ]
    with pytest.raises(RuleValidationError, match="rule 'b': wire: the message rules of one handler read one wire"):
        compile_rules(specs)
    with pytest.raises(RuleValidationError, match=r"rule 'c': match: unknown JGroups 5 header UNICAST2\.DATA"):
        compile_rules([{"id": "c", "match": "UNICAST2.DATA()", "action": "drop", "wire": WIRE}])

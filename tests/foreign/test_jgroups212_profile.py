"""The jgroups-2.12 wire profile (chaos/profiles/jgroups212_rules.py, jgroups212_spans.py, chaos/nfqueue/wires.py) on
the golden datagrams captured from the real jar (tests/fixtures/jgroups212/: the UNICAST2 run and the UNICAST run in
unicast/). For every rule a golden datagram can be asked about (every header type on the wire, alone and with each of
its field values), on every datagram:
- the span walker finds the decoder's messages and headers;
- the kernel's u32 drop rules (evaluated by chaos/u32.py as xt_u32 does) drop exactly the datagrams that carry one
  message which matches, and every such datagram whose wanted header comes first in a shape u32 can read; the RETURN
  rules only let through datagrams no rule matches;
- the NFQUEUE judge drops a matching SINGLE datagram, cuts the matching messages out of a LIST (the bytes equal the
  decoder's `cut`, the rest decodes to the other messages), and leaves the rest untouched;
- kernel and handler together decide every datagram as the decoder's reading says: no wrong drop, no missed one.
"""

from __future__ import annotations

import json
import socket
import struct
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from chaos import kernel, u32
from chaos.nfqueue import ACCEPT, DROP, Judge, compile_rules
from chaos.nfqueue.ipudp import with_udp_payload
from chaos.profiles import PROFILES, Discard, parse_match
from chaos.profiles import jgroups212 as wire
from chaos.profiles import jgroups212_rules as rules
from chaos.profiles.jgroups212_spans import walk
from chaos.rules import Match, RuleError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "jgroups212"
WIRE = "jgroups-2.12"


@cache
def golden() -> tuple[tuple[str, bytes], ...]:
    out = []
    for path in (FIXTURES / "datagrams.jsonl", FIXTURES / "unicast" / "datagrams.jsonl"):
        for line in path.read_text().splitlines():
            d = json.loads(line)
            out.append((f"{path.parent.name}/n={d['n']} {d['kind']}", bytes.fromhex(d["hex"])))
    return tuple(out)


def packet(payload: bytes, src: str = "10.0.0.1") -> bytes:
    """The datagram as the kernel and the queue see it: an IPv4/UDP packet without options."""
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 0, 1, 0, 64, 17, 0, socket.inet_aton(src), socket.inet_aton("10.0.0.2"))
    return with_udp_payload(ip + struct.pack("!HHHH", 7800, 7800, 8, 0), payload)


def _rule_name(h: wire.Header) -> str:
    return h.key if h.type_name else f"{h.protocol}.{rules.UNTYPED[h.protocol]}"


def _fields_of(h: wire.Header) -> dict[str, int]:
    """The decoder's values of a header's matchable fields (NAKACK's range as low and high)."""
    out = {k: int(v) for k, v in h.fields.items() if isinstance(v, bool | int)}
    if isinstance(h.fields.get("range"), dict):
        out.update(low=h.fields["range"]["low"], high=h.fields["range"]["high"])
    return out


@cache
def expressions() -> tuple[str, ...]:
    """Every header type on the golden wire, alone, with each field value seen, a range around it and a value
    nothing has."""
    out: set[str] = set()
    for _, data in golden():
        for m in wire.decode(data).messages:
            for h in m.headers:
                if h.protocol == "UDP":
                    continue
                name = _rule_name(h)
                out.add(f"{name}()")
                values = _fields_of(h)
                for f in rules.SPECS[name].fields:
                    if f.name in values:
                        v = values[f.name]
                        out.add(f"{name}({f.name}={v})")
                        if f.kind != "bool":
                            out.add(f"{name}({f.name}={v}..{v + 1})")
                        if f.kind == "i64":
                            out.add(f"{name}({f.name}={v + 1000})")
    return tuple(sorted(out))


def truth(match: Match, data: bytes) -> list[bool]:
    """Per message of the datagram, whether any of its headers matches (the decoder's reading)."""
    spec = rules.spec_of(match)
    hits = []
    for m in wire.decode(data).messages:
        hit = False
        for h in m.headers:
            if (h.id, h.magic) != (spec.header.id, spec.header.magic) or h.type != spec.type_code:
                continue
            values = _fields_of(h)
            hit = all(_holds(v, values.get(n)) for n, v in match.fields)
        hits.append(hit)
    return hits


def _holds(want: int | tuple[int, int], value: int | None) -> bool:
    lo, hi = want if isinstance(want, tuple) else (want, want)
    return value is not None and lo <= value <= hi


def _first_is_readable(match: Match, data: bytes) -> bool:
    """Whether u32 must decide the datagram: one message whose first header is the rule's class, plain UUIDs, and
    for a LIST the layout [the header with a fixed body][UDP]."""
    dg = wire.decode(data)
    spec = rules.spec_of(match)
    if len(dg.messages) != 1:
        return False
    m = dg.messages[0]
    first = m.headers[0]
    uuids = all(isinstance(a, wire.Uuid) and a.extra is None for a in (m.src, *([m.dest] if m.dest else [])))
    if (first.id, first.magic) != (spec.header.id, spec.header.magic) or not uuids:
        return False
    if dg.form == "SINGLE":
        return True
    return (
        len(m.headers) == 2
        and spec.body_size is not None
        and m.leading in (0, wire.BUF_SET)
        and dg.dest is None
        and first.end - first.body == spec.body_size
    )


def kernel_drops(match: Match, pkt: bytes) -> bool:
    return any(u32.matches(u32.chunks(tests), pkt) for tests in rules.u32_drop(match))


def kernel_returns(protocols: set[str], pkt: bytes) -> bool:
    return any(u32.matches(u32.chunks(tests), pkt) for tests in rules.u32_decided(protocols))


def judge_for(expr: str, **extra: Any) -> Judge:
    return Judge(compile_rules([{"id": "r", "match": expr, "action": "drop", "wire": WIRE, **extra}]))


# --- tests ------------------------------------------------------------------------------------------------------------


def test_the_fixtures_hold_both_unicast_protocols() -> None:
    kinds = " ".join(name for name, _ in golden())
    for needed in ("UNICAST2.DATA", "UNICAST.DATA", "UNICAST.ACK", "NAKACK.MSG", "NAKACK.XMIT_REQ", "GMS.VIEW"):
        assert needed in kinds, f"no {needed} among the golden datagrams: capture again"
    assert len(expressions()) > 100


def test_the_span_walker_finds_the_decoders_messages_and_headers() -> None:
    for name, data in golden():
        dg = wire.decode(data)
        is_list, spans = walk(data)
        assert is_list == (dg.form == "LIST"), name
        want = [
            (m.presence, m.start, m.end, tuple(((h.id << 16) | h.magic, h.body) for h in m.headers))
            for m in dg.messages
        ]
        assert spans == want, name


def test_every_rule_name_parses_and_the_bad_ones_say_why() -> None:
    for expr in expressions():
        match = parse_match(expr, WIRE)
        assert match.wire == WIRE and str(match) == expr
    assert str(parse_match("NAKACK2.MSG(seqno=7)", WIRE)) == "NAKACK.MSG(seqno=7)"  # an alias
    assert parse_match("unicast2.data(first=true)", WIRE).fields == (("first", 1),)
    for bad, words in (
        ("UNICAST3.ACK()", "unknown JGroups 2.12 header UNICAST3.ACK; valid headers: FD.HEARTBEAT"),
        ("UNICAST2.DATA(seq=1)", "UNICAST2.DATA has no field 'seq'; its fields: seqno, conn_id, first"),
        ("GMS.VIEW(view_id=3)", "GMS.VIEW has no field 'view_id'; its fields: merge_view"),
        ("UNICAST2.DATA(conn_id=70000)", "outside a i16 field"),
        ("UNICAST2.DATA(first=maybe)", "is a bool"),
        ("UDP.TP()", "use partition or loss"),
        ("UNICAST2.DATA(seqno=1", "cannot parse"),
    ):
        with pytest.raises(RuleError) as e:
            parse_match(bad, WIRE)
        assert words in str(e.value), (bad, str(e.value))
    with pytest.raises(RuleError, match=r"unknown wire profile 'jgroups-3\.6'"):
        parse_match("UNICAST2.DATA()", "jgroups-3.6")


def test_u32_drops_exactly_the_datagrams_whose_one_message_matches() -> None:
    """0 wrong drops over every (rule, golden datagram) pair, and no datagram u32 can read is left to the handler."""
    checked = dropped = 0
    for expr in expressions():
        match = parse_match(expr, WIRE)
        for name, data in golden():
            hits = truth(match, data)
            want = len(hits) == 1 and hits[0]
            got = kernel_drops(match, packet(data))
            assert not got or want, f"{expr}: u32 drops {name}, which it must not"
            if want and _first_is_readable(match, data):
                assert got, f"{expr}: u32 leaves {name} to the handler, although it can read it"
            checked += 1
            dropped += got
    assert dropped > 50 and checked > 10_000


def test_the_research_notes_shapes_compile_and_match_their_datagrams() -> None:
    """The rules the fast path exists for: an app unicast by seqno, the first of a connection, UNICAST2 STABLE, a
    single-message multicast bundle by seqno, NAKACK's XMIT_REQ."""
    by_kind: dict[str, list[bytes]] = {}
    for name, data in golden():
        by_kind.setdefault(name.split(" ", 1)[1], []).append(data)
    cases = {
        "SINGLE [UNICAST2.DATA UDP]": "UNICAST2.DATA()",
        "SINGLE [UNICAST2.STABLE UDP]": "UNICAST2.STABLE()",
        "SINGLE [UNICAST.ACK UDP]": "UNICAST.ACK()",
        "LIST mcast [NAKACK.MSG UDP]": "NAKACK.MSG()",
        "SINGLE oob [NAKACK.XMIT_REQ UDP]": "NAKACK.XMIT_REQ()",
        "SINGLE mcast oob [PING.GET_MBRS_REQ UDP]": "PING.GET_MBRS_REQ()",
    }
    for kind, expr in cases.items():
        assert by_kind.get(kind), f"no {kind} among the golden datagrams"
        for data in by_kind[kind]:
            assert kernel_drops(parse_match(expr, WIRE), packet(data)), (kind, expr)
    first = next(
        d for d in by_kind["SINGLE [UNICAST2.DATA UDP]"] if wire.decode(d).messages[0].headers[0].fields["first"]
    )
    assert kernel_drops(parse_match("UNICAST2.DATA(first=true)", WIRE), packet(first))
    assert not kernel_drops(parse_match("UNICAST2.DATA(first=false)", WIRE), packet(first))


def test_return_rules_only_pass_datagrams_no_rule_of_the_source_matches() -> None:
    for expr in expressions():
        match = parse_match(expr, WIRE)
        for name, data in golden():
            pkt = packet(data)
            if kernel_drops(match, pkt) or not kernel_returns({match.protocol}, pkt):
                continue
            assert not any(truth(match, data)), f"{expr}: a RETURN rule passes {name}, which matches"


def test_the_handler_drops_singles_and_cuts_lists_byte_for_byte() -> None:
    for expr in expressions():
        for name, data in golden():
            hits = truth(parse_match(expr, WIRE), data)
            j = judge_for(expr)
            verdict, out, _ = j.judge(packet(data))
            if not any(hits):
                assert (verdict, out) == (ACCEPT, None), f"{expr} touched {name}"
            elif all(hits):
                assert verdict == DROP, f"{expr}: {name} must be dropped"
            else:
                assert verdict == ACCEPT and out is not None, f"{expr}: {name} must lose some messages"
                dg, cut = wire.decode(data), data
                for i in reversed([i for i, hit in enumerate(hits) if hit]):
                    cut = wire.cut(cut, dg, i)
                    dg = wire.decode(cut)
                assert out == packet(cut), f"{expr}: the rewritten {name} is not the decoder's cut"
                rest = wire.decode(out[28:])
                assert rest.skippable and len(rest.messages) == hits.count(False)
            assert j.rules[0].dropped == sum(hits)


def test_kernel_and_handler_together_decide_every_datagram_as_the_decoder_reads_it() -> None:
    """The path a stateless drop takes (u32 DROP, then the RETURN rules, then the handler): the datagram that
    arrives is the one with exactly the matching messages removed."""
    wrong = 0
    for expr in expressions():
        match = parse_match(expr, WIRE)
        for _, data in golden():
            pkt, hits = packet(data), truth(match, data)
            if kernel_drops(match, pkt):
                arrives = None
            elif kernel_returns({match.protocol}, pkt):
                arrives = pkt
            else:
                verdict, out, _ = judge_for(expr).judge(pkt)
                arrives = None if verdict == DROP else out or pkt
            kept = [] if arrives is None else [m for m in wire.decode(arrives[28:]).messages]
            wrong += len(kept) != hits.count(False)
    assert wrong == 0


def test_count_acts_on_the_first_n_matching_messages() -> None:
    apps = [d for name, d in golden() if name.endswith("SINGLE [UNICAST2.DATA UDP]")]
    j = judge_for("UNICAST2.DATA()", count=2)
    verdicts = [j.judge(packet(d))[0] for d in apps]
    assert verdicts[:2] == [DROP, DROP] and set(verdicts[2:]) == {ACCEPT}
    assert (j.rules[0].matched, j.rules[0].dropped) == (len(apps), 2)


def test_an_unknown_magic_passes_untouched_and_is_counted() -> None:
    data = next(d for n, d in golden() if n.endswith("SINGLE [UNICAST2.DATA UDP]"))
    h = wire.decode(data).messages[0].headers[1]  # UDP's, after UNICAST2's
    bad = bytearray(data)
    bad[h.start + 2 : h.start + 4] = (999).to_bytes(2, "big")
    j = judge_for("UNICAST2.DATA()")
    assert j.judge(packet(bytes(bad)))[:2] == (ACCEPT, None)
    assert j.unparsed == 1 and j.rules[0].matched == 0
    # the kernel still drops it: its first header is UNICAST2's, whatever follows
    assert kernel_drops(parse_match("UNICAST2.DATA()", WIRE), packet(bytes(bad)))


def test_render_puts_stateless_drops_in_the_kernel_and_the_rest_in_the_queue() -> None:
    profile = PROFILES[WIRE]
    match = parse_match("UNICAST2.DATA(seqno=6)", WIRE)
    ns = kernel.NamespaceRules()
    profile.render(ns, [Discard("10.0.0.1", match, True)])
    targets = [r.target for r in ns.u32_rules]
    assert targets == ["DROP"] * targets.count("DROP") + ["RETURN"] * targets.count("RETURN") and "RETURN" in targets
    assert ns.queue_u32 == {"10.0.0.1": ("0>>24=0x45", "28>>16=0x1302")}
    script = kernel.iptables_script(ns)
    lines = script.splitlines()
    assert lines.index(next(x for x in lines if "-j RETURN" in x)) < lines.index(
        next(x for x in lines if "NFQUEUE" in x)
    )
    for line in lines:
        for expr in line.split('--u32 "')[1:]:
            assert len(expr.split('"')[0].split("&&")) <= u32.MAX_TESTS, line
    counted = kernel.NamespaceRules()  # a count: the handler decides everything
    profile.render(counted, [Discard("10.0.0.1", match, False)])
    assert counted.u32_rules == [] and "10.0.0.1" in counted.queue_u32
    shaped = kernel.NamespaceRules(queue_all={"10.0.0.1"})  # a delay on the source: nothing may bypass the handler
    profile.render(shaped, [Discard("10.0.0.1", match, True)])
    assert {r.target for r in shaped.u32_rules} == {"DROP"}


def test_a_mix_of_wires_in_one_handler_is_refused() -> None:
    from chaos.nfqueue import RuleValidationError

    specs = [
        {"id": "a", "match": "UNICAST3.ACK()", "action": "drop"},
        {"id": "b", "match": "UNICAST2.DATA()", "action": "drop", "wire": WIRE},
    ]
    with pytest.raises(RuleValidationError, match="rule 'b': wire: the message rules of one handler read one wire"):
        compile_rules(specs)
    with pytest.raises(RuleValidationError, match=r"rule 'c': match: unknown JGroups 2\.12 header"):
        compile_rules([{"id": "c", "match": "UNICAST3.ACK()", "action": "drop", "wire": WIRE}])

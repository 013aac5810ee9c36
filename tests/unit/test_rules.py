from __future__ import annotations

import pytest

from chaos.rules import RuleError, parse_match


def test_parse_values_bools_and_ranges() -> None:
    m = parse_match("UNICAST3.ACK(seqno=50)")
    assert (m.protocol, m.header, m.fields) == ("UNICAST3", "ACK", (("seqno", 50),))
    assert parse_match("unicast3.data(first=true)").fields == (("first", 1),)
    r = parse_match("UNICAST3.DATA(seqno=10..20, first=0)")
    assert r.fields == (("seqno", (10, 20)), ("first", 0))
    pred = r.predicates()["seqno"]
    assert pred(10) and pred(20) and not pred(21)
    assert parse_match("UNICAST3.SEND_FIRST_SEQNO()").fields == ()
    assert str(r) == "UNICAST3.DATA(seqno=10..20, first=0)"


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("UNICAST3.AKC(seqno=1)", "valid headers: .*UNICAST3.ACK"),
        ("UNICAST3.ACK(seq=1)", "its fields: seqno, conn_id, timestamp"),
        ("UNICAST3.ACK(seqno=x)", "integer"),
        ("UNICAST3.DATA(first=maybe)", "bool"),
        ("UNICAST3.XMIT_REQ(ranges=1)", "only integer and bool"),
        ("ACK 50", "cannot parse"),
        ("UNICAST3.DATA(seqno=5..1)", "empty range"),
    ],
)
def test_bad_rules_are_rejected_with_what_is_valid(expr: str, message: str) -> None:
    with pytest.raises(RuleError, match=message):
        parse_match(expr)

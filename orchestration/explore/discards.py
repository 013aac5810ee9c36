"""Protocol-aware discards: rules on the stack's own message types, drawn from node/wire.py's header table.

A rule names a header of one of the stack's protocols (UNICAST3.ACK, NAKACK2.XMIT_REQ, GMS.VIEW, MERGE.INFO, ...),
at times a seqno worth matching (the first, middle or last message of a workload: a lost last message leaves no
gap) or a DATA's `first` flag, and acts on the first 1-3 matching packets or on every one while it is in force:
mostly dropping them, else delaying or duplicating them. Discards act on datagrams: none on the tcp transport."""

from __future__ import annotations

import random

from node import wire
from orchestration.explore.context import Context
from orchestration.explore.moves import links, valid_links
from orchestration.explore.plan import Plan, table
from orchestration.explore.tables import TomlTable

LONG_DELAY = 3.0  # the longest a delayed packet is held when no delivery bound says otherwise (stale ACKs)


def headers(ctx: Context) -> dict[str, list[tuple[str, list[tuple[str, str]]]]]:
    """Protocol -> its headers (name, fields with their kinds) for the protocols of the context's stack: from
    node/wire.py's table for chaosbed's wire, from the wire profile's rule names for a foreign one (its `seqno`
    counted as a fixed-size field, `first` as a bool: the profile checks the expression)."""
    if ctx.wire != "chaosbed":
        from orchestration.explore.foreign_context import wire_headers

        kinds = {"seqno": "u64", "first": "bool"}
        return {
            proto: [(name, [(f, kinds.get(f, "?")) for f in fields]) for name, fields in hs]
            for proto, hs in wire_headers(ctx.wire).items()
            if proto in ctx.protocols
        }
    out: dict[str, list[tuple[str, list[tuple[str, str]]]]] = {}
    for proto, name, _, fields in wire.HEADER_TABLE:
        if proto in ctx.protocols:
            out.setdefault(proto, []).append((name, fields))
    return out


def match_of(rng: random.Random, ctx: Context) -> str:
    """A match expression: a protocol of the stack, one of its headers, and at times a seqno or the first flag."""
    table_ = headers(ctx)
    proto = rng.choice(sorted(table_))
    name, fields = rng.choice(table_[proto])
    kinds = dict(fields)
    args = []
    if kinds.get("seqno") in wire.FIXED_KINDS and rng.random() < 0.5:
        args.append(f"seqno={rng.choice(ctx.seqnos)}")
    if kinds.get("first") == "bool" and rng.random() < 0.4:
        args.append(f"first={rng.randint(0, 1)}")
    return f"{proto}.{name}({', '.join(args)})"


def discard(rng: random.Random, ctx: Context, plan: Plan, at: float, d: float) -> list[TomlTable]:
    if not ctx.discards:
        return []
    match = match_of(rng, ctx)
    if ctx.wire != "chaosbed":
        match = _readable(match, ctx.wire)
    pair = links(rng, ctx)
    if not valid_links(pair):
        return []
    keys: TomlTable = {"match": match, **pair}
    if rng.random() < 0.5:
        keys["count"] = rng.randint(1, 3)
    action = rng.random()
    if action < 0.12:
        top = ctx.max_delay() if ctx.delivery_bound else LONG_DELAY
        keys["action"] = "delay"
        keys["delay"] = f"{round(rng.uniform(0.05, top) * 1000)}ms"
    elif action < 0.2:
        keys["action"] = "duplicate"
    return [table("discard", at, d, **keys)]


def _readable(match: str, wire_name: str) -> str:
    """The match, or the match without its arguments where the foreign profile cannot test them."""
    from chaos.profiles import parse_match
    from chaos.rules import RuleError

    try:
        parse_match(match, wire_name)
    except RuleError:
        return match.split("(", 1)[0] + "()"
    return match

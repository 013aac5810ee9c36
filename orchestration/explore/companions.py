"""Companion discards: after a move, at times, a protocol-aware discard of the messages that move makes matter, as a
targeted nemesis would: the first DATA of a connection reopened after a close; the VIEW, LEAVE_REQ/RSP or VIEW_ACK
of a member's graceful leave; the JOIN_RSP or first DATA of a restarted member; MERGE.INFO across a split, held
past its heal (so the merge that follows misses a member's view). One packet (count 1) where one loss is the point,
every matching packet in the window otherwise. Only over udp (discards act on datagrams)."""

from __future__ import annotations

import random

from node.units import parse_duration
from orchestration.explore.context import Context
from orchestration.explore.plan import table
from orchestration.explore.tables import TomlTable, groups, kind, members, text

LEAVE_HEADERS = ("GMS.VIEW()", "GMS.LEAVE_REQ()", "GMS.LEAVE_RSP()", "GMS.VIEW_ACK()")


def unicast_protocol(ctx: Context) -> str:
    return next(p for p in ctx.protocols if p.startswith("UNICAST"))


def companion(rng: random.Random, ctx: Context, faults: list[TomlTable], d: float) -> list[TomlTable]:
    """At most one discard going with the move that drew `faults` (each `d` long), or none."""
    if not ctx.udp or not faults:
        return []
    f = rng.choice(faults)
    at = parse_duration(f["at"])
    d = max(0.05, min(d, ctx.horizon - at))
    what = kind(f)
    if what == "close-connection":
        match = f"{unicast_protocol(ctx)}.DATA(first=1)"
        return [table("discard", at, d, match=match, **{"from": [text(f, "member")], "to": [text(f, "peer")]}, count=1)]
    others = [m for m in ctx.members if m != f.get("member")]
    if what == "leave" and ctx.membership:
        match = rng.choice(LEAVE_HEADERS)
        peers = sorted(rng.sample(others, rng.randint(1, len(others))))
        src, dst = (peers, [text(f, "member")]) if match == "GMS.VIEW_ACK()" else ([text(f, "member")], peers)
        return [table("discard", at, d, match=match, **{"from": src, "to": dst}, count=1)]
    if what == "restart":
        victim = text(f, "member")
        if ctx.membership and rng.random() < 0.5:
            return [table("discard", at, d, match="GMS.JOIN_RSP()", **{"from": others, "to": [victim]}, count=1)]
        match = f"{unicast_protocol(ctx)}.DATA(first=1)"
        return [table("discard", at, d, match=match, **{"from": [victim], "to": others}, count=1)]
    if what in ("split", "partition") and ctx.membership:
        return _merge_info(rng, ctx, f, at, d)
    return []


def _merge_info(rng: random.Random, ctx: Context, f: TomlTable, at: float, d: float) -> list[TomlTable]:
    """MERGE.INFO from one member to another across the cut, from the cut until 0.5-3 s after its heal."""
    if f["kind"] == "split":
        a, b = rng.sample(groups(f), 2)
        src, dst = rng.choice(a), rng.choice(b)
    else:
        src, dst = rng.choice(members(f, "from")), rng.choice(members(f, "to"))
        if src == dst:
            return []
    span = min(parse_duration(f.get("for", "0s")) + rng.uniform(0.5, 3.0), ctx.horizon - at)
    return [table("discard", at, max(span, d), match="MERGE.INFO()", **{"from": [src], "to": [dst]})]

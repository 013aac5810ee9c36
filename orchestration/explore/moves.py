"""Network moves of the generator: each draws the `[[faults]]` tables of one round that starts at `at` and is over
`d` seconds later. The rounds chaos/nemesis.py knows (isolate one member, halves, majorities ring, bridge, one-way
isolation, a flapping link) come from it; the others are here: arbitrary partitions (one-way or both ways, or a set
of one-way link cuts), splits into 2-3 groups (with a member deaf to one of its own group at times), overlapping
groups, and per-link loss, delay, duplication and reordering."""

from __future__ import annotations

import random
from collections.abc import Callable

from chaos import nemesis
from orchestration.explore.context import Context
from orchestration.explore.plan import Plan, secs, subset, table
from orchestration.explore.tables import TomlTable, text

Move = Callable[[random.Random, Context, Plan, float, float], list[TomlTable]]

NEMESIS_ROUNDS = ("isolate-one", "one-way-isolate", "random-halves", "majority-ring", "bridge", "flapping")


def nemesis_round(kind: str) -> Move:
    """One round of a chaos/nemesis.py kind (its seed drawn from `rng`), with times written to the millisecond."""

    def move(rng: random.Random, ctx: Context, plan: Plan, at: float, d: float) -> list[TomlTable]:
        faults: list[TomlTable] = nemesis.schedule(
            kind, ctx.members, seed=rng.randrange(2**32), start=at, interval=2 * d, duration=d
        )
        for f in faults:  # nemesis writes microseconds; schedules read better (and shrink) in milliseconds
            f["at"] = secs(float(text(f, "at")[:-1]))
            if "for" in f:
                f["for"] = secs(float(text(f, "for")[:-1]))
        return [f for f in faults if f.get("for") != "0s"]

    return move


def partition(rng: random.Random, ctx: Context, plan: Plan, at: float, d: float) -> list[TomlTable]:
    """Disjoint random sets that do not hear each other (one way or both), or a set of one-way link cuts."""
    names = list(ctx.members)
    if rng.random() < 0.6:
        side = subset(rng, names, 1, len(names) - 1)
        rest = [n for n in names if n not in side]
        other = subset(rng, rest)
        one_way = rng.random() < 0.5
        src, dst = (side, other) if rng.random() < 0.5 else (other, side)
        return [table("partition", at, d, **{"from": src, "to": dst, "one_way": one_way})]
    pairs = [(a, b) for a in names for b in names if a != b]
    cuts = rng.sample(pairs, rng.randint(1, min(len(pairs), len(names))))
    return [table("partition", at, d, **{"from": [a], "to": [b], "one_way": True}) for a, b in sorted(cuts)]


def split(rng: random.Random, ctx: Context, plan: Plan, at: float, d: float) -> list[TomlTable]:
    """Two or three groups (members placed at random); sometimes also one member deaf to another of its group."""
    names = list(ctx.members)
    k = rng.randint(2, min(3, len(names)))
    groups: list[list[str]] = [[] for _ in range(k)]
    for n in names:
        groups[rng.randrange(k)].append(n)
    groups = [g for g in groups if g]
    if len(groups) < 2:  # everyone landed in one group: cut one member off instead
        lone = rng.choice(names)
        groups = [[lone], [n for n in names if n != lone]]
    out = [table("split", at, d, groups=groups)]
    inside = [(a, b) for g in groups for a in g for b in g if a != b]
    if inside and rng.random() < 0.3:
        a, b = rng.choice(inside)
        out.append(table("partition", at, d, **{"from": [a], "to": [b], "one_way": True}))
    return out


def overlap(rng: random.Random, ctx: Context, plan: Plan, at: float, d: float) -> list[TomlTable]:
    """Overlapping groups: two or three groups and one member in two of them (it hears both, they do not hear each
    other). Written as one one-way partition per member: from = everyone who shares no group with it."""
    names = list(ctx.members)
    k = rng.randint(2, min(3, len(names) - 1))
    order = list(names)
    rng.shuffle(order)
    groups = [set(order[i::k]) for i in range(k)]
    shared = rng.choice(names)
    for g in rng.sample(groups, 2):
        g.add(shared)
    out = []
    for x in names:
        deaf = [y for y in names if y != x and not any(x in g and y in g for g in groups)]
        if deaf:
            out.append(table("partition", at, d, **{"from": deaf, "to": [x], "one_way": True}))
    return out


def links(rng: random.Random, ctx: Context) -> dict[str, list[str]]:
    """`from` and `to` of a link fault: mostly one directed link, else two random sets."""
    names = list(ctx.members)
    if rng.random() < 0.6:
        a, b = rng.sample(names, 2)
        return {"from": [a], "to": [b]}
    return {"from": subset(rng, names), "to": subset(rng, names)}


def valid_links(keys: dict[str, list[str]]) -> bool:
    return any(a != b for a in keys["from"] for b in keys["to"])


def link_fault(kind: str) -> Move:
    """loss, duplicate or reorder with a random probability, or delay (with jitter at times) on random links."""

    def move(rng: random.Random, ctx: Context, plan: Plan, at: float, d: float) -> list[TomlTable]:
        pair = links(rng, ctx)
        if not valid_links(pair):
            return []
        keys: TomlTable = {**pair}
        if kind == "loss":
            keys["probability"] = round(rng.uniform(0.05, 0.5), 2)
        elif kind in ("duplicate", "reorder"):
            keys["probability"] = round(rng.uniform(0.05, 0.3), 2)
        else:
            top = ctx.max_delay()
            delay = rng.uniform(0.0, top)
            keys["delay"] = f"{round(delay * 1000)}ms"
            if rng.random() < 0.5:
                keys["jitter"] = f"{round(rng.uniform(0.0, top - delay) * 1000)}ms"
        return [table(kind, at, d, **keys)]

    return move

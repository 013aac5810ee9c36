"""Member moves of the generator: kills and restarts, pauses and resumes, graceful leaves, a member closing its
unicast connection to a peer. Each reserves its victim in the Plan, so the actions of one schedule can all be
carried out (nobody is killed twice, a paused member is not sent a workload command) and enough members stay up.

A kill or a pause is undone after the round (restart, resume), or with probability PERMANENT never, where that is
fair to the checks: a crashed member for good whenever crashes converge; a member paused for good only when nothing
is owed to or from it (it sends nothing, takes part in no unicast workload, and views_converge is off, as its view
stays behind)."""

from __future__ import annotations

import random

from chaos import nemesis
from orchestration.explore.context import Context
from orchestration.explore.fairness import LEAVE_LEAD, forever_fair
from orchestration.explore.moves import Move
from orchestration.explore.plan import FOREVER, Plan, table
from orchestration.explore.tables import TomlTable, kind, text

PERMANENT = 0.25


def kill(rng: random.Random, ctx: Context, plan: Plan, at: float, d: float) -> list[TomlTable]:
    forever = rng.random() < PERMANENT
    victim = plan.pick(rng, list(ctx.members), at, FOREVER if forever else at + d)
    if victim is None:
        return []
    plan.take(victim, at, FOREVER if forever else at + d)
    out = [table("kill", at, member=victim)]
    if not forever:
        out.append(table("restart", at + d, member=victim))
    return out


def _pausable(ctx: Context, at: float, end: float) -> list[str]:
    """Members that may be paused from `at` to `end`: no workload of theirs starts meanwhile (a paused member does
    not answer the command that starts it)."""
    return [m for m in ctx.members if not any(at <= t <= end and m in who for t, who in ctx.workload_starts)]


def pause(rng: random.Random, ctx: Context, plan: Plan, at: float, d: float) -> list[TomlTable]:
    forever = rng.random() < PERMANENT
    end = FOREVER if forever else at + d
    candidates = [m for m in _pausable(ctx, at, end) if not forever or forever_fair(ctx, m)]
    victim = plan.pick(rng, candidates, at, end)
    if victim is None:
        return []
    plan.take(victim, at, end)
    out = [table("pause", at, member=victim)]
    if not forever:
        out.append(table("resume", at + d, member=victim))
    return out


def leave(rng: random.Random, ctx: Context, plan: Plan, at: float, d: float) -> list[TomlTable]:
    """A graceful leave (membership stacks): the member is gone for good. The coordinator (the first member) leaves
    half the time, as its leave hands the group over. Not near the workload's end (fairness.py)."""
    if at > ctx.sends_until - LEAVE_LEAD:
        return []
    first = ctx.members[0]
    candidates = [first] if rng.random() < 0.5 and plan.free(first, at, FOREVER) else list(ctx.members)
    victim = plan.pick(rng, candidates, at, FOREVER)
    if victim is None:
        return []
    plan.take(victim, at, FOREVER)
    return [table("leave", at, member=victim)]


def close_connection(rng: random.Random, ctx: Context, plan: Plan, at: float, d: float) -> list[TomlTable]:
    """A member closes its unicast connection to a peer (mostly one a unicast workload uses, either end), and with
    probability 1/3 the peer closes its end too at the same instant."""
    pairs = sorted(ctx.unicast_links) if ctx.unicast_links and rng.random() < 0.8 else None
    if pairs:
        a, b = rng.choice(pairs)
        member, peer = (a, b) if rng.random() < 0.5 else (b, a)
    else:
        member, peer = rng.sample(list(ctx.members), 2)
    both = rng.random() < 1 / 3
    if not plan.free(member, at, at) or (both and not plan.free(peer, at, at)):
        return []
    plan.touch(member, at)
    if both:
        plan.touch(peer, at)
    out = [table("close-connection", at, member=member, peer=peer)]
    if both:
        out.append(table("close-connection", at, member=peer, peer=member))
    return out


def nemesis_action(round_kind: str) -> Move:
    """A kill-restart or pause-resume round of chaos/nemesis.py, kept only when its victim is free (and, for a
    pause, sends no workload command meanwhile)."""

    def move(rng: random.Random, ctx: Context, plan: Plan, at: float, d: float) -> list[TomlTable]:
        faults: list[TomlTable] = nemesis.schedule(
            round_kind, ctx.members, seed=rng.randrange(2**32), start=at, interval=2 * d, duration=d
        )
        victim = text(faults[0], "member")
        allowed = _pausable(ctx, at, at + d) if round_kind == "pause-resume" else list(ctx.members)
        if victim not in allowed or not plan.room(at, at + d) or not plan.free(victim, at, at + d):
            return []
        plan.take(victim, at, at + d)
        first, second = kind(faults[0]), kind(faults[1])
        return [table(first, at, member=victim), table(second, at + d, member=victim)]

    return move

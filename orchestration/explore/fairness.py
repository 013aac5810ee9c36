"""Schedules the generator does not draw, and the shrinker does not make, because they fail for a reason that is not
the stack's:

- a `leave` less than LEAVE_LEAD before the workload ends: once every workload is done the runner ends the run as
  soon as the running members' views agree, and a member that is leaving still runs with the old view, so the run
  ends before the leave is over and views_converge fails (orchestration/schedule.py's views_agree; reported, not
  worked around there, as that file is not explore's);
- where failure detection is slower than the views' bound (Context.crashes_converge is False), a `leave` while a
  partition or split is in force, or starts within LEAVE_CUT_OFF after it: the leaver's VIEW is resent only for a
  while, so members cut off from it keep a view of a member that has gone until failure detection suspects it, and
  views_converge fails however right the stack is (as a kill would: kills are not drawn there either);
- a member paused for good (a `pause` with no later `resume`) where that is not fair to the checks (forever_fair:
  only when nothing is owed to or from it and views_converge is off, as its view stays behind). The generator draws
  none; a shrink step that removes half the faults at once can take a resume without its pause (the 5.5.6 hunt's
  membership-split-merge shrank to `pause D` alone, a views_converge failure of the test bed, 10 of 10).
"""

from __future__ import annotations

from node.units import parse_duration
from orchestration.explore.case import scenario_of
from orchestration.explore.context import Context
from orchestration.explore.foreign_context import context_for
from orchestration.explore.steps import partner
from orchestration.explore.tables import TomlTable, faults_of
from orchestration.scenario import ScenarioError

LEAVE_LEAD = 1.0  # seconds a leave comes before the end of the workload at the latest
LEAVE_CUT_OFF = 2.5  # seconds after a leave its VIEW is still resent (gms.view_ack_collection_timeout 2 s, + margin)
CUTS = ("partition", "split")


def _window(f: TomlTable) -> tuple[float, float]:
    at = parse_duration(f.get("at", "0s"))
    return at, at + parse_duration(f.get("for", "1000s"))


def unfair_leaves(faults: list[TomlTable], ctx: Context) -> list[int]:
    """The indices of the leaves among `faults` that are unfair in this context (see the module docstring)."""
    cuts = [_window(f) for f in faults if f.get("kind") in CUTS]
    out = []
    for i, f in enumerate(faults):
        if f.get("kind") != "leave":
            continue
        at = parse_duration(f.get("at", "0s"))
        late = at > ctx.sends_until - LEAVE_LEAD
        cut_off = not ctx.crashes_converge and any(s <= at + LEAVE_CUT_OFF and e >= at for s, e in cuts)
        if late or cut_off:
            out.append(i)
    return out


def forever_fair(ctx: Context, member: str) -> bool:
    """Whether the member may stay paused to the end: nothing owed to or from it, views_converge off."""
    owed = member in ctx.senders or any(member in link for link in ctx.unicast_links)
    return ctx.membership and ctx.views_bound is None and not owed


def unfair_pauses(faults: list[TomlTable], ctx: Context) -> list[int]:
    """The indices of the pauses among `faults` that no later resume undoes and that are not forever_fair."""
    return [
        i
        for i, f in enumerate(faults)
        if f.get("kind") == "pause" and partner(faults, i) is None and not forever_fair(ctx, str(f.get("member")))
    ]


def unfair(raw: TomlTable) -> str | None:
    """Why the scenario is not a fair test (None: it is)."""
    faults = faults_of(raw)
    if not any(f.get("kind") in ("leave", "pause") for f in faults):
        return None
    try:
        ctx = context_for(scenario_of(raw))
    except ScenarioError:
        return None  # the run will say so
    bad = unfair_leaves(faults, ctx)
    if bad:
        f = faults[bad[0]]
        return f"an unfair leave of {f.get('member')} at {f.get('at')} (the workload ends at {ctx.sends_until:g}s)"
    paused = unfair_pauses(faults, ctx)
    if paused:
        f = faults[paused[0]]
        return f"{f.get('member')} paused at {f.get('at')} and never resumed, while the checks wait for it"
    return None

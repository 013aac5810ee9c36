"""Schedules the generator does not draw, and the shrinker does not make, because they fail for a reason that is not
the stack's:

- a `leave` less than LEAVE_LEAD before the workload ends: once every workload is done the runner ends the run as
  soon as the running members' views agree, and a member that is leaving still runs with the old view, so the run
  ends before the leave is over and views_converge fails (orchestration/schedule.py's views_agree; reported, not
  worked around there, as that file is not explore's);
- where failure detection is slower than the views' bound (Context.crashes_converge is False), a `leave` while a
  partition or split is in force, or starts within LEAVE_CUT_OFF after it: the leaver's VIEW is resent only for a
  while, so members cut off from it keep a view of a member that has gone until failure detection suspects it, and
  views_converge fails however right the stack is (as a kill would: kills are not drawn there either).
"""

from __future__ import annotations

from node.units import parse_duration
from orchestration.explore.case import scenario_of
from orchestration.explore.context import Context, context_of
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


def unfair(raw: TomlTable) -> str | None:
    """Why the scenario is not a fair test (None: it is)."""
    faults = faults_of(raw)
    if not any(f.get("kind") == "leave" for f in faults):
        return None
    try:
        ctx = context_of(scenario_of(raw))
    except ScenarioError:
        return None  # the run will say so
    bad = unfair_leaves(faults, ctx)
    if not bad:
        return None
    f = faults[bad[0]]
    return f"an unfair leave of {f.get('member')} at {f.get('at')} (the workload ends at {ctx.sends_until:g}s)"

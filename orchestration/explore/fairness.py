"""Schedules the generator does not draw, and the shrinker does not make, because they fail for a reason that is not
the stack's:

- a `leave` less than LEAVE_LEAD before the workload ends: once every workload is done the runner ends the run as
  soon as the running members' views agree, and a member that is leaving still runs with the old view, so the run
  ends before the leave is over and views_converge fails (orchestration/schedule.py's views_agree; reported, not
  worked around there, as that file is not explore's).
"""

from __future__ import annotations

import copy
from typing import Any

from node.units import parse_duration
from orchestration.explore.context import workload_span
from orchestration.scenario import ScenarioError, parse

LEAVE_LEAD = 1.0  # seconds a leave comes before the end of the workload at the latest


def unfair(raw: dict[str, Any]) -> str | None:
    """Why the scenario is not a fair test (None: it is)."""
    leaves = [parse_duration(f.get("at", "0s")) for f in raw.get("faults", []) if f.get("kind") == "leave"]
    if not leaves:
        return None
    try:
        _, end = workload_span(parse(copy.deepcopy(raw)))
    except ScenarioError:
        return None  # the run will say so
    late = [t for t in leaves if t > end - LEAVE_LEAD]
    if late:
        return f"a leave at {late[0]:g}s, less than {LEAVE_LEAD:g}s before the workload's end at {end:g}s"
    return None

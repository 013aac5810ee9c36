"""How close a passing run came to failing a bounded check: its **pressure**, the worst value the checker measured
over the check's bound (1.0 and above: the check failed), read from the plain-Python checker's result with nothing
from the system's code.

- delivered_within: the longest time from the later of a message's send and the last heal before its delivery to the
  delivery (the checker's `recovery_max`) over the bound;
- control_per_heal: the most events of a bounded kind one member wrote in one recovery interval over that kind's
  bound.

The guided search (guide.py) keeps a schedule that pushed a bound harder than any before it, and mutates such near
misses: a bug whose symptom is a late delivery or a storm of control messages shows first as a passing run that came
close (a partition healed just early enough for the last message to make it in time), and a small change of that
schedule (a shorter cut, a fault moved) tips it over.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the checker is imported where a run is checked (real_case.py), not with the search
    from analysis.config import CheckConfig
    from analysis.reference import RefResult


def pressure_of(res: RefResult) -> float:
    """The run's highest ratio of a measured value to its check's bound (0.0 when no check has a bound)."""
    if res.info is None:
        return 0.0
    return bounded_pressure(res.info.checks, res.recovery_max, res.control)


def bounded_pressure(checks: CheckConfig, recovery_max_ns: int, control: dict[tuple[str, str], list[int]]) -> float:
    worst = 0.0
    if checks.delivery_bound and recovery_max_ns >= 0:
        worst = recovery_max_ns / 1e9 / checks.delivery_bound
    bounds = dict(checks.control_bounds)
    for (_, kind), per_interval in control.items():
        bound = bounds.get(kind)
        if bound and per_interval:
            worst = max(worst, max(per_interval) / bound)
    return worst

"""orchestration/explore/pressure.py: a run's pressure is its worst measured value over its check's bound."""

from __future__ import annotations

from analysis.config import CheckConfig
from orchestration.explore.pressure import bounded_pressure


def test_the_worst_ratio_of_any_bounded_check_counts() -> None:
    both = CheckConfig(delivery_bound=2.0, control_bounds=(("xmit", 4),))
    assert bounded_pressure(both, int(1.5e9), {}) == 0.75
    assert bounded_pressure(both, int(0.5e9), {("B", "xmit"): [1, 3], ("A", "xmit"): [2]}) == 0.75
    assert bounded_pressure(both, int(3e9), {("B", "xmit"): [1]}) == 1.5  # failed: at or above 1


def test_no_bound_no_pressure() -> None:
    none = CheckConfig()
    assert bounded_pressure(none, int(9e9), {("B", "xmit"): [40]}) == 0.0  # no delivered_within, no xmit bound
    zero = CheckConfig(control_bounds=(("suspect", 0),))
    assert bounded_pressure(zero, -1, {("B", "suspect"): [0, 0]}) == 0.0  # a zero bound has no share to climb
    assert bounded_pressure(CheckConfig(delivery_bound=2.0), -1, {}) == 0.0  # nothing was timed


def test_a_workers_result_carries_its_pressure() -> None:
    from orchestration.explore.case import CaseResult

    res = CaseResult(("delivered_within",), events=10, pressure=1.2345678)
    assert CaseResult.from_json(res.as_json()).pressure == 1.2346
    old = {k: v for k, v in res.as_json().items() if k != "pressure"}  # a result written before there was one
    assert CaseResult.from_json(old).pressure == 0.0

"""node/units.py: every duration form accepted and refused, the error's `where`, and the callers' one-line adapters."""

from __future__ import annotations

import math

import click
import pytest

from node.units import DurationError, parse_duration


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (3, 3.0),
        (0, 0.0),
        (2.5, 2.5),
        ("2", 2.0),
        ("0.25", 0.25),
        (".5", 0.5),
        ("5.", 5.0),
        ("+1s", 1.0),
        ("1e3ms", 1.0),
        ("1E-3s", 1e-3),
        ("10s", 10.0),
        ("200ms", 0.2),
        ("250 ms", 0.25),
        ("  3s  ", 3.0),
        ("100ns", 1e-7),
        ("5us", 5e-6),
        ("5µs", 5e-6),  # MICRO SIGN
        ("5μs", 5e-6),  # GREEK SMALL LETTER MU
        ("1.5m", 90.0),
        ("2min", 120.0),
        ("1h", 3600.0),
        ("500MS", 0.5),
        ("2S", 2.0),
        ("1Min", 60.0),
        ("0s", 0.0),
        ("-0s", 0.0),
        (-1, -1.0),  # negative: a protocol property's "off" (see test_non_negative)
        ("-200ms", -0.2),
        ("-1e1s", -10.0),
    ],
)
def test_accepted(value: object, seconds: float) -> None:
    assert parse_duration(value) == pytest.approx(seconds, rel=1e-12, abs=0)


@pytest.mark.parametrize(
    "value",
    ["", "   ", "s", "ms", "ten seconds", "soon", "5 parsecs", "5sec", "5 s s", "1_000ms", "1,5s", "0x10s",
     "inf", "nan", "infs", "5ms2", True, False, None, [1], {"s": 1}, b"5s"],
)  # fmt: skip
def test_not_a_duration(value: object) -> None:
    with pytest.raises(DurationError, match=r"^not a duration: .* \(use a number of seconds or e\.g\. '500ms'"):
        parse_duration(value)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, "1e400s", "-1e400ms"])
def test_not_finite(value: object) -> None:
    with pytest.raises(DurationError, match=r"^must be a finite duration, not "):
        parse_duration(value)


@pytest.mark.parametrize("value", [-1, -0.5, "-1s", "-200ms", "-1e-9s", math.inf, -math.inf, math.nan, "1e400s"])
def test_non_negative(value: object) -> None:
    with pytest.raises(DurationError, match=r"^must be a finite, non-negative duration, not "):
        parse_duration(value, non_negative=True)
    assert parse_duration("0s", non_negative=True) == 0.0 and parse_duration("-0", non_negative=True) == 0.0


def test_the_error_is_a_value_error_and_names_where() -> None:
    assert issubclass(DurationError, ValueError)
    with pytest.raises(DurationError, match=r"^faults\[0\]\.at: not a duration: 'soon'"):
        parse_duration("soon", "faults[0].at")
    with pytest.raises(DurationError, match=r"^timeout: must be a finite, non-negative duration, not '-1s'$"):
        parse_duration("-1s", "timeout", non_negative=True)


def test_a_callers_error_type_with_the_same_message() -> None:
    with pytest.raises(click.BadParameter, match=r"^not a duration: 'x'"):
        parse_duration("x", error=click.BadParameter)

    class Keyed(ValueError):
        def __init__(self, key: str, reason: str) -> None:
            super().__init__(f"{key}: {reason}")
            self.reason = reason

    with pytest.raises(Keyed) as info:
        parse_duration(-2, non_negative=True, error=lambda reason: Keyed("start", reason))
    assert info.value.reason == "must be a finite, non-negative duration, not -2"


def test_every_adapter_uses_the_one_parser() -> None:
    """Each caller's errors: its own type, the same message (with its `where`)."""
    from analysis.config import InputError
    from analysis.config import parse_duration as analysis_duration
    from chaos.faults import ChaosError
    from chaos.nemesis import NemesisError, schedule
    from chaos.normalize import normalize
    from orchestration.cli.options import duration_arg as _duration
    from orchestration.scenario import ScenarioError
    from orchestration.scenario import _duration as scenario_duration

    assert analysis_duration("1.5m", "checks.views_converge") == 90.0
    with pytest.raises(InputError, match=r"^checks\.views_converge: not a duration: '2 parsecs'"):
        analysis_duration("2 parsecs", "checks.views_converge")
    assert _duration("2min") == 120.0
    with pytest.raises(click.BadParameter, match="not a duration"):
        _duration("soon")
    with pytest.raises(click.BadParameter, match="non-negative"):
        _duration("-5ms")
    assert scenario_duration("5µs", "timeout") == pytest.approx(5e-6)
    with pytest.raises(ScenarioError, match=r"^timeout: must be a finite, non-negative duration"):
        scenario_duration("-1s", "timeout")
    assert normalize("delay", {"from": "A", "to": "B", "delay": "30ms"}, ["A", "B"]).delay == pytest.approx(0.03)
    with pytest.raises(ChaosError, match=r"^delay: delay: must be a finite, non-negative duration"):
        normalize("delay", {"from": "A", "to": "B", "delay": -0.03}, ["A", "B"])
    with pytest.raises(ChaosError, match=r"^delay: jitter: not a duration"):
        normalize("delay", {"from": "A", "to": "B", "delay": "30ms", "jitter": "lots"}, ["A", "B"])
    with pytest.raises(NemesisError, match=r"^interval: not a duration") as info:
        schedule("bridge", ["A", "B", "C"], seed=1, start=0, interval="often", duration=1, rounds=1)
    assert info.value.key == "interval"

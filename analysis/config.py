"""Which checks are on: the `[checks]` table of a run's scenario.toml (all on when absent), durations."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from node import units

# The verdict's order: docs/scenario-format.md's checks, the runner's timeout, then the bounds (off unless a scenario
# sets them).
CHECKS = (
    "fifo",
    "exactly_once",
    "complete",
    "no_phantoms",
    "views_converge",
    "timeout",
    "delivered_within",
    "control_per_heal",
)
CORE_CHECKS = CHECKS[:5]  # always configured (on or off): a column each in the verdict tables
BOUND_CHECKS = ("delivered_within", "control_per_heal")  # a column only where some run configures them
DEFAULT_VIEWS_BOUND = 10.0  # seconds, when views_converge = true or the scenario does not say
DEFAULT_DELIVERY_BOUND = 10.0  # seconds, when delivered_within = true


class InputError(Exception):
    """Unreadable input (exit code 2); the message says what and where."""


def parse_duration(value: object, where: str | None = None) -> float:
    """node/units.py's durations, its errors as InputError."""
    return units.parse_duration(value, where, non_negative=True, error=InputError)


@dataclass(frozen=True)
class CheckConfig:
    """The checks to run. `views_bound` is in seconds; None switches views_converge off. `delivery_bound`
    (seconds; None = off) is delivered_within; `control_bounds` ((event kind, bound per recovery interval), sorted;
    empty = off) is control_per_heal."""

    fifo: bool = True
    exactly_once: bool = True
    complete: bool = True
    no_phantoms: bool = True
    views_bound: float | None = DEFAULT_VIEWS_BOUND
    delivery_bound: float | None = None
    control_bounds: tuple[tuple[str, int], ...] = ()

    def enabled(self, check: str) -> bool:
        if check == "views_converge":
            return self.views_bound is not None
        if check == "delivered_within":
            return self.delivery_bound is not None
        if check == "control_per_heal":
            return bool(self.control_bounds)
        return bool(getattr(self, check, True))

    @property
    def control_kinds(self) -> tuple[str, ...]:
        """The history event kinds control_per_heal counts."""
        return tuple(k for k, _ in self.control_bounds)

    def as_dict(self) -> dict[str, bool | float | dict[str, int]]:
        """The checks as configured (stats.checks); the bounds only when a scenario sets them."""
        out: dict[str, bool | float | dict[str, int]] = {
            "fifo": self.fifo,
            "exactly_once": self.exactly_once,
            "complete": self.complete,
            "no_phantoms": self.no_phantoms,
            "views_converge": self.views_bound if self.views_bound is not None else False,
        }
        if self.delivery_bound is not None:
            out["delivered_within"] = self.delivery_bound
        if self.control_bounds:
            out["control_per_heal"] = dict(self.control_bounds)
        return out


def bound_ns(seconds: float) -> int:
    """A bound in seconds as integer nanoseconds (the histories' unit), rounded, so both checkers compare alike."""
    return round(seconds * 1e9)


def read_checks(scenario: Path, bound_views: float | None = None) -> CheckConfig:
    """The `[checks]` of `scenario` (all on if the file or the table is absent); `bound_views` overrides the bound."""
    conf = CheckConfig()
    if scenario.is_file():
        try:
            doc = tomllib.loads(scenario.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"{scenario}: not a valid TOML file: {exc}") from exc
        table = doc.get("checks", {})
        if not isinstance(table, dict):
            raise InputError(f"{scenario}: [checks] must be a table")
        flags = {}
        for key in ("fifo", "exactly_once", "complete", "no_phantoms"):
            if key in table:
                if not isinstance(table[key], bool):
                    raise InputError(f"{scenario}: checks.{key} must be true or false")
                flags[key] = table[key]
        conf = replace(conf, **flags)
        if "views_converge" in table:
            value = table["views_converge"]
            if value is False:
                conf = replace(conf, views_bound=None)
            elif value is not True:
                conf = replace(conf, views_bound=parse_duration(value, f"{scenario}: checks.views_converge"))
        if "delivered_within" in table:
            value = table["delivered_within"]
            if value is True:
                conf = replace(conf, delivery_bound=DEFAULT_DELIVERY_BOUND)
            elif value is not False:
                conf = replace(conf, delivery_bound=parse_duration(value, f"{scenario}: checks.delivered_within"))
        if "control_per_heal" in table and table["control_per_heal"] is not False:
            conf = replace(conf, control_bounds=_control_bounds(table["control_per_heal"], scenario))
    if bound_views is not None:
        conf = replace(conf, views_bound=bound_views)
    return conf


def _control_bounds(value: object, scenario: Path) -> tuple[tuple[str, int], ...]:
    """`control_per_heal = { sync = 10, xmit = 500 }`: event kind -> the most events a member may write per recovery
    interval (an integer >= 0)."""
    where = f"{scenario}: checks.control_per_heal"
    if not isinstance(value, dict) or not value:
        raise InputError(f"{where} must be a table of history event kinds and bounds, e.g. {{ sync = 10 }}")
    for kind, bound in value.items():
        if not isinstance(bound, int) or isinstance(bound, bool) or bound < 0:
            raise InputError(f"{where}.{kind} must be an integer >= 0, not {bound!r}")
    return tuple(sorted(value.items()))

"""Which checks are on: the `[checks]` table of a run's scenario.toml (all on when absent), durations."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

CHECKS = ("fifo", "exactly_once", "complete", "no_phantoms", "views_converge", "timeout")
DEFAULT_VIEWS_BOUND = 10.0  # seconds, when views_converge = true or the scenario does not say
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zµ]*)\s*$")


class InputError(Exception):
    """Unreadable input (exit code 2); the message says what and where."""


def parse_duration(value: object, where: str = "duration") -> float:
    """Seconds from "10s", "200ms", "1.5m", "5us" or a bare number of seconds."""
    if isinstance(value, bool):
        raise InputError(f"{where}: expected a duration, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    m = _DURATION.match(str(value))
    if not m or m.group(2) not in _UNITS | {"": 1.0}:
        raise InputError(f"{where}: not a duration: {value!r} (use e.g. '10s' or '200ms')")
    return float(m.group(1)) * (_UNITS[m.group(2)] if m.group(2) else 1.0)


@dataclass(frozen=True)
class CheckConfig:
    """The checks to run. `views_bound` is in seconds; None switches views_converge off."""

    fifo: bool = True
    exactly_once: bool = True
    complete: bool = True
    no_phantoms: bool = True
    views_bound: float | None = DEFAULT_VIEWS_BOUND

    def enabled(self, check: str) -> bool:
        if check == "views_converge":
            return self.views_bound is not None
        return bool(getattr(self, check, True))

    def as_dict(self) -> dict[str, bool | float]:
        return {
            "fifo": self.fifo,
            "exactly_once": self.exactly_once,
            "complete": self.complete,
            "no_phantoms": self.no_phantoms,
            "views_converge": self.views_bound if self.views_bound is not None else False,
        }


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
    if bound_views is not None:
        conf = replace(conf, views_bound=bound_views)
    return conf

"""Units of user-given values: the one duration parser of node/, chaos/, orchestration/ and analysis/ (scenario files,
CLI options, protocol properties, [checks] bounds, faults.jsonl). Standard library only, like all of node/.

A duration is a number of seconds (int or float), or a string: a decimal number (optional sign, fraction and exponent)
then, after optional spaces, a unit in any letter case: ns, us / µs, ms, s, m / min, h; no unit = seconds. The result
is a finite number of seconds; negative only where the caller allows it (a protocol property may use a negative
interval to switch something off; a scenario's instants and a fault's delay may not).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import SupportsFloat, SupportsInt, cast

SECONDS_PER_UNIT = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,  # MICRO SIGN
    "μs": 1e-6,  # GREEK SMALL LETTER MU
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
}
_DURATION = re.compile(r"([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[-+]?[0-9]+)?)\s*([a-zµμ]*)")
HINT = "use a number of seconds or e.g. '500ms', '2s', '1.5m'"


class DurationError(ValueError):
    """A value that is not a duration; the message starts with `where` (the field it came from) when given."""


def parse_duration(
    value: object,
    where: str | None = None,
    *,
    non_negative: bool = False,
    error: Callable[[str], Exception] = DurationError,
) -> float:
    """Seconds from a duration (see the module docstring). A value that is none (a non-finite one included, or a
    negative one if `non_negative`) raises `error(message)`: DurationError by default, or the caller's own error type
    (e.g. click's BadParameter, a ScenarioError), so an adapter is one line. `where` prefixes the message."""
    prefix = f"{where}: " if where else ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        m = _DURATION.fullmatch(value.strip().lower()) if isinstance(value, str) else None
        if m is None or m.group(2) not in SECONDS_PER_UNIT | {"": 1.0}:
            raise error(f"{prefix}not a duration: {value!r} ({HINT})")
        seconds = float(m.group(1)) * SECONDS_PER_UNIT.get(m.group(2), 1.0)
    if non_negative and not (math.isfinite(seconds) and seconds >= 0):
        raise error(f"{prefix}must be a finite, non-negative duration, not {value!r}")
    if not math.isfinite(seconds):
        raise error(f"{prefix}must be a finite duration, not {value!r}")
    return seconds


# int() and float() take any object at run time and refuse what they cannot convert with a TypeError or ValueError,
# which callers report; typeshed's signatures list only what they accept, hence the casts (no conversion happens).
def int_of(value: object) -> int:
    """int() of a user-given value (a JSON or TOML number, a string): raises TypeError or ValueError as int() does."""
    return int(cast(SupportsInt, value))


def float_of(value: object) -> float:
    """float() of a user-given value: raises TypeError or ValueError as float() does."""
    return float(cast(SupportsFloat, value))

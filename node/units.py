"""Units of user-given values (durations), shared by node/, chaos/, orchestration/ and analysis/. Standard
library only, like all of node/."""

from __future__ import annotations

from typing import Any


def parse_duration(value: Any) -> float:
    """Seconds from a number (seconds) or a string like "500ms", "2s", "1.5m", "100us"."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        s = value.strip().lower()
        for suffix, factor in (("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
            if s.endswith(suffix):
                try:
                    return float(s[: -len(suffix)]) * factor
                except ValueError:
                    break
        try:
            return float(s)
        except ValueError:
            pass
    raise ValueError(f"not a duration: {value!r} (use a number of seconds or e.g. '500ms', '2s')")

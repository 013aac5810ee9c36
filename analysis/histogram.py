"""Latency histograms: log-scale bins (about 2 % wide), filled per sender group by streams.py and merged by the
driver, and the approximate percentiles of merged histograms (stats.latency_ms.per_kind, the report's plot)."""

from __future__ import annotations

from collections import Counter

import numpy as np

HIST_PER_OCTAVE = 32  # latency histogram resolution (about 2 % per bin)


def hist_bin(latency_ns: np.ndarray) -> np.ndarray:
    """Log-scale bin of each latency; -1 for latencies <= 0 (a clock or history problem)."""
    out = np.full(latency_ns.shape, -1, dtype=np.int64)
    pos = latency_ns > 0
    out[pos] = np.floor(np.log2(latency_ns[pos].astype(np.float64)) * HIST_PER_OCTAVE).astype(np.int64)
    return out


def bin_value(b: int) -> float:
    """The geometric middle of a histogram bin, in ns."""
    return float(2 ** ((b + 0.5) / HIST_PER_OCTAVE)) if b >= 0 else 0.0


def percentiles_from_hist(counts: Counter[int], qs: tuple[float, ...] = (50, 90, 99)) -> dict[str, float]:
    """Approximate percentiles (about 1 % error) of merged latency histograms, in ns, with the `count`."""
    if not counts:
        return {}
    bins = sorted(counts)
    cum = np.cumsum([counts[b] for b in bins])
    total = int(cum[-1])
    out: dict[str, float] = {"count": total}
    for q in qs:
        i = int(np.searchsorted(cum, q / 100 * total, side="left"))
        out[f"p{q:g}"] = bin_value(bins[min(i, len(bins) - 1)])
    out["max"] = bin_value(bins[-1])
    return out

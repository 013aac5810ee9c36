"""A run's results from the Spark job: the rows of streams.check_sender (OUT_SCHEMA) folded into one RunResult per run,
with the run-level checks added."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from analysis.membership import RunInfo
from analysis.run_checks import control_per_heal, views_converge
from analysis.streams import PROGRESS_BUCKETS
from analysis.verdict import Violation


@dataclass
class RunResult:
    """Everything a verdict and a report need about one run."""

    info: RunInfo
    violations: list[Violation] = field(default_factory=list)
    counters: Counter[str] = field(default_factory=Counter)
    # (sender, receiver, kind) -> count, mean, p50, p90, p99, max (ns)
    latency: dict[tuple[str, str, str], dict[str, float]] = field(default_factory=dict)
    hist: dict[str, Counter[int]] = field(default_factory=dict)  # kind -> bin -> count
    progress: dict[str, np.ndarray] = field(default_factory=dict)  # receiver -> deliveries per bucket
    notes: list[str] = field(default_factory=list)
    recovery_max: int = -1  # delivered_within: the longest time from the later of send and heal to delivery (ns)
    control: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # (member, kind) -> count per interval


def collect(rows: pa.Table, infos: dict[str, RunInfo]) -> dict[str, RunResult]:
    """Folds the rows of stream_results (as Arrow) into one RunResult per run, and adds views_converge."""
    results = {run: RunResult(info) for run, info in infos.items()}
    hist: dict[str, dict[str, Counter[int]]] = defaultdict(lambda: defaultdict(Counter))
    for r in rows.to_pylist():
        res = results[r["run"]]
        kind = r["rtype"]
        if kind == "violation":
            res.violations.append(
                Violation(
                    r["check"],
                    r["sender"],
                    r["receiver"],
                    r["conn_id"],
                    r["seqno"],
                    r["msg_id"],
                    r["detail"],
                    r["run"],
                    r["kind"],
                    r["t"],
                )
            )
        elif kind == "stats":
            res.counters.update(json.loads(r["payload"]))
        elif kind == "latency":
            res.latency[(r["sender"], r["receiver"], r["kind"])] = json.loads(r["payload"])
        elif kind == "hist":
            hist[r["run"]][r["kind"]][r["a"]] += r["b"]
        elif kind == "progress":
            arr = res.progress.setdefault(r["receiver"], np.zeros(PROGRESS_BUCKETS, np.int64))
            arr[r["a"]] += r["b"]
        elif kind == "recovery":
            res.recovery_max = max(res.recovery_max, r["a"])
        elif kind == "control":
            counts = res.control.setdefault((r["sender"], r["kind"]), [0] * (len(res.info.heals()) + 1))
            counts[r["a"]] += r["b"]
    for run, res in results.items():
        res.hist = dict(hist.get(run, {}))
        vs, note = views_converge(res.info)
        res.violations.extend(vs)
        if note:
            res.notes.append(note)
        res.violations.extend(control_per_heal(res.info, res.control))
    return results

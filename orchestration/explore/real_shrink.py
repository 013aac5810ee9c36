"""Shrinking on real members, where a run is not a replay: a candidate (steps.py, in its order; fairness.py's
unfair ones left out without running) is run up to k times and kept as soon as one run fails with the same violated
checks; it is rejected when none of its k runs does. k is adaptive: from the rate the scenario failed at so far
(failing runs / runs of the schedule as found and of every step kept), k = ceil(CONFIDENT / rate), at least 1 and at
most `max_k`, so a step of a failure that shows in 1 run of 3 gets enough runs to show it again. `max_runs` bounds
all runs of the shrink (the CLI's --shrink-runs). Each step taken is recorded with its rate, e.g.
`remove fault 2 (kill B at 1.1s) [1/3]`.

The pool runs the candidates of a chunk side by side (one fresh cluster each), round after round: round r runs
every candidate of the chunk that has not failed yet and had fewer than k runs; after each round the first
candidate (in order) that failed is taken.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestration.explore.case import CaseResult
from orchestration.explore.fairness import unfair
from orchestration.explore.shrink import Shrunk
from orchestration.explore.steps import Step, candidates
from orchestration.explore.tables import TomlTable

CONFIDENT = 2.0  # expected failing runs a candidate gets before it is rejected: k = ceil(CONFIDENT / rate)
MAX_K = 5  # default bound of k
REAL_MAX_RUNS = 60  # default --shrink-runs on real members (a run costs seconds)


@dataclass
class RateShrunk(Shrunk):
    """A shrink on real members: the rate of each step taken (failing runs, runs), as found first."""

    rates: list[tuple[int, int]] = field(default_factory=list)
    path: list[TomlTable] = field(default_factory=list)  # the scenario before each step taken (path[0]: as found)
    failed_runs: int = 1  # runs that failed with the checks: of the schedule as found and of each step kept
    all_runs: int = 1

    @property
    def rate(self) -> float:
        return self.failed_runs / self.all_runs

    def k(self, max_k: int) -> int:
        return max(1, min(max_k, math.ceil(CONFIDENT / self.rate)))


def shrink_real(
    raw: TomlTable,
    violated: tuple[str, ...],
    evaluate: Callable[[list[TomlTable]], list[CaseResult]],
    *,
    batch: int = 1,
    max_runs: int = REAL_MAX_RUNS,
    max_k: int = MAX_K,
    on_step: Callable[[Shrunk], None] | None = None,
    found_rate: tuple[int, int] = (1, 1),
) -> RateShrunk:
    """Shrinks `raw` (which failed with `violated` in found_rate[0] of found_rate[1] runs); on KeyboardInterrupt
    returns what it has (complete = False)."""
    state = RateShrunk(raw, violated, failed_runs=found_rate[0], all_runs=found_rate[1])
    try:
        while _one_step(state, evaluate, max(1, batch), max_runs, max_k):
            if on_step is not None:
                on_step(state)
    except KeyboardInterrupt:
        state.complete = False
    return state


def _one_step(
    state: RateShrunk,
    evaluate: Callable[[list[TomlTable]], list[CaseResult]],
    batch: int,
    max_runs: int,
    max_k: int,
) -> bool:
    pending: list[Step] = []
    for c in candidates(state.raw):
        if unfair(c.raw) is None:
            pending.append(c)
        else:
            state.rejected += 1
    k = state.k(max_k)
    while pending:
        if state.runs >= max_runs:
            state.complete = False
            return False
        chunk, pending = pending[:batch], pending[batch:]
        taken = _rounds(state, chunk, evaluate, k, max_runs)
        if taken is not None:
            step, tries = taken
            state.path.append(state.raw)
            state.raw = step.raw
            state.failed_runs += 1
            state.all_runs += tries
            state.rates.append((1, tries))
            state.trail.append(f"{step.what} [1/{tries}]")
            return True
    return False


def _rounds(
    state: RateShrunk,
    chunk: list[Step],
    evaluate: Callable[[list[TomlTable]], list[CaseResult]],
    k: int,
    max_runs: int,
) -> tuple[Step, int] | None:
    """Runs the chunk's candidates round by round (at most k each): the first that fails the same way, with the
    runs it took; None when every one had its k runs (or the budget ended) without it."""
    tries = [0] * len(chunk)
    for _ in range(k):
        live = [i for i in range(len(chunk)) if tries[i] < k][: max(0, max_runs - state.runs)]
        if not live:
            break
        results = evaluate([chunk[i].raw for i in live])
        state.runs += len(live)
        hit = None
        for i, res in zip(live, results, strict=True):
            tries[i] += 1
            if hit is None and res.error is None and res.violated == state.violated:
                hit = i
        if hit is not None:
            return chunk[hit], tries[hit]
    state.rejected += len(chunk)
    return None

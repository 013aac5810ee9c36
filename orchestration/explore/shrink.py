"""Shrinking: a failing scenario made smaller while it still fails with the same violated checks.

Greedy and deterministic: the candidates of steps.py are tried in their order; the first one that fails with
exactly the same violated checks (the same sorted set of names, no error) is taken and the candidates are drawn
again from it; a candidate that passes, fails differently or cannot run is rejected. It ends when no candidate is
taken, or after `max_runs` runs. The pool runs candidates `batch` at a time, but runs count as if tried one by
one (up to and including the one taken), so the result does not depend on the number of workers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestration.explore.case import CaseResult
from orchestration.explore.steps import candidates

MAX_RUNS = 300


@dataclass
class Shrunk:
    raw: dict[str, Any]
    violated: tuple[str, ...]
    trail: list[str] = field(default_factory=list)  # each step taken, in order
    runs: int = 0  # candidates run
    rejected: int = 0  # candidates that did not fail the same way
    complete: bool = True  # False: stopped by max_runs or an interrupt before no step was left


def shrink(
    raw: dict[str, Any],
    violated: tuple[str, ...],
    evaluate: Callable[[list[dict[str, Any]]], list[CaseResult]],
    *,
    batch: int = 1,
    max_runs: int = MAX_RUNS,
    on_step: Callable[[Shrunk], None] | None = None,
) -> Shrunk:
    """Shrinks `raw` (which fails with `violated`); `evaluate` runs scenarios and returns their results in order.
    On KeyboardInterrupt, returns what it has (complete = False)."""
    state = Shrunk(raw, violated)
    try:
        while _one_step(state, evaluate, max(1, batch), max_runs):
            if on_step is not None:
                on_step(state)
    except KeyboardInterrupt:
        state.complete = False
    return state


def _one_step(
    state: Shrunk, evaluate: Callable[[list[dict[str, Any]]], list[CaseResult]], batch: int, max_runs: int
) -> bool:
    """Tries the candidates of the current scenario; True when one was taken."""
    pending = list(candidates(state.raw))
    while pending:
        if state.runs >= max_runs:
            state.complete = False
            return False
        chunk, pending = pending[: min(batch, max_runs - state.runs)], pending[min(batch, max_runs - state.runs) :]
        results = evaluate([c.raw for c in chunk])
        for step, res in zip(chunk, results, strict=True):
            state.runs += 1
            if res.error is None and res.violated == state.violated:
                state.raw = step.raw
                state.trail.append(step.what)
                return True
            state.rejected += 1
    return False

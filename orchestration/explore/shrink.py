"""Shrinking: a failing scenario made smaller while it still fails with the same violated checks.

Greedy and deterministic: the candidates of steps.py are tried in their order; the first one that fails with
exactly the same violated checks (the same sorted set of names, no error) is taken and the candidates are drawn
again from it; a candidate that passes, fails differently or cannot run is rejected, and so is one the generator
would not draw (fairness.py: it is left out without running). It ends when no candidate is taken, or after
`max_runs` runs. The pool runs candidates `batch` at a time, but runs count as if tried one by one (up to and
including the one taken), so the result does not depend on the number of workers.

A differential shrink (`Judge` with a `control`) keeps a second condition as well: the candidate with the control
settings (a bug's fixed variant) must pass, so the minimal scenario still tells the variants apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from orchestration.explore.case import CaseResult
from orchestration.explore.fairness import unfair
from orchestration.explore.steps import candidates
from orchestration.explore.tables import TomlTable

MAX_RUNS = 300


@dataclass(frozen=True)
class Judge:
    """What a candidate must do to be taken: fail with `violated` (as it is, or as `subject` makes it: a bug's
    flawed variant), and, with a `control` (a function giving the candidate's control scenario), pass as the
    control."""

    violated: tuple[str, ...]
    subject: Callable[[TomlTable], TomlTable] | None = None
    control: Callable[[TomlTable], TomlTable] | None = None

    def runs(self, raw: TomlTable) -> list[TomlTable]:
        first = raw if self.subject is None else self.subject(raw)
        return [first] if self.control is None else [first, self.control(raw)]

    def accepts(self, results: list[CaseResult]) -> bool:
        first = results[0]
        if first.error is not None or first.violated != self.violated:
            return False
        return all(r.error is None and not r.violated for r in results[1:])


@dataclass
class Shrunk:
    raw: TomlTable
    violated: tuple[str, ...]
    trail: list[str] = field(default_factory=list)  # each step taken, in order
    runs: int = 0  # scenario runs
    rejected: int = 0  # candidates that did not fail the same way (or would not be drawn)
    complete: bool = True  # False: stopped by max_runs or an interrupt before no step was left


def shrink(
    raw: TomlTable,
    violated: tuple[str, ...] | Judge,
    evaluate: Callable[[list[TomlTable]], list[CaseResult]],
    *,
    batch: int = 1,
    max_runs: int = MAX_RUNS,
    on_step: Callable[[Shrunk], None] | None = None,
) -> Shrunk:
    """Shrinks `raw` (which fails with `violated`, or as the Judge says); `evaluate` runs scenarios and returns
    their results in order. On KeyboardInterrupt, returns what it has (complete = False)."""
    judge = violated if isinstance(violated, Judge) else Judge(violated)
    state = Shrunk(raw, judge.violated)
    try:
        while _one_step(state, judge, evaluate, max(1, batch), max_runs):
            if on_step is not None:
                on_step(state)
    except KeyboardInterrupt:
        state.complete = False
    return state


def _one_step(
    state: Shrunk, judge: Judge, evaluate: Callable[[list[TomlTable]], list[CaseResult]], batch: int, max_runs: int
) -> bool:
    """Tries the candidates of the current scenario; True when one was taken."""
    pending = []
    for c in candidates(state.raw):
        if unfair(c.raw) is None:
            pending.append(c)
        else:
            state.rejected += 1
    per = len(judge.runs(state.raw))
    while pending:
        room = (max_runs - state.runs) // per
        if room <= 0:
            state.complete = False
            return False
        chunk, pending = pending[: min(batch, room)], pending[min(batch, room) :]
        results = evaluate([r for c in chunk for r in judge.runs(c.raw)])
        for i, step in enumerate(chunk):
            state.runs += per
            if judge.accepts(results[i * per : (i + 1) * per]):
                state.raw = step.raw
                state.trail.append(step.what)
                return True
            state.rejected += 1
    return False

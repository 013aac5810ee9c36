"""The search: draw schedule after schedule, run each (in parallel on the pool), keep the failures.

Schedule i of a search with seed S has its own seed, `schedule_seed(S, i)`, which seeds both its generator
(`random.Random("chaosbed-explore/<seed>")`) and its scenario (the simulation's randomness): a failure is known by
that one number, and replays from it. Schedules are handed out in index order and a failure counts by its index,
so the same seed finds the same first failure whatever the number of workers: with --stop-at-first, the search
stops handing out schedules at the first failure and waits for those already out, and the failure with the lowest
index is the first one. A guided search (`guide`, guide.py) draws from the same seeds but mutates what earlier results
put in its corpus, so it is not replayed from its seed alone; its failures keep their faults (and minimal.toml).

The budget is a number of schedules (`schedules`: indices below it), a time (`budget`, seconds) or both (whichever
ends first); `first` starts at a later index (a search going on past a failure it has dealt with).
Ctrl-C (KeyboardInterrupt) ends the search; what was found is kept and the result says it was interrupted.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from orchestration.explore.case import CaseResult, with_faults
from orchestration.explore.coverage import Coverage
from orchestration.explore.generator import Generator
from orchestration.explore.guide import Guide
from orchestration.explore.pool import InlinePool, ProcessPool
from orchestration.explore.real_case import Keep
from orchestration.explore.tables import TomlTable


def schedule_seed(seed: int, index: int) -> int:
    """The seed of the index-th schedule (from 0) of a search with seed `seed`."""
    digest = hashlib.sha256(f"chaosbed-explore/{seed}/{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def schedule_folder(index: int, seed: int) -> str:
    """The folder a failing schedule's real run is kept in (under the explore folder's `schedules/`)."""
    return f"schedule-{index + 1}-seed{seed}"


def schedule_rng(schedule: int) -> random.Random:
    """The generator's random source for a schedule seed."""
    return random.Random(f"chaosbed-explore/{schedule}")


@dataclass(frozen=True)
class SearchSpec:
    seed: int = 0
    schedules: int | None = None  # at most this many schedules
    budget: float | None = None  # seconds of searching at most
    stop_at_first: bool = False
    want: tuple[str, ...] | None = None  # only failures violating exactly these checks count
    first: int = 0  # the index of the first schedule (a search that goes on past an earlier one's failure)

    def __post_init__(self) -> None:
        if self.schedules is None and self.budget is None:
            raise ValueError("a search needs a budget: a number of schedules, a time, or both")


@dataclass
class Found:
    """A failing schedule: its index and seed, its faults and scenario, what it violated, when it was found."""

    index: int
    seed: int
    faults: list[TomlTable]
    raw: TomlTable
    result: CaseResult
    elapsed: float  # seconds since the search started
    tried: int  # schedules finished by then, this one included
    origin: str = "random"  # a guided search: "random", or the mutation it came from ("shift of #3")


@dataclass
class Progress:
    tried: int = 0
    failures: int = 0
    errors: int = 0
    other: int = 0  # failures left aside: they did not violate the wanted checks
    elapsed: float = 0.0
    budget: float | None = None
    schedules: int | None = None
    last_error: str | None = None


@dataclass
class SearchResult:
    tried: int
    failures: list[Found] = field(default_factory=list)  # by index
    errors: int = 0
    other: int = 0
    interrupted: bool = False
    seconds: float = 0.0
    error_samples: list[str] = field(default_factory=list)
    guided: GuidedDoc | None = None  # a guided search's corpus, in numbers
    warm: dict[str, int] | None = None  # a search on warm clusters: schedules by how they ran (CaseResult.warm)


@dataclass
class _State:
    spec: SearchSpec
    t0: float
    progress: Progress
    result: SearchResult
    next_index: int = 0
    stopped: bool = False
    out: dict[int, tuple[int, list[TomlTable], TomlTable, str]] = field(default_factory=dict)
    keep_root: Path | None = None
    guide: Guide | None = None
    tap: bool = False
    warm: int = 0

    def may_hand_out(self) -> bool:
        s = self.spec
        if self.stopped or (s.schedules is not None and self.next_index >= s.schedules):
            return False
        return s.budget is None or time.monotonic() - self.t0 < s.budget


def search(
    base: TomlTable,
    generator: Generator,
    spec: SearchSpec,
    pool: InlinePool | ProcessPool,
    on_progress: Callable[[Progress], None] | None = None,
    keep_root: Path | None = None,
    guide: Guide | None = None,
    tap: bool = False,
    warm: int = 0,
) -> SearchResult:
    """Runs schedules until the budget ends (or the first failure); failures sorted by index. With `keep_root`
    (real members), a failing schedule's run folder is kept there (`schedule_folder`). `tap`: real runs with the
    wire tap; `guide`: schedules drawn from its corpus as well (guide.py), fed with what each one reached; `warm`
    > 0: on warm clusters started afresh every `warm` schedules (warm.py; not with the tap)."""
    st = _State(spec, time.monotonic(), Progress(budget=spec.budget, schedules=spec.schedules), SearchResult(0))
    st.keep_root = keep_root
    st.guide, st.tap = guide, tap or guide is not None
    st.warm = 0 if st.tap else warm
    if st.warm:
        st.result.warm = {}
    st.next_index = spec.first
    try:
        while True:
            while st.may_hand_out() and pool.pending() < pool.capacity:
                _hand_out(st, base, generator, pool)
            if not pool.pending():
                break
            index, res = pool.next_result()
            assert isinstance(index, int)
            _record(st, index, res)
            if on_progress is not None:
                on_progress(st.progress)
    except KeyboardInterrupt:
        st.result.interrupted = True
    st.result.failures.sort(key=lambda f: f.index)
    st.result.seconds = time.monotonic() - st.t0
    if guide is not None:
        st.result.guided = guided_doc(guide)
    return st.result


class GuidedDoc(TypedDict):
    """explore.json's `guided`: the corpus (schedules kept for reaching something new, by where they came from),
    the features reached, and the schedules drawn at random and by mutation."""

    corpus: int
    kept_from: dict[str, int]
    features: int
    drawn: dict[str, int]
    near_misses: int  # corpus entries kept for their pressure alone (guide.py)
    best_pressure: float  # the nearest miss: the highest share of a check's bound a passing schedule reached


def guided_doc(guide: Guide) -> GuidedDoc:
    return {
        "corpus": len(guide.corpus),
        "kept_from": dict(sorted(guide.origins.items())),
        "features": len(guide.seen),
        "drawn": dict(sorted(guide.drawn.items())),
        "near_misses": guide.near_misses,
        "best_pressure": round(guide.best, 3),
    }


def _hand_out(st: _State, base: TomlTable, generator: Generator, pool: InlinePool | ProcessPool) -> None:
    i = st.next_index
    st.next_index += 1
    seed = schedule_seed(st.spec.seed, i)
    rng = schedule_rng(seed)
    faults, origin = st.guide.next_faults(rng) if st.guide is not None else (generator.draw(rng), "random")
    raw = with_faults(base, faults, seed)
    st.out[i] = (seed, faults, raw, origin)
    if st.keep_root is None:
        pool.submit(i, raw, tap=st.tap, warm=st.warm)
    else:
        pool.submit(i, raw, Keep(str(st.keep_root / schedule_folder(i, seed))), tap=st.tap, warm=st.warm)


def _record(st: _State, index: int, res: CaseResult) -> None:
    seed, faults, raw, origin = st.out.pop(index)
    r, p = st.result, st.progress
    r.tried += 1
    if r.warm is not None:
        how = res.warm.split(":")[0] or "fresh"
        r.warm[how] = r.warm.get(how, 0) + 1
    if st.guide is not None and res.error is None:
        st.guide.record(faults, Coverage(frozenset(res.coverage), res.targets, tails=res.tails), origin, res.pressure)
    p.tried, p.elapsed = r.tried, time.monotonic() - st.t0
    if res.error is not None:
        r.errors += 1
        p.errors, p.last_error = r.errors, res.error
        if len(r.error_samples) < 5:
            r.error_samples.append(f"schedule seed {seed}: {res.error}")
    elif res.failed and (st.spec.want is None or res.violated == st.spec.want):
        r.failures.append(Found(index, seed, faults, raw, res, p.elapsed, r.tried, origin))
        p.failures = len(r.failures)
        if st.spec.stop_at_first:
            st.stopped = True
    elif res.failed:
        r.other += 1
        p.other = r.other

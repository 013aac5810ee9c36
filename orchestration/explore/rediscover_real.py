"""Rediscovering a catalogue bug on real members (bench_explore's real part): its scenario with the flawed setting
(or on the flawed release) and none of its faults, searched on netns clusters until a schedule violates exactly the
bug's checks, shrunk by rates (real_shrink.py), then confirmed on fresh clusters.

A run is not a replay, so each judgement is a sample:
- a schedule found is re-run once on the control (the fixed setting, or the fixing release) where the bug has one;
  if the control fails too, the schedule is another bug (or one no system survives, or one whose real timing the
  control does not get through: a long cut, its retransmissions dropped). The first `shrink_through` of those are
  shrunk all the same (each candidate judged with its control): one that takes a step is the bug, smaller; the others,
  and those after, are searched past;
- a shrink candidate counts as failing when its flawed run violates exactly the bug's checks and its control run (side
  by side) passes; the shrink keeps the flawed keys as the flawed variant has them (rediscover.variant_of);
- the minimal scenario is confirmed on `confirm_runs` fresh clusters (confirmed at >= 75%, confirm.py) and its control
  is run `control_runs` times: the bug is rediscovered when it is confirmed and every control run passes.

A bug without a fix (`no_fix`) has no control: the schedule and the candidates are judged on the flawed variant
alone."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from orchestration.explore.case import CaseResult, load_base, scenario_of
from orchestration.explore.confirm import ConfirmDoc
from orchestration.explore.foreign_context import context_for
from orchestration.explore.generator import Generator
from orchestration.explore.guide import Guide
from orchestration.explore.minimal import Provenance, write_minimal
from orchestration.explore.pool import InlinePool, ProcessPool
from orchestration.explore.real_session import confirm_real
from orchestration.explore.real_shrink import RateShrunk, shrink_real
from orchestration.explore.rediscover import variant_of
from orchestration.explore.reliable import Reliable, find_reliable, worth_trying
from orchestration.explore.search import Found, SearchSpec, search
from orchestration.explore.tables import TomlTable, faults_of
from orchestration.matrix.bugs import Entry
from orchestration.toml_text import toml_value

CONTROL_FAILED = "control-failed"  # a candidate whose control run did not pass: not the bug's failure


@dataclass(frozen=True)
class RealSpec:
    seed: int = 1
    budget: float = 900.0  # seconds of searching (the shrink and the confirmation come after)
    shrink_runs: int = 24  # candidates a shrink may judge (each is a flawed and, with a control, a control run)
    confirm_runs: int = 10
    control_runs: int = 3
    guide: str = "random"  # or "wire"
    shrink_through: int = 2  # found schedules whose control fails that are shrunk all the same, at most
    warm: int = 0  # search on warm clusters started afresh every `warm` schedules (0: a fresh cluster each)


@dataclass
class RealRediscovery:
    entry: Entry
    subject: str  # the variant searched: "flawed" or "real-flawed"
    control: str | None  # "fixed", "real-fixed", or None (no fix)
    tried: int = 0  # schedules run until the bug was found (or the budget ended)
    seconds: float = 0.0  # search time until then
    found: Found | None = None
    shared: int = 0  # schedules with the bug's checks that the control failed too (searched past)
    other: int = 0  # failing schedules that violated other checks than the bug's (left aside)
    shrunk: RateShrunk | None = None
    shrink_seconds: float = 0.0
    confirm: ConfirmDoc | None = None
    control_passed: int = 0  # the control runs of the form confirmed (the minimal one, else the reliable one)
    control_ran: int = 0
    reliable: Reliable | None = None  # the minimal scenario was flaky and this earlier form of it is confirmed
    interrupted: bool = False  # Ctrl-C (or SIGTERM) ended the search

    @property
    def faults_after(self) -> int | None:
        return None if self.shrunk is None else len(faults_of(self.shrunk.raw))

    @property
    def ok(self) -> bool:
        """Found, shrunk, confirmed at >= 75% (the minimal scenario, or an earlier form of it where that was flaky),
        and every control run passed."""
        confirmed = self.confirm is not None and bool(self.confirm.get("confirmed"))
        return (confirmed or self.reliable is not None) and self.control_passed == self.control_ran


def variant_pair(entry: Entry) -> tuple[str, str | None]:
    """The variant a real search runs (the model's flawed setting, else the flawed release) and its control."""
    bug = entry.bug
    if bug.model_variants:
        return "flawed", "fixed" if "fixed" in bug.model_variants else None
    return "real-flawed", "real-fixed"


def _sets(entry: Entry, variant: str) -> list[str]:
    return [f"{k}={toml_value(v)}" for k, v in entry.bug.settings(variant).items()]


class _Judged:
    """A shrink's evaluation: each candidate's flawed run and its control run side by side on the pool, reported as
    one result (the bug's checks when the flawed run has them and the control passes)."""

    def __init__(self, entry: Entry, pool: InlinePool | ProcessPool, want: tuple[str, ...]) -> None:
        self.entry, self.pool, self.want = entry, pool, want
        self.subject, self.control = variant_pair(entry)
        self.pair = (self.subject,) + ((self.control,) if self.control else ())
        self.cluster_runs = 0

    def variant(self, raw: TomlTable, variant: str) -> TomlTable:
        return variant_of(raw, self.entry, variant, self.pair)

    def control_passes(self, raw: TomlTable) -> bool:
        """The control variant of a schedule passes one run (True where the bug has no control)."""
        if self.control is None:
            return True
        res = self.pool.map([self.variant(raw, self.control)])[0]
        self.cluster_runs += 1
        return res.error is None and not res.failed

    def __call__(self, raws: list[TomlTable]) -> list[CaseResult]:
        runs = [self.variant(raw, v) for raw in raws for v in self.pair]
        results = self.pool.map(runs)
        self.cluster_runs += len(runs)
        width = len(self.pair)
        out = []
        for i in range(len(raws)):
            first, *control = results[i * width : (i + 1) * width]
            if first.error is None and first.violated == self.want and any(c.failed or c.error for c in control):
                out.append(CaseResult((CONTROL_FAILED,), None, first.events, first.seconds))
            else:
                out.append(first)
        return out


def rediscover_real(entry: Entry, pool: InlinePool | ProcessPool, spec: RealSpec, scratch: Path) -> RealRediscovery:
    """Searches for the bug on real members of the pool's backend, then shrinks and confirms what it finds."""
    subject, control = variant_pair(entry)
    base = load_base(entry.path, _sets(entry, subject))
    generator = Generator(context_for(scenario_of(base), real=True))
    want = tuple(sorted(entry.bug.must_violate(subject) or ()))
    judged = _Judged(entry, pool, want)
    out = RealRediscovery(entry, subject, control)
    t0, start = time.monotonic(), 0
    guide = Guide(generator) if spec.guide == "wire" else None
    while (left := spec.budget - (time.monotonic() - t0)) > 0:
        search_spec = SearchSpec(seed=spec.seed, budget=left, stop_at_first=True, want=want, first=start)
        result = search(base, generator, search_spec, pool, guide=guide, warm=spec.warm)
        out.tried += result.tried
        out.other += result.other
        out.seconds = time.monotonic() - t0
        if not result.failures or result.interrupted:
            out.interrupted = result.interrupted
            return out
        found = result.failures[0]
        start = found.index + 1
        t1 = time.monotonic()
        if judged.control_passes(found.raw):
            shrunk = _shrink(found, judged, pool, spec)
        elif out.shared < spec.shrink_through:
            # the control fails the schedule as found (real timing: a long cut, retransmissions dropped), but a
            # smaller form of it may pass there: shrink it with the judge, take it if a step was taken
            out.shared += 1
            shrunk = _shrink(found, judged, pool, spec)
            if not shrunk.trail:
                continue
        else:
            out.shared += 1
            continue
        out.found, out.shrunk, out.shrink_seconds = found, shrunk, time.monotonic() - t1
        if guide is None:
            out.tried = found.index + 1  # every schedule before it ran (the ones still out when it came are not)
        break
    if out.found is None:
        return out
    _confirm(out, judged, pool, spec, scratch)
    return out


def _shrink(found: Found, judged: _Judged, pool: InlinePool | ProcessPool, spec: RealSpec) -> RateShrunk:
    batch = max(1, pool.capacity // len(judged.pair))
    return shrink_real(found.raw, judged.want, judged, batch=batch, max_runs=spec.shrink_runs)


def _confirm(
    out: RealRediscovery, judged: _Judged, pool: InlinePool | ProcessPool, spec: RealSpec, scratch: Path
) -> None:
    assert out.found is not None and out.shrunk is not None
    folder = scratch / f"rediscover-{out.entry.path.stem}"
    folder.mkdir(parents=True, exist_ok=True)
    found = out.found
    prov = Provenance("bench_explore --backend netns", found.index, found.seed, found.result.violated,
                      tuple(found.faults))  # fmt: skip
    minimal = folder / "minimal.toml"
    subject = judged.variant(out.shrunk.raw, judged.subject)
    write_minimal(minimal, subject, prov, out.shrunk.trail, out.shrunk.runs, out.shrunk.complete, pool.backend)
    out.confirm = confirm_real(minimal, judged.want, pool.backend, spec.confirm_runs, pool)
    form = out.shrunk.raw
    if worth_trying(out.confirm, out.shrunk.path):
        shrunk = out.shrunk

        def write(file: Path, raw: TomlTable, trail: list[str]) -> str:
            variant = judged.variant(raw, judged.subject)
            return write_minimal(file, variant, prov, trail, shrunk.runs, shrunk.complete, pool.backend)

        def confirm(file: Path) -> ConfirmDoc:
            return confirm_real(file, judged.want, pool.backend, spec.confirm_runs, pool)

        taken, out.confirm["reliable"] = find_reliable(folder, shrunk.path, shrunk.trail, write, confirm)
        if taken is not None:
            form, out.reliable = taken.raw, taken
    if judged.control is not None:
        control = judged.variant(form, judged.control)
        results = pool.map([control] * spec.control_runs)
        out.control_ran = len(results)
        out.control_passed = sum(1 for r in results if r.error is None and not r.failed)

"""Warm clusters: one real cluster runs schedule after schedule, instead of a fresh cluster per schedule.

Between two schedules the cluster is healed (every fault removed), then must be quiet (nothing owed, nothing
retransmitting) with every member in one view of all of them, within READY_S. A schedule's part of the histories
is cut into a run folder of its own (segment.py) and checked like a fresh run's. The cluster is started afresh:
- when it is not ready in time, or a schedule left a member down, left, paused or restarted (a new incarnation
  the next schedule's checker would not know from its faults);
- when a schedule failed, or its segment shows state from an earlier one (a message delivered in it, sent before);
- every `every` schedules (default WARM_EVERY), so histories and protocol state stay small.

A failure found warm counts only once a fresh cluster confirms it: the schedule is run again as a fresh case
(real_case.py) and that result is what the search gets, marked `warm-confirmed` or `warm-unconfirmed` (the warm
failure did not show fresh: it counts as the fresh run's result). A schedule whose segment leaked is rerun fresh the
same way (`warm-leaked`). A system whose members are not driven by chaosbed (no control contract) runs fresh, and
so does a schedule with a discard aimed at a seqno or a first message (`fresh-seqno`: its numbers count from a
fresh cluster's first message). A schedule of another cluster than the warm one ends the warm cluster.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from analysis.config import InputError
from orchestration.cluster import Cluster, ClusterSpec
from orchestration.explore.case import CaseResult, scenario_of, sentences
from orchestration.explore.real_case import Keep, run_real_case
from orchestration.explore.segment import SegmentCutter
from orchestration.explore.tables import TomlTable
from orchestration.scenario import Scenario, ScenarioError

WARM_EVERY = 20  # schedules a warm cluster runs before it is started afresh
READY_S = 15.0  # seconds after a heal for the cluster to be quiet with one view of every member
START_S = 30.0


SEQNO_ARGS = re.compile(r"\b(seqno|first)\s*=")


def aims_at_seqnos(sc: Scenario) -> bool:
    """A discard that names a seqno or a first message: it counts from a fresh cluster's first message, and a warm
    cluster's links are further on (the rule would miss what the schedule aims at), so the schedule runs fresh."""
    return any(f.kind == "discard" and SEQNO_ARGS.search(str(f.args.get("match", ""))) for f in sc.faults)


def warm_spec(sc: Scenario, backend: str) -> ClusterSpec:
    """The cluster a scenario needs, whatever its seed (a warm cluster keeps the one it started with)."""
    from orchestration.systems.clusters import spec_of

    return spec_of(sc.system, sc.members, backend, stack=sc.stack, transport=sc.transport, properties=sc.properties)


@dataclass
class WarmStats:
    started: int = 0  # clusters started
    warm: int = 0  # schedules run on a warm cluster
    fresh: int = 0  # schedules run fresh (not warmable, a leak, a failure to confirm)
    leaked: int = 0
    unconfirmed: int = 0  # warm failures a fresh cluster did not show
    restarts: dict[str, int] = field(default_factory=dict)  # warm clusters ended, by why

    def ended(self, why: str) -> None:
        self.restarts[why] = self.restarts.get(why, 0) + 1


class WarmCluster:
    """A started cluster, its history cutter and how many schedules it ran."""

    def __init__(self, spec: ClusterSpec, workdir: Path) -> None:
        from orchestration.systems.clusters import forms_group, new_cluster

        self.spec = spec
        self.workdir = workdir
        self.cluster: Cluster = new_cluster(spec, workdir=workdir)
        try:
            self.cluster.start(timeout=START_S)  # a start that fails takes its cluster down itself
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        try:
            self.groups = forms_group(self.cluster)
            if self.groups:
                self.cluster.wait_for_view(timeout=START_S)
            self.incarnations = {n: m.incarnation for n, m in self.cluster.members.items()}
        except BaseException:
            self.close()
            raise
        self.cutter = SegmentCutter(workdir / "history")
        self.used = 0

    def close(self) -> None:
        from orchestration.runner import deferred_interrupts

        with deferred_interrupts():
            self.cluster.down()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def intact(self) -> bool:
        """Every member runs, unpaused, in the incarnation it started with."""
        c = self.cluster
        members = c.members
        return set(c.running()) == set(self.incarnations) and all(
            not members[n].paused and members[n].incarnation == inc for n, inc in self.incarnations.items()
        )

    def ready(self) -> bool:
        """Quiet, with one view of every member, within READY_S (False: start afresh)."""
        from orchestration.schedule import views_agree, wait_quiet

        c = self.cluster
        if not self.intact():
            return False
        deadline = c.clock.now_ns() + round(READY_S * 1e9)
        return wait_quiet(c, deadline, deadline if self.groups else None) and (not self.groups or views_agree(c))

    def _flush(self) -> None:
        """Every running member writes out the events it holds (a paused one cannot answer: it holds them)."""
        for name in self.cluster.running():
            if not self.cluster.members[name].paused:
                self.cluster.control(name, "flush")

    def run(self, sc: Scenario, out: Path) -> tuple[CaseResult, str | None]:
        """Runs one schedule into the run folder `out` and checks its segment; returns the result and why the
        cluster may not run the next one (None: it may)."""
        from analysis.reference import check_run
        from analysis.schema import RunFolder
        from orchestration.runner import prepare, schedule_outcome, write_outcome
        from orchestration.schedule import run_schedule

        t0 = time.perf_counter()
        self.used += 1
        prepare(sc, out)
        self._flush()
        late = self.cutter.begin()
        result = run_schedule(self.cluster, sc, out / "faults.jsonl")
        outcome = schedule_outcome(self.cluster, sc, out, result, {})
        self.cluster.chaos.heal()
        self._flush()
        alive = {n: self.cluster.members[n].incarnation for n in self.cluster.running()}
        cut = self.cutter.cut(out / "history", self.cluster.clock.now_ns(), alive)
        write_outcome(outcome)
        res = check_run(RunFolder(out.name, out))
        violated = tuple(sorted({v.check for v in res.violations}))
        case = CaseResult(violated, None, res.events, time.perf_counter() - t0, sentences(res.violations))
        if cut.leaked or late:
            why = f"leaked: {len(cut.leaked)} message(s) sent before it"
            why += f", e.g. {cut.leaked[0]}" if cut.leaked else f"; {late} delivered after the last schedule's end"
            return replace(case, error=why), "leaked"
        if violated:
            return case, "failed"
        if not self.intact():
            return case, "member-changed"
        return case, None if self.ready() else "not-ready"


class WarmRunner:
    """A worker's warm cluster (at most one at a time): run() takes a schedule and gives its result."""

    def __init__(self, scratch: Path, backend: str, every: int = WARM_EVERY) -> None:
        self.scratch, self.backend, self.every = scratch, backend, every
        self.warm: WarmCluster | None = None
        self.stats = WarmStats()

    def close(self) -> None:
        if self.warm is not None:
            self.warm.close()
            self.warm = None

    def run(self, raw: TomlTable, keep: Keep) -> CaseResult:
        try:
            sc = scenario_of(raw)
        except ScenarioError as e:
            return CaseResult(error=str(e))
        if not sc.system.control:
            return self._fresh(raw, keep, "")
        if aims_at_seqnos(sc):
            return self._fresh(raw, keep, "fresh-seqno")
        spec = warm_spec(sc, self.backend)
        if self.warm is not None and self.warm.spec != spec:
            self.stats.ended("other-cluster")
            self.close()
        try:
            if self.warm is None:
                self.warm = WarmCluster(spec, self.scratch / f"warm-{self.stats.started}")
                self.stats.started += 1
            res, why = self.warm.run(sc, self.scratch / "segment")
        except (ScenarioError, InputError, RuntimeError, OSError) as e:  # ClusterError, ChaosError: RuntimeErrors
            self.stats.ended("error")
            self.close()
            shutil.rmtree(self.scratch / "segment", ignore_errors=True)
            return self._fresh(raw, keep, f"warm-error: {str(e)[:200]}")
        shutil.rmtree(self.scratch / "segment", ignore_errors=True)
        why = why or ("every" if self.warm.used >= self.every else None)
        if why is not None:
            self.stats.ended(why)
            self.close()
        if res.error is not None and res.error.startswith("leaked"):
            self.stats.leaked += 1
            return self._fresh(raw, keep, "warm-leaked")
        if res.failed:
            fresh = self._fresh(raw, keep, "")
            confirmed = fresh.violated == res.violated
            self.stats.unconfirmed += not confirmed
            return replace(
                fresh, warm="warm-confirmed" if confirmed else f"warm-unconfirmed: {', '.join(res.violated)}"
            )
        self.stats.warm += 1
        return replace(res, warm="warm")

    def _fresh(self, raw: TomlTable, keep: Keep, why: str) -> CaseResult:
        self.stats.fresh += 1
        return replace(run_real_case(raw, self.scratch / "run", self.backend, keep), warm=why)

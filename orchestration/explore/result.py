"""explore.json (docs/scenario-format.md, "Explore"): `{"schedules": N, "failures": [{"seed", "violated", "minimal",
"faults_before", "faults_after", "confirm"}]}`, extended (never changed) with what else a search knows: its command,
seed and time, errors, the schedule index of each failure, when it was found, its shrink trail, its run folder and
replay command, the normal check's verdict, and the seeds of later schedules that failed with the same checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NotRequired, TypedDict

from node.atomic import write_atomic
from orchestration.explore.confirm import ConfirmDoc
from orchestration.explore.finish import Failure
from orchestration.explore.search import GuidedDoc, SearchResult
from orchestration.explore.tables import faults_of

EXPLORE_JSON = "explore.json"


class ShrinkDoc(TypedDict):
    runs: int
    steps: list[str]
    complete: bool
    rates: NotRequired[list[list[int]]]  # real members: each step's (failing runs, runs)


class FailureDoc(TypedDict):
    """One entry of explore.json's `failures` (paths relative to the explore folder)."""

    seed: int
    violated: list[str]
    minimal: str
    faults_before: int
    faults_after: int
    confirm: ConfirmDoc | None
    index: int
    found_after_s: float
    schedules_until_found: int
    shrink: ShrinkDoc
    run: str
    checked: list[str] | None
    check_error: str | None
    replay: str
    same_checks: list[int]
    details: list[str]
    found_run: NotRequired[str]  # real members: the failing schedule's run folder
    origin: NotRequired[str]  # a guided search: "random", or the mutation the schedule came from


class WarmDoc(TypedDict):
    """explore.json's `warm`: the restart period and the schedules by how they ran (CaseResult.warm's kinds)."""

    every: int
    schedules: dict[str, int]


class ExploreDoc(TypedDict):
    """explore.json."""

    schedules: int
    failures: list[FailureDoc]
    command: str
    scenario: str
    seed: int
    seconds: float
    errors: int
    error_samples: list[str]
    other_failures: int
    interrupted: bool
    backend: NotRequired[str]  # where the schedules ran (absent: the simulator)
    jobs: NotRequired[int]
    guide: NotRequired[str]  # real members: "wire" or "random"
    guided: NotRequired[GuidedDoc]  # a guided search's corpus
    warm: NotRequired[WarmDoc]  # a search on warm clusters


def failure_doc(f: Failure, root: Path) -> FailureDoc:
    return {
        "seed": f.found.seed,
        "violated": list(f.found.result.violated),
        "minimal": f.minimal.relative_to(root).as_posix(),
        "faults_before": len(f.found.faults),
        "faults_after": len(faults_of(f.shrunk.raw)),
        "confirm": f.confirm,
        "index": f.found.index,
        "found_after_s": round(f.found.elapsed, 3),
        "schedules_until_found": f.found.tried,
        "shrink": {"runs": f.shrunk.runs, "steps": f.shrunk.trail, "complete": f.shrunk.complete},
        "run": f.run.relative_to(root).as_posix(),
        "checked": list(f.checked) if f.checked is not None else None,
        "check_error": f.check_error,
        "replay": f"chaosbed run {f.minimal.relative_to(root).as_posix()} --backend {f.backend}",
        "same_checks": f.same_checks,
        "details": list(f.details),  # the minimal run's first violations
    }


def explore_doc(
    result: SearchResult, failures: list[Failure], root: Path, *, command: str, seed: int, base: str
) -> ExploreDoc:
    return {
        "schedules": result.tried,
        "failures": [failure_doc(f, root) for f in failures],
        "command": command,
        "scenario": base,
        "seed": seed,
        "seconds": round(result.seconds, 3),
        "errors": result.errors,
        "error_samples": result.error_samples,
        "other_failures": result.other,
        "interrupted": result.interrupted,
    }


def write_explore_json(root: Path, doc: ExploreDoc) -> Path:
    path = root / EXPLORE_JSON
    write_atomic(path, json.dumps(doc, indent=1) + "\n")
    return path

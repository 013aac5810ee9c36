"""explore.json (docs/scenario-format.md, "Explore"): `{"schedules": N, "failures": [{"seed", "violated", "minimal",
"faults_before", "faults_after", "confirm"}]}`, extended (never changed) with what else a search knows: its command,
seed and time, errors, the schedule index of each failure, when it was found, its shrink trail, its run folder and
replay command, the normal check's verdict, and the seeds of later schedules that failed with the same checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestration.explore.finish import Failure
from orchestration.explore.search import SearchResult
from orchestration.explore.tables import faults_of

EXPLORE_JSON = "explore.json"


def failure_doc(f: Failure, root: Path) -> dict[str, Any]:
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
        "replay": f"chaosbed run {f.minimal.relative_to(root).as_posix()} --backend sim",
        "same_checks": f.same_checks,
        "details": list(f.details),  # the minimal run's first violations
    }


def explore_doc(
    result: SearchResult, failures: list[Failure], root: Path, *, command: str, seed: int, base: str
) -> dict[str, Any]:
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


def write_explore_json(root: Path, doc: dict[str, Any]) -> Path:
    path = root / EXPLORE_JSON
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path

"""A worker process of explore's pool: `python -m orchestration.explore.worker SCRATCH [BACKEND]`.

Reads one job per line on stdin (`{"id": ..., "raw": {scenario}, "keep": path or null, "keep_always": bool,
"tap": bool}`), runs
it in the simulator (case.run_case) or on real members of BACKEND (real_case.run_real_case: SIGTERM becomes an
interrupt, so the cluster under way is taken down), checks it, in the scratch folder given as its argument (the
pool's, in /dev/shm where there is one: histories never touch the disk; the pool removes it, also when it has to
kill the worker), and writes one line per job on stdout (`{"id": ..., "result": {...}}`). Ends at the end of its
input. It runs in a session of its own, so the terminal's Ctrl-C reaches only explore, which ends it."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from types import FrameType

from orchestration.explore.case import CaseResult, run_case
from orchestration.explore.real_case import REMOVE, Keep, run_real_case
from orchestration.explore.tables import TomlTable, as_table, table

SHM = Path("/dev/shm")
SCRATCH_ENV = "CHAOSBED_EXPLORE_SCRATCH"


def scratch_root() -> Path:
    """Where runs are written: $CHAOSBED_EXPLORE_SCRATCH if set, else /dev/shm when it is a writable folder
    (memory), else the temporary folder."""
    if os.environ.get(SCRATCH_ENV):
        return Path(os.environ[SCRATCH_ENV])
    return SHM if SHM.is_dir() and os.access(SHM, os.W_OK) else Path(tempfile.gettempdir())


def run_job(raw: TomlTable, scratch: Path, backend: str, keep: Keep = REMOVE, tap: bool = False) -> CaseResult:
    """One case: in the simulator (`keep` and `tap` play no part), or on real members of `backend` (`tap`: with
    the wire tap, its result carrying what the schedule reached)."""
    if backend == "sim":
        return run_case(raw, scratch / "run")
    return run_real_case(raw, scratch / "run", backend, keep, tap=tap)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str]) -> None:
    scratch = Path(argv[0])
    backend = argv[1] if len(argv) > 1 else "sim"
    scratch.mkdir(parents=True, exist_ok=True)
    if backend != "sim":
        signal.signal(signal.SIGTERM, _interrupt)
    for line in sys.stdin:
        if not line.strip():
            continue
        job = as_table(json.loads(line), "job")
        path, always = job.get("keep"), job.get("keep_always") is True
        keep = Keep(path if isinstance(path, str) else None, always)
        try:
            result = run_job(table(job, "raw"), scratch, backend, keep, job.get("tap") is True)
        except KeyboardInterrupt:
            return
        sys.stdout.write(json.dumps({"id": job["id"], "result": result.as_json()}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])

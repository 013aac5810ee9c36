"""A worker process of explore's pool: `python -m orchestration.explore.worker SCRATCH [BACKEND]`.

Reads one job per line on stdin (`{"id": ..., "raw": {scenario}, "keep": path or null, "keep_always": bool,
"tap": bool, "warm": K}`; K > 0: on the worker's warm cluster, started afresh every K schedules, warm.py), runs
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
from orchestration.explore.warm import WarmRunner

SHM = Path("/dev/shm")
SCRATCH_ENV = "CHAOSBED_EXPLORE_SCRATCH"


def scratch_root() -> Path:
    """Where runs are written: $CHAOSBED_EXPLORE_SCRATCH if set, else /dev/shm when it is a writable folder
    (memory), else the temporary folder."""
    if os.environ.get(SCRATCH_ENV):
        return Path(os.environ[SCRATCH_ENV])
    return SHM if SHM.is_dir() and os.access(SHM, os.W_OK) else Path(tempfile.gettempdir())


def run_job(
    raw: TomlTable, scratch: Path, backend: str, keep: Keep = REMOVE, tap: bool = False, warm: WarmRunner | None = None
) -> CaseResult:
    """One case: in the simulator (`keep`, `tap` and `warm` play no part), or on real members of `backend` (`tap`:
    with the wire tap, its result carrying what the schedule reached; `warm`: on that runner's warm cluster)."""
    if backend == "sim":
        return run_case(raw, scratch / "run")
    if warm is not None and not tap:
        return warm.run(raw, keep)
    return run_real_case(raw, scratch / "run", backend, keep, tap=tap)


class WarmRunners:
    """A process's warm runner, made at its first warm job (`every`: the job's restart period)."""

    def __init__(self, scratch: Path, backend: str) -> None:
        self.scratch, self.backend = scratch, backend
        self.runner: WarmRunner | None = None

    def get(self, every: int) -> WarmRunner | None:
        if every <= 0 or self.backend == "sim":
            return None
        if self.runner is None or self.runner.every != every:
            self.close()
            self.runner = WarmRunner(self.scratch, self.backend, every)
        return self.runner

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
            self.runner = None


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str]) -> None:
    scratch = Path(argv[0])
    backend = argv[1] if len(argv) > 1 else "sim"
    scratch.mkdir(parents=True, exist_ok=True)
    if backend != "sim":
        signal.signal(signal.SIGTERM, _interrupt)
    warm = WarmRunners(scratch, backend)
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            job = as_table(json.loads(line), "job")
            path, always = job.get("keep"), job.get("keep_always") is True
            keep = Keep(path if isinstance(path, str) else None, always)
            every = job.get("warm")
            runner = warm.get(every if isinstance(every, int) else 0)
            result = run_job(table(job, "raw"), scratch, backend, keep, job.get("tap") is True, runner)
            sys.stdout.write(json.dumps({"id": job["id"], "result": result.as_json()}) + "\n")
            sys.stdout.flush()
    except KeyboardInterrupt:
        return
    finally:
        warm.close()


if __name__ == "__main__":
    main(sys.argv[1:])

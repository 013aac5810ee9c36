"""A worker process of explore's pool: `python -m orchestration.explore.worker`.

Reads one job per line on stdin (`{"id": ..., "raw": {scenario}}`), runs it in the simulator and checks it
(case.run_case) in the scratch folder given as its argument (the pool's, in /dev/shm where there is one: histories
never touch the disk; the pool removes it, also when it has to kill the worker), and writes one line per job on
stdout (`{"id": ..., "result": {...}}`). Ends at the end of its input. It runs in a session of its own, so the
terminal's Ctrl-C reaches only explore, which ends it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from orchestration.explore.case import run_case
from orchestration.explore.tables import as_table, table

SHM = Path("/dev/shm")
SCRATCH_ENV = "CHAOSBED_EXPLORE_SCRATCH"


def scratch_root() -> Path:
    """Where runs are written: $CHAOSBED_EXPLORE_SCRATCH if set, else /dev/shm when it is a writable folder
    (memory), else the temporary folder."""
    if os.environ.get(SCRATCH_ENV):
        return Path(os.environ[SCRATCH_ENV])
    return SHM if SHM.is_dir() and os.access(SHM, os.W_OK) else Path(tempfile.gettempdir())


def main(argv: list[str]) -> None:
    scratch = Path(argv[0])
    scratch.mkdir(parents=True, exist_ok=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        job = as_table(json.loads(line), "job")
        result = run_case(table(job, "raw"), scratch / "run")
        sys.stdout.write(json.dumps({"id": job["id"], "result": result.as_json()}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])

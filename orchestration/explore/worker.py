"""A worker process of explore's pool: `python -m orchestration.explore.worker`.

Reads one job per line on stdin (`{"id": ..., "raw": {scenario}}`), runs it in the simulator and checks it
(case.run_case) in a scratch folder of its own (in /dev/shm where there is one: histories never touch the disk), and
writes one line per job on stdout (`{"id": ..., "result": {...}}`). Ends at the end of its input, removing the
scratch folder. It runs in a session of its own, so the terminal's Ctrl-C reaches only explore, which ends it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from orchestration.explore.case import run_case

SHM = Path("/dev/shm")


def scratch_root() -> Path:
    """Where runs are written: /dev/shm when it is a writable folder (memory), else the temporary folder."""
    return SHM if SHM.is_dir() and os.access(SHM, os.W_OK) else Path(tempfile.gettempdir())


def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="chaosbed-explore-", dir=scratch_root()))
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            job = json.loads(line)
            result = run_case(job["raw"], scratch / "run")
            sys.stdout.write(json.dumps({"id": job["id"], "result": result.as_json()}) + "\n")
            sys.stdout.flush()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Drawing the run reports of a folder of runs on every core: one `python -m analysis.report_workers JOBS` process
per core, each drawing its share (matplotlib is most of a matrix's check time, ~0.5 s per run, and single-threaded).

Plain subprocesses rather than a multiprocessing pool: a spawned pool re-imports the caller's main module, which
breaks `python -c`, stdin scripts and unguarded entry points. A worker that fails leaves its share to be drawn here.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from node.atomic import write_atomic

if TYPE_CHECKING:
    from analysis.results import RunResult
    from analysis.stats import RunStats

Job = tuple[Path, str, "RunResult", "RunStats"]  # report path, run name, its results and statistics
PARALLEL_FROM = 8  # runs; fewer are drawn in this process (a worker costs about a second to start)


def write_report(job: Job) -> None:
    from analysis.report import render_run

    path, name, res, stats = job
    write_atomic(path, render_run(name, res, stats))


def write_reports(jobs: list[Job]) -> None:
    cores = os.cpu_count() or 1
    if len(jobs) < PARALLEL_FROM or cores < 2:
        for job in jobs:
            write_report(job)
        return
    shares = [jobs[i::cores] for i in range(cores)]
    with tempfile.TemporaryDirectory(prefix="chaosbed-reports-") as tmp:
        procs = []
        for i, share in enumerate(shares):
            path = Path(tmp) / f"share{i}.pickle"
            path.write_bytes(pickle.dumps(share))
            procs.append((share, subprocess.Popen([sys.executable, "-m", "analysis.report_workers", str(path)])))
        for share, proc in procs:
            if proc.wait() != 0:
                for job in share:
                    write_report(job)


if __name__ == "__main__":
    for job in pickle.loads(Path(sys.argv[1]).read_bytes()):
        write_report(job)

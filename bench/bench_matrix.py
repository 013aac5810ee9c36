"""Matrices: cells per minute, and what the one check pass over every cell costs next to checking one run.

Runs a 24-cell simulator matrix (4 shipped scenarios x 2 stacks x 3 seeds) and, as root, a 6-cell netns matrix
(3 scenarios x 2 stacks), each with -j 2, exactly as `chaosbed matrix` does (a process per cell). Then, each in a
fresh process (a cold JVM, as `chaosbed check` pays it): the check of ONE cell's run folder, and the check of the
whole matrix folder in one pass. Printed: cells/minute for the runs, the checker's share of the wall time, and the
ratio matrix check / single check (the target: < 2x, i.e. one Spark pass, not one per cell).

    python -m bench.bench_matrix [--sim-only] [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from orchestration.matrix.results import MatrixResult
from orchestration.matrix.run import run_cells, write_matrix
from orchestration.matrix.spec import Matrix, expand

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
STACKS = ["unicast3+nakack2", "unicast3+mcast"]


def matrix(name: str, files: list[str], seeds: list[int], backend: str) -> Matrix:
    axes = {"cluster.stack": STACKS, "seed": seeds, "backend": [backend]}
    cells = expand([SCENARIOS / f for f in files], axes)
    return Matrix(name, None, cells, axes, rows=["scenario"], columns=["cluster.stack", "seed"])


def cold_check(folder: Path) -> float:
    """Seconds for `python -m analysis.command FOLDER` in a new process (JVM start, ingest, checks, outputs)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "analysis.command", str(folder)], capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"check of {folder} failed: {proc.stderr.strip()[-400:]}")
    return time.perf_counter() - t0


def measure(m: Matrix, jobs: int, out: Path) -> None:
    t0 = time.perf_counter()
    results, _ = run_cells(m, out, jobs)
    runs = time.perf_counter() - t0
    errors = [r for r in results if r.status != "ran"]
    if errors:
        raise SystemExit(f"{len(errors)} cells could not run, e.g. {errors[0].cell.folder}: {errors[0].error}")
    single = cold_check(out / m.cells[0].folder)
    whole = cold_check(out)
    write_matrix(MatrixResult(m, out, results, run_seconds=runs, check_seconds=whole))
    n = len(m.cells)
    total = runs + whole
    print(
        f"{m.name}: {n} cells, -j {jobs}: runs {runs:.1f} s ({n / runs * 60:.0f} cells/min), one check pass "
        f"{whole:.1f} s = {whole / total:.0%} of {total:.1f} s wall; {n / total * 60:.0f} cells/min in all"
    )
    print(
        f"  check of one run {single:.1f} s; of all {n} runs {whole:.1f} s = {whole / single:.2f}x one run "
        f"(one check per cell would take ~{n * single:.0f} s)"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sim-only", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    files = ["partition-heal.toml", "one-way-split.toml", "crash-rejoin.toml", "lossy-network.toml"]
    with tempfile.TemporaryDirectory(prefix="bench-matrix-") as tmp:
        measure(matrix("sim-24", files, [1, 2, 3], "sim"), args.jobs, Path(tmp) / "sim")
        if os.geteuid() == 0 and not args.sim_only:
            measure(matrix("netns-6", files[:3], [1], "netns"), args.jobs, Path(tmp) / "netns")
        elif not args.sim_only:
            print("(netns matrix skipped: it needs root for network namespaces)")


if __name__ == "__main__":
    main()

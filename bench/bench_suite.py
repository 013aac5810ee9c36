"""The test suite serial and under pytest-xdist, side by side in one run: wall time and the speed-up.

    python -m bench.bench_suite [--workers 2] [--rounds 1] [PYTEST ARGS...]   (default: tests/unit tests/sim)

Each round runs the selection once serially and once with `-n WORKERS`, alternating which goes first, so both see
the same machine; the medians and their ratio are printed. A failed run is reported and not counted as a figure:
a suite that fails faster is not faster. The README quotes the whole suite (`tests`, as root) measured this way.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from bench.common import report

DEFAULT_SELECTION = ["tests/unit", "tests/sim"]


def run_suite(args: list[str], workers: int | None) -> tuple[float, bool, str]:
    """Wall time of one pytest run, whether it passed, and its summary line."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    if workers is not None:
        command += ["-n", str(workers), "--dist", "worksteal"]  # as `make test`
    else:
        command += ["-p", "no:xdist"]
    t = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - t
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    failed = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]  # pytest's short summary
    summary = lines[-1] if lines else done.stderr.strip()[-200:]
    return elapsed, done.returncode == 0, "\n".join([summary, *(f"    {line}" for line in failed)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    opts, pytest_args = parser.parse_known_args(argv)
    selection = pytest_args or DEFAULT_SELECTION
    times: dict[str, list[float]] = {"serial": [], "xdist": []}
    for i in range(opts.rounds):
        order = [None, opts.workers] if i % 2 == 0 else [opts.workers, None]
        for workers in order:
            key = "serial" if workers is None else "xdist"
            elapsed, ok, summary = run_suite(selection, workers)
            print(f"  round {i + 1} {key:<6} {elapsed:7.1f} s  {summary}", flush=True)
            if ok:
                times[key].append(elapsed)
    print(f"selection: {' '.join(selection)}")
    if not times["serial"] or not times["xdist"]:
        print("no figure: a run failed (see above)")
        return
    serial, xdist = statistics.median(times["serial"]), statistics.median(times["xdist"])
    report("suite wall time, serial (median)", serial, "s")
    report(f"suite wall time, -n {opts.workers} (median)", xdist, "s")
    report(f"speed-up with -n {opts.workers}", serial / xdist, "x", "(target >= 1.4x on 2 cores)")


if __name__ == "__main__":
    main()

"""explore on real members: schedules per hour of the search (each schedule a fresh cluster, -j clusters side by
side) against fresh `chaosbed run`s of the same scenario one after another (the runner and the Spark check, as a user
runs them), printed side by side. As root (netns) or with a Docker engine (docker).

    python -m bench.bench_explore_real [FILE] [--set K=V ...] [--backend netns|docker] [--schedules N] [-j J ...]
                                       [--fresh N] [--tap] [--warm K]

Default: scenarios/bugs/unicast2-last-message.toml with its fix set (nearly every schedule passes, so the figure is
the search's, not the shrink's), 8 schedules at -j 1, 2 and 3, 3 fresh runs. docs/explore.md has the figures.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import report
from orchestration.explore.case import load_base, scenario_of
from orchestration.explore.foreign_context import context_for
from orchestration.explore.generator import Generator
from orchestration.explore.pool import make_pool
from orchestration.explore.search import SearchSpec, search

REPO = Path(__file__).resolve().parents[1]
DEFAULT_FILE = REPO / "scenarios" / "bugs" / "unicast2-last-message.toml"
DEFAULT_SETS = ["cluster.properties.unicast2.resend_last_seqno=true"]


def searched_per_hour(
    file: Path, sets: list[str], backend: str, schedules: int, jobs: int, tap: bool = False, warm: int = 0
) -> tuple[float, int, dict[str, int] | None]:
    """The search's schedules per hour, its failures and (warm) how its schedules ran, over `schedules` schedules on
    `jobs` clusters (`tap`: each run with its wire tap, as the wire-guided search runs them; `warm`: on warm
    clusters started afresh every `warm` schedules)."""
    base = load_base(file, sets)
    generator = Generator(context_for(scenario_of(base), real=True))
    pool = make_pool(jobs, backend)
    try:
        result = search(base, generator, SearchSpec(seed=1, schedules=schedules), pool, tap=tap, warm=warm)
    finally:
        pool.close()
    return 3600 * result.tried / result.seconds, len(result.failures), result.warm


def fresh_per_hour(file: Path, sets: list[str], backend: str, runs: int) -> float:
    """`chaosbed run FILE` (its own faults left as they are: what a user reruns) `runs` times, one after another."""
    out = Path(tempfile.mkdtemp(prefix="bench-explore-real-"))
    cmd = [sys.executable, "-m", "orchestration.cli", "run", str(file), "--backend", backend]
    cmd += [a for s in sets for a in ("--set", s)]
    t0 = time.monotonic()
    try:
        for k in range(runs):
            done = subprocess.run([*cmd, "--seed", str(k + 1), "--out", str(out / f"r{k}")], capture_output=True,
                                  text=True, check=False, timeout=600)  # fmt: skip
            if done.returncode not in (0, 1):  # 2: it could not run, and a figure of it would be no figure
                raise SystemExit(f"chaosbed run exited {done.returncode}: {done.stderr.strip()[-300:]}")
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return 3600 * runs / (time.monotonic() - t0)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("file", nargs="?", type=Path, default=DEFAULT_FILE)
    p.add_argument("--set", dest="sets", action="append", default=None)
    p.add_argument("--backend", default="netns", choices=["netns", "docker"])
    p.add_argument("--schedules", type=int, default=8)
    p.add_argument("-j", dest="jobs", type=int, action="append", default=None)
    p.add_argument("--fresh", type=int, default=3)
    p.add_argument("--tap", action="store_true", help="also each -j with the wire tap on (the guided search's runs)")
    p.add_argument("--warm", type=int, default=0, help="also each -j on warm clusters started afresh every K")
    args = p.parse_args(argv)
    sets = args.sets if args.sets is not None else (DEFAULT_SETS if args.file == DEFAULT_FILE else [])
    fresh = fresh_per_hour(args.file, sets, args.backend, args.fresh) if args.fresh else 0.0
    report(f"fresh chaosbed run ({args.backend}, {args.fresh} runs)", fresh, "runs/hour")
    modes = [(False, 0)] + ([(True, 0)] if args.tap else []) + ([(False, args.warm)] if args.warm else [])
    for jobs in args.jobs or [1, 2, 3]:
        for tap, warm in modes:
            rate, failures, how = searched_per_hour(args.file, sets, args.backend, args.schedules, jobs, tap, warm)
            note = f"{rate / fresh:.1f}x fresh; {failures} failure(s)" if fresh else f"{failures} failure(s)"
            mode = ", tapped" if tap else f", warm every {warm}" if warm else ""
            report(f"explore search ({args.backend}, -j {jobs}, {args.schedules} schedules{mode})", rate,
                   "schedules/hour", note)  # fmt: skip
            if how is not None:
                print(f"  {', '.join(f'{k} {v}' for k, v in sorted(how.items()))}")


if __name__ == "__main__":
    main()

"""explore on real members, guided by the wire against plain random drawing: for catalogue bugs (their flawed
setting, none of their faults), the schedules and seconds each search took to its first schedule violating exactly
the bug's checks, on the same budget and seeds, side by side. As root (netns).

    python -m bench.bench_explore_guided [--bugs NAME ...] [--seeds 1 2 3] [--schedules N] [--budget S] [-j J]
                                         [--modes random features wire]

Default: unicast2-last-message, nakack2-last-message-lost and jgroups-unicast2-last-message (the real 2.12 jar),
seeds 1-3, at most 30 schedules or 300 s a search, -j 2. A search that does not find the bug counts its whole
budget (and says so); the medians are over the seeds. The modes: plain random drawing, the wire's features alone,
and `--guide wire` (features and near misses). docs/explore.md has the figures.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from orchestration.explore.case import load_base, scenario_of
from orchestration.explore.foreign_context import context_for
from orchestration.explore.generator import Generator
from orchestration.explore.guide import Guide
from orchestration.explore.pool import make_pool
from orchestration.explore.rediscover import flawed_sets
from orchestration.explore.search import SearchSpec, search
from orchestration.matrix.bugs import catalogue, find

DEFAULT_BUGS = ["unicast2-last-message", "nakack2-last-message-lost", "jgroups-unicast2-last-message"]
# random: every schedule drawn afresh; features: the corpus of new wire features alone (the guide before near
# misses); wire: `--guide wire` as it is, new features and near misses (orchestration/explore/pressure.py)
MODES = ("random", "features", "wire")


@dataclass
class Outcome:
    found: bool
    schedules: int
    seconds: float
    corpus: int = 0


def hunt(bug: str, seed: int, mode: str, schedules: int, budget: float, jobs: int) -> Outcome:
    """One search for the bug's first failure (exactly its checks) on netns."""
    (entry,) = find(catalogue(), bug)
    base = load_base(entry.path, flawed_sets(entry))
    generator = Generator(context_for(scenario_of(base), real=True))
    guide = Guide(generator, near=mode == "wire") if mode != "random" else None
    want = tuple(sorted(entry.bug.violates))
    spec = SearchSpec(seed=seed, schedules=schedules, budget=budget, stop_at_first=True, want=want)
    pool = make_pool(jobs, "netns")
    t0 = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-guided-") as keep:
            result = search(base, generator, spec, pool, keep_root=Path(keep), guide=guide, tap=True)
    finally:
        pool.close()
    if result.failures:
        first = result.failures[0]
        return Outcome(True, first.tried, first.elapsed, len(guide.corpus) if guide else 0)
    return Outcome(False, result.tried, time.monotonic() - t0, len(guide.corpus) if guide else 0)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--bugs", nargs="+", default=DEFAULT_BUGS)
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--schedules", type=int, default=30)
    p.add_argument("--budget", type=float, default=300.0)
    p.add_argument("-j", dest="jobs", type=int, default=2)
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    args = p.parse_args(argv)
    print(f"{'bug':36} {'mode':7} " + " ".join(f"{'seed ' + str(s):>18}" for s in args.seeds) + "  median")
    for bug in args.bugs:
        for mode in args.modes:  # the modes of a bug one after the other: the same machine load for all
            outs = [hunt(bug, s, mode, args.schedules, args.budget, args.jobs) for s in args.seeds]
            cells = " ".join(f"{(str(o.schedules) if o.found else '>' + str(o.schedules)):>6} /{o.seconds:7.1f} s "
                             for o in outs)  # fmt: skip
            med_n = statistics.median(o.schedules for o in outs)
            med_s = statistics.median(o.seconds for o in outs)
            found = sum(o.found for o in outs)
            print(f"{bug:36} {mode:7} {cells} {med_n:5g} / {med_s:6.1f} s  found {found}/{len(outs)}", flush=True)


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t0:.0f} s)")

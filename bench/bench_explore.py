"""explore: (a) simulated schedules per hour, (b) the rediscovery of the known-bug catalogue from scratch.

(a) Throughput: a 4-member cluster (unicast3+nakack2) streaming unicasts between every pair and multicasts from two
members (~2,000 messages over ~10 s of virtual time); explore's search draws schedules over it for --seconds and
runs and checks each one on -j workers, as `chaosbed explore` does. Printed: schedules per hour (target >= 10,000
on a 2-core machine), and what a schedule is (the means over the first 10: virtual seconds, messages, events).

(b) Rediscovery: for each bug of scenarios/bugs/*.toml, its scenario with the flawed property set and none of its
faults is explored until a schedule fails with exactly the bug's checks, is shrunk (keeping the failure on the
flawed variant and the pass on the fixed one) and the minimal scenario fails on the flawed and passes on the fixed
variant (orchestration/explore/rediscover.py). One row per bug: time to find, schedules tried, faults before and
after shrinking, and with --confirm netns the reproduction rate of the minimal scenario (flawed) on real members.
Target: >= 10 of 13 found and shrunk to <= 4 faults within 10 minutes each.

    python -m bench.bench_explore [--seconds S] [--budget-per-bug S] [--bugs NAME ...] [-j N] [--confirm netns]
                                  [--confirm-runs N] [--only throughput|rediscovery]
"""

from __future__ import annotations

import argparse
import copy
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench.common import report
from orchestration.explore.case import run_case, scenario_of
from orchestration.explore.context import context_of
from orchestration.explore.generator import Generator
from orchestration.explore.minimal import Provenance, write_minimal
from orchestration.explore.pool import make_pool
from orchestration.explore.rediscover import Rediscovery, rediscover, variant_of
from orchestration.explore.search import SearchSpec, schedule_rng, schedule_seed, search
from orchestration.matrix.bugs import catalogue, find
from orchestration.scenario import load
from orchestration.systems.clusters import backend_problem

THROUGHPUT_BASE = {
    "name": "bench-explore",
    "seed": 1,
    "timeout": "40s",
    "cluster": {
        "members": 4,
        "stack": "unicast3+nakack2",
        "properties": {
            "unicast3": {"xmit_interval": "200ms"},
            "nakack2": {"xmit_interval": "200ms"},
            "fd": {"interval": "0.5s", "timeout": "2s", "timeout_check_interval": "0.5s"},
            "merge": {"min_interval": "0.5s", "max_interval": "2s"},
            "gms": {"join_timeout": "1s", "discovery_timeout": "1s"},
        },
    },
    "workload": [
        {"kind": "unicast", "from": "*", "to": "*", "count": 130, "size": 100, "rate": 20},
        {"kind": "multicast", "from": ["A", "C"], "count": 200, "size": 100, "rate": 30},
    ],
    "checks": {"fifo": True, "exactly_once": True, "complete": True, "no_phantoms": True, "views_converge": "10s"},
}


def sample(scratch: Path, n: int = 10) -> tuple[float, float, float]:
    """Means over the first n schedules of the throughput search: virtual seconds (from the schedule's start to the
    last event), messages sent, events checked."""
    from analysis.membership import read_schedule_start

    gen = Generator(context_of(scenario_of(THROUGHPUT_BASE)))
    virtual = sends = events = 0.0
    for i in range(n):
        seed = schedule_seed(1, i)
        raw = copy.deepcopy(THROUGHPUT_BASE)
        raw["seed"], raw["faults"] = seed, gen.draw(schedule_rng(seed))
        out = scratch / "one"
        events += run_case(raw, out, keep=True).events
        last = 0
        for path in (out / "history").glob("*.jsonl"):
            for line in path.read_text().splitlines():
                sends += '"event":"send"' in line
                last = max(last, int(line[5 : line.index(",")]))
        virtual += (last - (read_schedule_start(out / "faults.jsonl") or 0)) / 1e9
        shutil.rmtree(out, ignore_errors=True)
    return virtual / n, sends / n, events / n


def throughput(seconds: float, jobs: int, scratch: Path) -> None:
    virtual, sends, events = sample(scratch)
    print(f"a schedule (mean of 10): {virtual:.1f} s of virtual time, {sends:,.0f} messages sent, {events:,.0f} events")
    pool = make_pool(jobs)
    try:
        gen = Generator(context_of(scenario_of(THROUGHPUT_BASE)))
        result = search(THROUGHPUT_BASE, gen, SearchSpec(seed=1, budget=seconds), pool)
    finally:
        pool.close()
    rate = result.tried / result.seconds * 3600
    report(f"explore: schedules per hour (-j {jobs}, {result.tried} in {result.seconds:.0f} s)", rate, "schedules/h",
           "target >= 10,000")  # fmt: skip
    print(f"  failures: {len(result.failures)}, could not run: {result.errors}")
    for f in result.failures[:5]:
        print(f"  failure: schedule seed {f.seed} violates {', '.join(f.result.violated)}: {f.result.details[:1]}")


def confirm_rate(r: Rediscovery, backend: str, runs: int, scratch: Path) -> str:
    from orchestration.explore.confirm import confirm

    assert r.shrunk is not None and r.found is not None
    folder = scratch / f"confirm-{r.entry.path.stem}"
    folder.mkdir(parents=True, exist_ok=True)
    prov = Provenance("bench", r.found.index, r.found.seed, r.found.result.violated, tuple(r.found.faults))
    flawed = variant_of(r.shrunk.raw, r.entry, "flawed")
    write_minimal(folder / "minimal.toml", flawed, prov, r.shrunk.trail, r.shrunk.runs, r.shrunk.complete)
    doc = confirm(folder / "minimal.toml", tuple(sorted(r.entry.bug.violates)), backend, runs)
    return f"{doc['reproduced']}/{doc['runs']}"


def row(r: Rediscovery) -> str:
    """One line of the rediscovery table (without the confirmation)."""
    ok = r.ok
    faults = f"{len(r.found.faults)}->{r.faults_after}" if ok and r.found else "-"
    runs = str(r.shrunk.runs) if ok and r.shrunk else "-"
    if ok:
        verdict = f"{','.join(r.flawed or ()) or 'pass'} / {','.join(r.fixed or ()) or 'pass'}"
    else:
        verdict = f"not found ({r.shared} failing the fixed variant too)"
    found = "yes" if ok else "no"
    return f"{r.entry.path.stem:<36} {found:>5} {r.seconds:>6.0f}s {r.tried:>9} {faults:>8} {runs:>6}  {verdict}"


def rediscovery(args: argparse.Namespace, scratch: Path) -> None:
    entries = [e for n in args.bugs for e in find(catalogue(), n)] if args.bugs else catalogue()
    for e in [e for e in entries if backend_problem(load(e.path).system, "sim")]:
        print(f"{e.path.stem}: skipped, explore searches in the simulator and this bug is {load(e.path).system.name}'s")
        entries.remove(e)
    head = f"{'bug':<36} {'found':>5} {'time':>7} {'schedules':>9} {'faults':>8} {'shrink':>6}  flawed / fixed"
    print(head + ("  confirm" if args.confirm else ""))
    found = small = 0
    pool = make_pool(args.jobs)
    try:
        for e in entries:
            r = rediscover(e, pool, seed=args.seed, budget=args.budget_per_bug, scratch=scratch)
            found += r.ok
            small += r.ok and (r.faults_after or 0) <= 4
            line = row(r)
            if args.confirm and r.ok:
                line += f"  {confirm_rate(r, args.confirm, args.confirm_runs, scratch)} on {args.confirm}"
            print(line, flush=True)
    finally:
        pool.close()
    print(f"rediscovered {found} of {len(entries)}; shrunk to <= 4 faults: {small} (target: >= 10 of 13)")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.bench_explore", description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=120.0, help="throughput: search this long")
    p.add_argument("--budget-per-bug", type=float, default=600.0, help="rediscovery: search budget per bug (s)")
    p.add_argument("--bugs", nargs="*", default=[], help="rediscovery: only these bugs (file stems or ids)")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--confirm", choices=["netns", "docker"], default=None)
    p.add_argument("--confirm-runs", type=int, default=5)
    p.add_argument("--only", choices=["throughput", "rediscovery"], default=None)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="chaosbed-bench-explore-") as tmp:
        if args.only in (None, "throughput"):
            print("== explore: simulated schedules per hour ==")
            throughput(args.seconds, args.jobs, Path(tmp))
        if args.only in (None, "rediscovery"):
            print(f"== explore: rediscovering the bug catalogue (budget {args.budget_per_bug:g} s per bug) ==")
            rediscovery(args, Path(tmp))


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t0:.0f} s)")

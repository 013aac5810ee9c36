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

(c) Rediscovery on real members (`--only rediscovery --backend netns`): the same from real clusters
(orchestration/explore/rediscover_real.py): chaosbed's own bugs and the four of the JGroups 2.12.2 jar (or --bugs),
each searched on netns for --budget-per-bug seconds (--guide random|wire; --warm K: on warm clusters), shrunk by
rates (each candidate's flawed and control runs side by side, at most --shrink-runs candidates), the minimal scenario
confirmed on --confirm-runs fresh clusters (default 10; confirmed at >= 75%) and its control run 3 times. Targets
(issue 37): the four jar bugs each within 30 minutes, shrunk to <= 3 faults, confirmed; >= 8 of chaosbed's own bugs
within 15 minutes each.

    python -m bench.bench_explore [--seconds S] [--budget-per-bug S] [--bugs NAME ...] [-j N] [--confirm netns]
                                  [--confirm-runs N] [--only throughput|rediscovery] [--backend sim|netns]
                                  [--guide random|wire] [--warm K] [--shrink-runs N]
"""

from __future__ import annotations

import argparse
import copy
import os
import shutil
import signal
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
from orchestration.explore.rediscover_real import RealRediscovery, RealSpec, rediscover_real
from orchestration.explore.reliable import reliable_line
from orchestration.explore.search import SearchSpec, schedule_rng, schedule_seed, search
from orchestration.matrix.bugs import Entry, catalogue, find
from orchestration.runner import first_interrupt_only
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


REAL_SKIP = ("merge-coordinator-left-out", "unicast3-delayed-ack-purge")  # the simulator's search never found them


def real_entries(args: argparse.Namespace) -> list[Entry]:
    """--bugs as named; else chaosbed's own bugs (but REAL_SKIP) and the four bugs of the JGroups 2.12.2 jar."""
    if args.bugs:
        return [e for n in args.bugs for e in find(catalogue(), n)]
    own = [e for e in catalogue() if load(e.path).system.native and e.path.stem not in REAL_SKIP]
    jar = [e for e in catalogue() if load(e.path).system.name == "jgroups-2.12"]
    return own + jar


def real_row(r: RealRediscovery) -> str:
    found = "yes" if r.found else "no"
    faults = f"{len(r.found.faults)}->{r.faults_after}" if r.found and r.shrunk else "-"
    shrink = f"{r.shrunk.runs} {r.shrink_seconds / 60:.1f}m" if r.shrunk else "-"
    confirm = f"{r.confirm['reproduced']}/{r.confirm['runs']}" if r.confirm else "-"
    control = f"{r.control_passed}/{r.control_ran}" if r.control_ran else ("no fix" if r.found else "-")
    verdict = "rediscovered" if r.ok else ("not found" if not r.found else "not confirmed")
    if r.shared:
        verdict += f" ({r.shared} failing the control too)"
    if r.other:
        verdict += f" ({r.other} failing other checks)"
    reliable = r.confirm.get("reliable") if r.confirm else None
    if reliable is not None and r.shrunk is not None:
        verdict += f"; minimal flaky, {reliable_line(reliable, len(r.shrunk.trail))}"
    return (f"{r.entry.path.stem:<36} {found:>5} {r.seconds / 60:>6.1f}m {r.tried:>9} {faults:>7} {shrink:>10} "
            f"{confirm:>7} {control:>7}  {verdict}")  # fmt: skip


def real_rediscovery(args: argparse.Namespace, scratch: Path) -> None:
    """The catalogue on real members (netns): search, shrink by rates, confirm; one row per bug."""
    spec = RealSpec(seed=args.seed, budget=args.budget_per_bug, shrink_runs=args.shrink_runs,
                    confirm_runs=args.confirm_runs, guide=args.guide, warm=args.warm)  # fmt: skip
    print(f"{'bug':<36} {'found':>5} {'time':>7} {'schedules':>9} {'faults':>7} {'shrink':>10} {'confirm':>7} "
          f"{'control':>7}  verdict")  # fmt: skip
    entries, ok = real_entries(args), 0
    pool = make_pool(args.jobs, args.backend)
    restore = first_interrupt_only((signal.SIGINT, signal.SIGTERM))  # Ctrl-C or `kill PID`: the clusters go down
    try:
        for e in entries:
            r = rediscover_real(e, pool, spec, scratch)
            ok += r.ok
            print(real_row(r), flush=True)
            if r.interrupted:
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    finally:
        pool.close()
        restore()
    how = f"{args.guide}, warm every {args.warm}" if args.warm else args.guide
    print(f"rediscovered on {args.backend} {ok} of {len(entries)} (searched {how}, seed {args.seed}, "
          f"budget {args.budget_per_bug:g} s per bug)")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.bench_explore", description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=120.0, help="throughput: search this long")
    p.add_argument("--budget-per-bug", type=float, default=600.0, help="rediscovery: search budget per bug (s)")
    p.add_argument("--bugs", nargs="*", default=[], help="rediscovery: only these bugs (file stems or ids)")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--confirm", choices=["netns", "docker"], default=None)
    p.add_argument("--confirm-runs", type=int, default=None, help="default 5 (--confirm), 10 on netns")
    p.add_argument("--only", choices=["throughput", "rediscovery"], default=None)
    p.add_argument("--backend", choices=["sim", "netns"], default="sim",
                   help="rediscovery: search in the simulator (default) or on real members (netns)")  # fmt: skip
    p.add_argument("--guide", choices=["random", "wire"], default="random", help="rediscovery on netns: the search")
    p.add_argument("--shrink-runs", type=int, default=24, help="rediscovery on netns: shrink candidates at most")
    p.add_argument("--warm", type=int, default=0, help="rediscovery on netns: search on warm clusters, afresh every K")
    args = p.parse_args(argv)
    if args.warm and args.guide == "wire":
        p.error("--warm with --guide wire: the wire-guided search taps fresh clusters only")
    if args.warm < 0:
        p.error("--warm must be at least 1 (0: a fresh cluster per schedule)")
    if args.warm and args.backend == "sim":
        p.error("--warm needs --backend netns: the simulator starts no cluster to keep")
    if args.confirm_runs is None:
        args.confirm_runs = 5 if args.backend == "sim" else 10
    with tempfile.TemporaryDirectory(prefix="chaosbed-bench-explore-") as tmp:
        if args.only in (None, "throughput"):
            print("== explore: simulated schedules per hour ==")
            throughput(args.seconds, args.jobs, Path(tmp))
        if args.only in (None, "rediscovery"):
            print(f"== explore: rediscovering the bug catalogue on {args.backend} (budget {args.budget_per_bug:g} s "
                  "per bug) ==")  # fmt: skip
            (rediscovery if args.backend == "sim" else real_rediscovery)(args, Path(tmp))


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t0:.0f} s)")

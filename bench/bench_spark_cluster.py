"""The checker on a Spark standalone cluster against local mode, on the same histories.

    .venv/bin/python -m bench.bench_spark_cluster [--events 10000000] [--workers 2] [--repeat 1]

Writes a matrix of 2 runs of 5 members (analysis/synth.py, one violation of each kind in the first run), starts a
standalone cluster of --workers workers of one core each (`chaosbed spark cluster start`, analysis/spark_cluster.py;
a cluster that already runs is used and left running), and checks the histories in a fresh process each way, the
cache removed first: `--master spark://...` (the executors parse the JSON lines with local mode's reader and write
the cache: analysis/spark_ingest.py) and `--spark local` (the driver parses them; an in-process session with
local[*]). Prints both wall times (median of --repeat) with the last check's Spark start, ingest and checks (local
mode starts Spark while it ingests), the cluster's over local's, and the violations each found (they must be the
same). On one machine the workers share its cores with
the driver: the ratio measures what a cluster costs here, not what more machines would gain.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from analysis import spark_cluster
from analysis.synth import write_matrix
from bench.bench_checker import INJECT, fresh_check


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000_000, help="events in the matrix's histories")
    ap.add_argument("--workers", type=int, default=2, help="workers of the standalone cluster (one core each)")
    ap.add_argument("--repeat", type=int, default=1, help="checks per figure (the median is shown)")
    ap.add_argument("--dir", type=Path, default=None, help="where to write the histories (default: the temp dir)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout` too: the cluster is stopped, the files removed
    root = Path(tempfile.mkdtemp(prefix="bench-cluster-", dir=args.dir))
    started = False
    try:
        t0 = time.perf_counter()
        truths = write_matrix(root, runs=2, events=args.events, members=5, inject=INJECT)
        events = sum(t.events for t in truths)
        size = sum(p.stat().st_size for p in root.glob("**/history/*.jsonl"))
        print(f"histories: {events:,} events, {size / 1e9:.2f} GB of JSON lines, written in "
              f"{time.perf_counter() - t0:.1f} s")  # fmt: skip
        t0 = time.perf_counter()
        info, started = spark_cluster.start(args.workers)
        how = f"started in {time.perf_counter() - t0:.1f} s" if started else "already running"
        print(f"cluster: {info.url}, {args.workers} workers x 1 core ({how})")
        walls: dict[str, float] = {}
        found: dict[str, Counter] = {}
        for name, target in (("cluster", info.url), ("local", "local")):
            runs = [fresh_check(root, target) for _ in range(args.repeat)]
            walls[name] = statistics.median(r["wall"] for r in runs)
            found[name] = Counter(runs[-1]["found"])
            last = runs[-1]
            print(f"{name:>8}: {walls[name]:.2f} s wall, {events / walls[name] / 1e3:,.0f}k events/s (Spark start "
                  f"{last['spark_start']:.2f} s, ingest {last['ingest']:.2f} s, checks {last['checks']:.2f} s)",
                  flush=True)  # fmt: skip
        print(f"cluster / local: {walls['cluster'] / walls['local']:.2f}x")
        expected = Counter(e.check for t in truths for e in t.expected)
        print(f"violations: injected {dict(expected)}; cluster {dict(found['cluster'])}; local {dict(found['local'])}")
        if found["cluster"] != found["local"]:
            raise SystemExit("the cluster and local mode found different violations")
    finally:
        if started:
            spark_cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

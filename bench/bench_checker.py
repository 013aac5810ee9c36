"""Checker speed: cold and warm Spark checks next to DuckDB and the plain-Python reference, on the same files.

    .venv/bin/python -m bench.bench_checker [--sizes small demo 1M 10M] [--repeat 3] [--keep]

Sizes (analysis/synth.py): small (~1k events) and demo (~34k, the size of `make demo`'s run) are one run of 4
members with one gap injected; 1M and 10M are a matrix of 2 runs of 5 members (unicast to every member plus
multicast) with one violation of each kind in the first run. Figures, each the median of --repeat runs:
  cold       a fresh process with no Spark service: in-process session start, ingest (JSON -> Parquet cache), checks
             (`chaosbed check --spark local`; shown for small and demo, it is a fixed cost)
  warm       a fresh process while the Spark service runs (analysis/spark_service.py): Connect client, ingest, checks
  re-check   the same on unchanged files (reads the Parquet cache only)
  duckdb     SQL over read_json: the per-message checks (phantoms, duplicates, FIFO, gaps, completeness); no
             incarnations or views, which these fault-free histories do not need (`pip install duckdb`)
  reference  analysis/reference.py, one pass of json.loads per line
The benchmark starts the service for the warm figures and stops it after (a service that already runs is used and
left running; cold figures are then skipped).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from analysis.cache import CACHE_DIR
from analysis.spark_config import CONNECT_ENV, TARGET_ENV
from analysis.synth import rounds_for, write_matrix, write_run

INJECT = ("gap", "reorder:multicast", "duplicate", "phantom:multicast", "missing")

ROOT = Path(__file__).resolve().parents[1]
# a fresh process: imports, Spark (an in-process session, or a Connect client of the service), ingest, checks
COLD = """
import collections, json, sys, time
t0 = time.perf_counter()
from analysis.pipeline import analyze
a = analyze(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
found = collections.Counter(v.check for r in a.results.values() for v in r.violations)
print(json.dumps(a.timings | {"wall": time.perf_counter() - t0, "found": found}))
"""


def duckdb_check(root: Path) -> Counter:
    """The per-message checks in DuckDB SQL over the JSON lines (same definitions, fault-free histories)."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads TO 2")
    files = [str(p) for p in sorted(root.glob("*/history/*.jsonl"))]
    cols = {
        "t": "BIGINT",
        "member": "VARCHAR",
        "event": "VARCHAR",
        "kind": "VARCHAR",
        "sender": "VARCHAR",
        "dest": "VARCHAR",
        "conn_id": "VARCHAR",
        "seqno": "BIGINT",
        "msg_id": "VARCHAR",
    }
    con.execute(
        "CREATE TEMP TABLE ev AS SELECT regexp_extract(filename, '^(.*)/history/[^/]*$', 1) AS run, "
        "t, member, event, kind, sender, dest, conn_id, seqno, msg_id FROM read_json(?, format='newline_delimited', "
        f"columns={cols!r}, filename=true, ignore_errors=true)",
        [files],
    )
    con.execute("CREATE TEMP TABLE sends AS SELECT * FROM ev WHERE event = 'send'")
    con.execute("""
        CREATE TEMP TABLE dels AS
        SELECT d.run, d.member, d.sender, d.msg_id, d.t, s.seqno AS sseq, s.kind AS skind,
               coalesce(s.conn_id, '') AS sconn,
               s.msg_id IS NULL OR s.kind <> d.kind OR (s.kind = 'unicast' AND s.dest <> d.member) AS phantom
        FROM (SELECT * FROM ev WHERE event = 'deliver') d
        LEFT JOIN sends s ON s.run = d.run AND s.msg_id = d.msg_id AND s.member = d.sender""")
    out: Counter = Counter()
    out["no_phantoms"] = con.execute(
        "SELECT count(*) FROM (SELECT DISTINCT run, member, sender, msg_id FROM dels WHERE phantom)"
    ).fetchone()[0]
    out["exactly_once"] = con.execute(
        "SELECT count(*) FROM (SELECT run, member, msg_id FROM dels WHERE NOT phantom GROUP BY ALL HAVING count(*) > 1)"
    ).fetchone()[0]
    con.execute("""
        CREATE TEMP TABLE firsts AS SELECT * FROM (
          SELECT *, row_number() OVER (PARTITION BY run, member, msg_id ORDER BY t) AS rn FROM dels WHERE NOT phantom)
        WHERE rn = 1""")
    reorders = con.execute("""
        SELECT count(*) FROM (
          SELECT sseq, max(sseq) OVER (PARTITION BY run, sender, member, skind, sconn ORDER BY t
                                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before FROM firsts)
        WHERE sseq <= before""").fetchone()[0]
    gaps, missing = con.execute("""
        WITH alive AS (SELECT run, member FROM ev GROUP BY run, member HAVING arg_max(event, t) = 'stop'),
        members AS (SELECT DISTINCT run, member FROM ev),
        smax AS (SELECT run, sender, member AS receiver, skind, sconn, max(sseq) AS mx FROM firsts GROUP BY ALL),
        owed AS (
          SELECT run, member AS sender, dest AS receiver, kind, coalesce(conn_id, '') AS conn, seqno, msg_id
          FROM sends WHERE kind = 'unicast'
          UNION ALL
          SELECT s.run, s.member, m.member, s.kind, '', s.seqno, s.msg_id
          FROM sends s JOIN members m ON m.run = s.run WHERE s.kind = 'multicast')
        SELECT count(*) FILTER (WHERE o.seqno < x.mx), count(*) FILTER (WHERE x.mx IS NULL OR o.seqno >= x.mx)
        FROM owed o
        JOIN alive a ON a.run = o.run AND a.member = o.receiver
        JOIN alive b ON b.run = o.run AND b.member = o.sender
        LEFT JOIN firsts f ON f.run = o.run AND f.msg_id = o.msg_id AND f.member = o.receiver
        LEFT JOIN smax x ON x.run = o.run AND x.sender = o.sender AND x.receiver = o.receiver AND x.skind = o.kind
                        AND x.sconn = o.conn
        WHERE f.msg_id IS NULL""").fetchone()
    out["fifo"] = reorders + gaps
    out["complete"] = missing
    return +out


def fresh_check(root: Path, target: str | None) -> dict:
    """One check in a fresh process (from the JSON lines: the cache is removed first): its timings and wall time."""
    shutil.rmtree(root / CACHE_DIR, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k not in (TARGET_ENV, *CONNECT_ENV)}
    args = [sys.executable, "-c", COLD, str(root)] + ([target] if target else [])
    out = subprocess.run(args, check=True, capture_output=True, text=True, env=env, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


@dataclass
class Data:
    name: str
    root: Path
    events: int
    expected: Counter
    cold: float | None = None
    cold_session: float | None = None
    warm: float | None = None
    warm_check: float | None = None
    warm_parts: dict[str, float] = field(default_factory=dict)  # ingest, checks (the Spark job and collect)
    cached: float | None = None
    duckdb: float | None = None
    reference: float | None = None
    found: dict[str, Counter] = field(default_factory=dict)


def generate(workdir: Path, name: str, events: int) -> Data:
    """A single run for the small and demo sizes; a matrix of 2 runs with one violation of each kind for the others."""
    root = Path(tempfile.mkdtemp(prefix=f"bench-{name}-", dir=workdir))
    t0 = time.perf_counter()
    if events < 100_000:
        truths = [write_run(root / "run", members=4, rounds=rounds_for(events, 4), inject=("gap",), seed=1)]
    else:
        truths = write_matrix(root, runs=2, events=events, members=5, inject=INJECT)
    n = sum(t.events for t in truths)
    size = sum(p.stat().st_size for p in root.glob("**/history/*.jsonl"))
    print(f"   {name}: {n:,} events, {size / 1e6:.1f} MB of JSON lines, written in {time.perf_counter() - t0:.1f} s")
    return Data(name, root, n, Counter(e.check for t in truths for e in t.expected))


def run_bench(sizes: dict[str, int], repeat: int, keep: bool, workdir: Path | None) -> list[Data]:
    from analysis import spark_service
    from analysis.reference import check_path

    print("== generating histories", flush=True)
    data = [generate(workdir, name, n) for name, n in sizes.items()]
    try:
        running = spark_service.status()
        if running is None:
            print("== cold: a fresh process, no Spark service (--spark local: an in-process session)", flush=True)
            for d in data:
                if d.events > 100_000:
                    continue  # the cold start is a fixed cost: shown on the small and demo sizes
                runs = [fresh_check(d.root, "local") for _ in range(repeat)]
                d.cold = statistics.median(r["wall"] for r in runs)
                d.cold_session = statistics.median(r["spark_start"] for r in runs)
        else:
            print(f"== cold skipped: a Spark service runs ({running.url}); stop it to measure cold checks")
        print("== starting the Spark service", flush=True)
        secs, info = timed(spark_service.start)
        print(f"   {info.url} ready in {secs:.1f} s (JVM start and a warm-up job)", flush=True)
        print("== warm: a fresh process, the service running", flush=True)
        for d in data:
            reps = repeat if d.events <= 2_000_000 else max(1, repeat - 1)
            runs = [fresh_check(d.root, None) for _ in range(reps)]
            d.warm = statistics.median(r["wall"] for r in runs)
            d.warm_check = statistics.median(r["total"] for r in runs)
            d.warm_parts = {k: statistics.median(r[k] for r in runs) for k in ("ingest", "spark_start", "checks")}
            d.found["spark"] = Counter(runs[-1]["found"])
            d.cached = statistics.median(fresh_cached(d.root) for _ in range(reps))
        if running is None:
            spark_service.stop()
        print("== DuckDB and the plain-Python reference", flush=True)
        for d in data:
            try:
                times = [timed(lambda d=d: duckdb_check(d.root)) for _ in range(repeat)]
                d.duckdb = statistics.median(t for t, _ in times)
                d.found["duckdb"] = times[-1][1]
            except ImportError:
                print("   (duckdb is not installed: pip install duckdb)")
            reps = repeat if d.events <= 2_000_000 else 1
            times = [timed(lambda d=d: check_path(d.root)) for _ in range(reps)]
            d.reference = statistics.median(t for t, _ in times)
            d.found["reference"] = Counter(v.check for r in times[-1][1].values() for v in r.violations)
    finally:
        if not keep:
            for d in data:
                shutil.rmtree(d.root, ignore_errors=True)
    return data


def fresh_cached(root: Path) -> float:
    """A fresh process re-checking unchanged files on the service (reads the Parquet cache only)."""
    env = {k: v for k, v in os.environ.items() if k not in (TARGET_ENV, *CONNECT_ENV)}
    out = subprocess.run([sys.executable, "-c", COLD, str(root)], check=True, capture_output=True, text=True,
                         env=env, cwd=ROOT).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])["wall"]


def show(data: list[Data]) -> None:
    def sec(x: float | None) -> str:
        return f"{x:.2f}" if x is not None else "-"

    def rate(n: int, x: float | None) -> str:
        return f"{n / x / 1e3:,.0f}k" if x else "-"

    print("\nseconds (median of repeated runs), events/s; cold and warm = a fresh process checking the JSON lines")
    head = ("size", "events", "cold", "warm", "warm ev/s", "re-check", "duckdb", "duck ev/s", "reference", "warm/duck")
    print("  ".join(f"{h:>10}" for h in head))
    for d in data:
        ratio = f"{d.warm / d.duckdb:.2f}x" if d.warm and d.duckdb else "-"
        cells = (d.name, f"{d.events:,}", sec(d.cold), sec(d.warm), rate(d.events, d.warm), sec(d.cached),
                 sec(d.duckdb), rate(d.events, d.duckdb), sec(d.reference), ratio)  # fmt: skip
        print("  ".join(f"{c:>10}" for c in cells))
    print("\nwhere the warm seconds go (in analyze; the Connect client starts while the JSON lines are parsed):")
    for d in data:
        if d.warm_parts:
            p = d.warm_parts
            print(f"  {d.name:>6}: ingest (JSON lines -> cache) {p['ingest']:.2f} s, client ready at "
                  f"{p['spark_start']:.2f} s, checks (one Spark job) {p['checks']:.2f} s")  # fmt: skip
    print("\nviolations found (injected / spark / duckdb / reference):")
    for d in data:
        parts = [d.expected, *(d.found.get(k, Counter()) for k in ("spark", "duckdb", "reference"))]
        print(
            f"  {d.name:>6}: " + " / ".join(", ".join(f"{k} {v}" for k, v in sorted(c.items())) or "-" for c in parts)
        )
    by = {d.name: d for d in data}
    print("\ntargets:")
    if "small" in by and by["small"].warm:
        s = by["small"]
        print(f"  warm small <= 2 s: {s.warm:.2f} s wall ({s.warm_check:.2f} s in analyze) -> "
              f"{'met' if s.warm <= 2 else 'NOT met'}")  # fmt: skip
        if s.cold:
            print(f"  cold small (today ~9 s): {s.cold:.2f} s (session ready after {s.cold_session:.1f} s)")
    big = max(data, key=lambda d: d.events)
    if big.warm and big.events >= 5_000_000:
        r = big.events / big.warm
        print(f"  warm {big.events:,}: {r / 1e3:,.0f}k events/s (>= 400k: {'met' if r >= 400_000 else 'NOT met'})"
              + (f", {big.warm / big.duckdb:.2f}x DuckDB (<= 1.0x: {'met' if big.warm <= big.duckdb else 'NOT met'})"
                 if big.duckdb else ""))  # fmt: skip


SIZES = {"small": 1_000, "demo": 34_000, "1M": 1_000_000, "10M": 10_000_000}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES), help="which sizes to run")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (the median is shown)")
    ap.add_argument("--keep", action="store_true", help="keep the generated histories")
    ap.add_argument("--dir", type=Path, default=None, help="where to write them (default: the temp dir)")
    args = ap.parse_args()
    show(run_bench({k: SIZES[k] for k in args.sizes}, args.repeat, args.keep, args.dir))


if __name__ == "__main__":
    main()

"""Checker speed: the Spark checker next to a plain-Python single pass and DuckDB, on the same history files.

    .venv/bin/python bench/bench_checker.py [--events 1000000 [10000000 ...]] [--repeat 2] [--keep]

For each size it writes a synthetic matrix (analysis/synth.py: 5 members, unicast to every member plus multicast,
2 runs, one violation of each kind injected into the first run) as JSON lines, then times:
  spark cold      a fresh process: session start, ingest (JSON -> Parquet cache), first check job
  spark warm      the same, with the session and its Python workers already up (cache removed before each run)
  spark cached    re-check of unchanged files: reads the Parquet cache only
  python          analysis/reference.py, one pass of json.loads per line
  duckdb          SQL over read_json: the per-message checks (phantoms, duplicates, FIFO, gaps, completeness);
                  no incarnations or views, which these fault-free histories do not need
Each warm figure is the best of --repeat runs (the machine is noisy). Needs `duckdb` (`pip install duckdb`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from analysis.ingest import CACHE_DIR
from analysis.synth import write_matrix

INJECT = ("gap", "reorder:multicast", "duplicate", "phantom:multicast", "missing")

COLD = """
import json, sys, time
t0 = time.perf_counter()
from analysis.pipeline import analyze
a = analyze(sys.argv[1])
print(json.dumps(a.timings | {"wall": time.perf_counter() - t0}))
"""


def best(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def spark_counts(analysis: object) -> Counter:
    return Counter(v.check for r in analysis.results.values() for v in r.violations)


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


def bench(events: int, repeat: int, keep: bool, workdir: Path | None) -> list[tuple[str, float, Counter | None]]:
    from analysis.pipeline import analyze
    from analysis.reference import check_path

    root = Path(tempfile.mkdtemp(prefix=f"bench-{events}-", dir=workdir))
    print(f"\n== {events:,} events: generating {root} ...", flush=True)
    t0 = time.perf_counter()
    truths = write_matrix(root, runs=2, events=events, members=5, inject=INJECT)
    n = sum(t.events for t in truths)
    size = sum(p.stat().st_size for p in root.glob("*/history/*.jsonl"))
    print(
        f"   {n:,} events, {size / 1e6:.0f} MB of JSON lines, written in {time.perf_counter() - t0:.1f} s", flush=True
    )
    rows: list[tuple[str, float, Counter | None]] = []
    try:
        cold = json.loads(
            subprocess.run([sys.executable, "-c", COLD, str(root)], check=True, capture_output=True, text=True)
            .stdout.strip()
            .splitlines()[-1]
        )
        rows.append(("spark cold: session ready (during ingest)", cold["spark_start"], None))
        rows.append(("spark cold: whole check (fresh process)", cold["wall"], None))

        def fresh() -> object:
            shutil.rmtree(root / CACHE_DIR, ignore_errors=True)
            return analyze(root)

        analyze(root)  # the session and its Python workers come up here
        secs, res = best(fresh, repeat)
        rows.append(("spark warm: check from JSON lines", secs, spark_counts(res)))
        secs, res = best(lambda: analyze(root), repeat)
        rows.append(("spark warm: re-check from Parquet cache", secs, spark_counts(res)))
        secs, ref = best(lambda: check_path(root), 1 if events > 2_000_000 else repeat)
        rows.append(
            ("python reference, single pass", secs, Counter(v.check for r in ref.values() for v in r.violations))
        )
        try:
            secs, counts = best(lambda: duckdb_check(root), repeat)
            rows.append(("duckdb", secs, counts))
        except ImportError:
            print("   (duckdb is not installed: pip install duckdb)")
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    duck = next((s for name, s, _ in rows if name == "duckdb"), None)
    print(f"   {'engine':42} {'seconds':>8} {'events/s':>10} {'x DuckDB':>9}  violations found")
    for name, secs, counts in rows:
        whole = "session" not in name  # the session start is a part, not a check
        ratio = f"{secs / duck:8.2f}x" if duck and whole else ""
        rate = f"{n / secs:10,.0f}" if whole else ""
        found = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) if counts is not None else ""
        print(f"   {name:42} {secs:8.2f} {rate:>10} {ratio:>9}  {found}")
    expected = Counter(e.check for t in truths for e in t.expected)
    print(f"   injected: {', '.join(f'{k} {v}' for k, v in sorted(expected.items()))}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, nargs="+", default=[1_000_000], help="total events per matrix")
    ap.add_argument("--repeat", type=int, default=2, help="warm runs per figure (the best is shown)")
    ap.add_argument("--keep", action="store_true", help="keep the generated histories")
    ap.add_argument("--dir", type=Path, default=None, help="where to write them (default: the temp dir)")
    args = ap.parse_args()
    for events in args.events:
        bench(events, args.repeat, args.keep, args.dir)


if __name__ == "__main__":
    main()

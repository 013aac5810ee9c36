"""Helpers shared by the analysis tests."""

from __future__ import annotations

from pathlib import Path


def violation_keys(violations: list) -> list[tuple]:
    """What identifies a violation, for comparing checkers and injections (conn ids as text)."""
    keys = [
        (v.check, v.sender, v.receiver, None if v.conn_id is None else str(v.conn_id), v.seqno, v.msg_id)
        for v in violations
    ]
    return sorted(keys, key=repr)


def expected_keys(truth: object) -> list[tuple]:
    return sorted(((e.check, e.sender, e.receiver, e.conn_id, e.seqno, e.msg_id) for e in truth.expected), key=repr)


def write_lines(path: Path, lines: list[str], newline_at_end: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + ("\n" if newline_at_end else ""))


def cut_line_at_kill(run: Path) -> None:
    """Puts a cut-off line into the killed member's history where it was killed (its first faults.jsonl kill): the
    end of an earlier incarnation, which the checker skips."""
    import json

    kill = next(f for f in map(json.loads, (run / "faults.jsonl").read_text().splitlines()) if f["kind"] == "kill")
    path = run / "history" / f"{kill['member']}.jsonl"
    lines = path.read_text().splitlines()
    at = sum(1 for line in lines if json.loads(line)["t"] <= kill["t"])
    lines.insert(at, f'{{"t":{kill["t"]},"member":"{kill["member"]}","event":"se')
    path.write_text("\n".join(lines) + "\n")


def cache_snapshot(root: Path) -> tuple[dict, dict[str, tuple]]:
    """What an ingest of `root` left in its cache: summary.json (without the reader that wrote it) and every part
    file's schema and rows, by path."""
    import json

    import pyarrow.parquet as pq

    from analysis.cache import CACHE_DIR

    cache = root / CACHE_DIR
    summary = json.loads((cache / "summary.json").read_text())
    del summary["fingerprint"]["reader"]
    parts = {}
    for f in sorted((cache / "groups").rglob("*.parquet")):
        tbl = pq.read_table(f)
        parts[f.relative_to(cache).as_posix()] = (tbl.schema, tbl.to_pylist())
    return summary, parts

"""History JSON lines in, a Parquet cache out: one file per (run, sender) group, plus a small summary.

The cache is laid out for the checks: every event goes to the group of its sender — a `deliver` to the group named
by its `sender` field, any other event to its own member's — so the check of a group reads one file and needs no
shuffle (this *is* the one shuffle of the pipeline, done while the lines are parsed). Re-analysis of unchanged files
reads only the cache (`<checked folder>/.chaosbed-cache`).

Local mode parses each file with DuckDB's JSON reader on every core (`read_json` with the history schema; measured
on 1M-line files: 1.2 CPU seconds per file, against 1.4-2.7 s for pyarrow's JSON reader, itself about 5x faster than
Spark's JSON source, which pays Jackson plus a row conversion per line), while a second thread splits the previous
file by group and writes its part files. Runs under DUCKDB_MIN_BYTES, and installations without DuckDB, use
pyarrow's reader, two files at a time. Both give the same table: `t` must be a JSON integer and `member` and `event`
JSON strings, or the file is read line by line (`_slow_parse`), which keeps the valid lines and reports the others.
With a cluster master, Spark reads the JSON and shuffles by group (`spark_ingest.py`) into the same layout
(`cache.py`).

The summary holds per member and event the count, first/last time and last position, the `view` events, the lines
that could not be parsed (with their neighbours' times, so a cut-off line can be told apart from damage), and the
manifest of group files.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from analysis.cache import (
    PARQUET_OPTIONS,
    BadLine,
    Group,
    Ingested,
    RunSummary,
    cache_root,
    fingerprint,
    group_dir_name,
    group_key,
    read_summary,
    write_summary,
)
from analysis.config import InputError
from analysis.schema import EVENTS_ARROW, HISTORY_FIELDS, REQUIRED, RunFolder

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# below this many bytes of JSON lines pyarrow's reader parses: DuckDB's import (~0.1 s) would cost a small run more
# than its faster parsing saves
DUCKDB_MIN_BYTES = 16 << 20


def _conform(tbl: pa.Table) -> pa.Table:
    """Casts what pyarrow inferred to the history schema; missing fields become null columns."""
    cols = []
    for name, typ in HISTORY_FIELDS:
        if name in tbl.column_names:
            col = tbl[name]
            if col.type != typ:
                if pa.types.is_struct(col.type) or (pa.types.is_list(col.type) != pa.types.is_list(typ)):
                    raise pa.ArrowInvalid(f"field {name} has type {col.type}")
                col = pc.cast(col, typ)
            cols.append(col)
        else:
            cols.append(pa.nulls(tbl.num_rows, typ))
    return pa.Table.from_arrays(cols, schema=pa.schema(HISTORY_FIELDS))


def _valid(obj: object) -> bool:
    if not isinstance(obj, dict):
        return False
    t = obj.get("t")
    return isinstance(t, int) and not isinstance(t, bool) and all(isinstance(obj.get(k), str) for k in REQUIRED[1:])


def _coerce(obj: dict) -> dict[str, object]:
    """A valid event's fields as the history schema types them (a wrong JSON type becomes null, ids become text)."""
    out: dict[str, object] = {}
    for name, typ in HISTORY_FIELDS:
        v = obj.get(name)
        if v is None:
            out[name] = None
        elif typ == pa.string():
            out[name] = v if isinstance(v, str) else json.dumps(v)
        elif typ == pa.int64():
            out[name] = v if isinstance(v, int) and not isinstance(v, bool) else None
        elif typ == pa.bool_():
            out[name] = bool(v)
        else:
            out[name] = [str(x) for x in v] if isinstance(v, list) else None
    return out


def _slow_parse(data: bytes, run: str, rel: str, member: str) -> tuple[pa.Table, list[BadLine]]:
    """Line by line: keeps valid events, records the others with their neighbours' times."""
    rows: list[dict] = []
    bad: list[BadLine] = []
    lines = data.split(b"\n")
    while lines and not lines[-1].strip():
        lines.pop()
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            obj = None
        if _valid(obj):
            rows.append(_coerce(obj))
            for b in reversed(bad):
                if b.next_t is not None:
                    break
                b.next_t = obj["t"]
        else:
            prev_t = rows[-1]["t"] if rows else None
            text = raw[:120].decode("utf-8", "replace")
            bad.append(BadLine(run, rel, i + 1, text, member, i == len(lines) - 1, prev_t))
    return pa.Table.from_pylist(rows, schema=pa.schema(HISTORY_FIELDS)), bad


_DUCK_TYPES = {pa.int64(): "BIGINT", pa.string(): "VARCHAR", pa.bool_(): "BOOLEAN", pa.list_(pa.string()): "VARCHAR[]"}


def _duckdb_query() -> str:
    """read_json of one file with the history schema. The required fields are read as JSON and kept only when they
    have the right JSON type (DuckDB would turn "t": "5", 1.5 or true into a number): a null there sends the file to
    the careful reader, as pyarrow's type errors do."""
    cols = {name: "JSON" if name in REQUIRED else _DUCK_TYPES[typ] for name, typ in HISTORY_FIELDS}
    exprs = [
        "CASE WHEN json_type(t) IN ('BIGINT', 'UBIGINT') THEN t::BIGINT END AS t"
        if name == "t"
        else f"CASE WHEN json_type({name}) = 'VARCHAR' THEN {name}->>'$' END AS {name}"
        if name in REQUIRED
        else name
        for name, _ in HISTORY_FIELDS
    ]
    return f"SELECT {', '.join(exprs)} FROM read_json($path, format='newline_delimited', columns={cols!r})"


class JsonReader:
    """Parses whole history files into tables of the history schema (None: the file needs the careful reader).
    DuckDB when installed (one connection, all cores, one file at a time), else pyarrow (one core per file)."""

    def __init__(self, use_duckdb: bool = True) -> None:
        self.con = None
        if use_duckdb:
            try:  # the analysis extra installs it; pyarrow's reader when it is missing
                import duckdb
            except ImportError:  # pragma: no cover - depends on the installation
                return
            self.error = duckdb.Error
            self.con = duckdb.connect(config={"threads": os.cpu_count() or 1})
            self.query = _duckdb_query()

    @property
    def parallel_files(self) -> bool:
        """Whether callers should parse several files at once (pyarrow's reader uses one core per file)."""
        return self.con is None

    def read(self, path: Path, data: bytes | None) -> pa.Table | None:
        if self.con is not None:
            try:
                tbl = self.con.sql(self.query, params={"path": str(path)}).to_arrow_table()
            except self.error:
                return None
            return tbl.cast(pa.schema(HISTORY_FIELDS))  # DuckDB names list items "l"
        data = path.read_bytes() if data is None else data
        body = data if data.endswith(b"\n") else data + b"\n"
        opts = pj.ReadOptions(block_size=1 << 20, use_threads=False)  # files are read in parallel instead
        try:
            return _conform(pj.read_json(io.BytesIO(body), read_options=opts))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None

    def close(self) -> None:
        if self.con is not None:
            self.con.close()


def read_history_file(
    path: Path, run: str, rel: str, reader: JsonReader | None = None
) -> tuple[pa.Table, list[BadLine]]:
    """One history file as a table in file order (with `run` and `pos`) and its unparseable lines."""
    own = reader is None
    reader = reader or JsonReader()
    try:
        # pyarrow parses bytes; DuckDB reads the file itself (a file of blank lines gives it no row, as it should)
        data = path.read_bytes() if reader.parallel_files else None
        bad: list[BadLine] = []
        if (data is not None and not data.strip()) or (data is None and path.stat().st_size == 0):
            tbl = pa.Table.from_pylist([], schema=pa.schema(HISTORY_FIELDS))
        else:
            tbl = reader.read(path, data)
            if tbl is None or any(tbl[k].null_count for k in REQUIRED):  # a cut-off line, damage or mixed types
                tbl, bad = _slow_parse(path.read_bytes() if data is None else data, run, rel, path.stem)
    finally:
        if own:
            reader.close()
    n = tbl.num_rows
    tbl = tbl.add_column(0, "run", pa.repeat(pa.scalar(run, pa.string()), n))
    tbl = tbl.append_column("pos", pa.array(np.arange(n, dtype=np.int64)))
    return tbl.cast(EVENTS_ARROW), bad


def check_readable(runs: list[RunFolder], root: Path) -> None:
    """Raises InputError when there is nothing to check (no run folder, or a run without history files)."""
    if not runs:
        raise InputError(f"{root}: no run folder here (expected history/<member>.jsonl in it or in its subfolders)")
    for run in runs:
        if not run.history_files:
            raise InputError(f"{run.path / 'history'}: no <member>.jsonl history files")


def ingest(runs: list[RunFolder], root: Path, *, reader: str = "arrow", spark: SparkSession | None = None) -> Ingested:
    """Parses every history file of `runs` once into the cache (reused while the files are unchanged);
    `reader` is "arrow" (local) or "spark" (any master; needs `spark`)."""
    check_readable(runs, root)
    cache = cache_root(root)
    stamp = fingerprint(runs, reader)
    summary_file = cache / "summary.json"
    cached = read_summary(summary_file, stamp)
    if cached is not None:
        return Ingested(cache, cached[0], cached[1], True)
    summary_file.unlink(missing_ok=True)
    groups_dir = cache / "groups"
    if groups_dir.exists():
        shutil.rmtree(groups_dir)
    groups_dir.mkdir(parents=True)
    if reader == "spark":
        from analysis.spark_ingest import ingest_with_spark

        if spark is None:
            raise ValueError("ingest(reader='spark') needs a Spark session")
        summaries, groups = ingest_with_spark(spark, runs, groups_dir)
    else:
        summaries, groups = _ingest_arrow(runs, groups_dir)
    for run in runs:
        if summaries[run.name].events == 0:
            raise InputError(f"{run.path / 'history'}: no readable event in any history file")
    write_summary(summary_file, stamp, summaries, groups)
    return Ingested(cache, summaries, groups, False)


def split_groups(tbl: pa.Table) -> list[tuple[str | None, pa.Table]]:
    """A file's events (with `key`) by group, each in file order: one stable sort by group and zero-copy slices
    (one pass, where a filter per group scans the whole table once per group)."""
    enc = pc.dictionary_encode(tbl["key"].combine_chunks())
    codes = _codes_of(enc)
    keys: list[str | None] = [*enc.dictionary.to_pylist(), None]  # code -1 (a null key) sorts last
    counts = np.bincount(codes + 1, minlength=len(keys) + 1)  # [nulls, code 0, code 1, ...]
    if np.count_nonzero(counts) == 1:
        return [(keys[int(np.flatnonzero(counts)[0]) - 1], tbl)]
    order = np.argsort(np.where(codes < 0, len(keys), codes), kind="stable")
    sorted_tbl = tbl.take(pa.array(order))
    out, start = [], 0
    for code in [*range(len(keys) - 1), -1]:
        n = int(counts[code + 1])
        if n:
            out.append((keys[code], sorted_tbl.slice(start, n)))
            start += n
    return out


def _codes_of(enc: pa.DictionaryArray) -> np.ndarray:
    return np.asarray(pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False), np.int64)


class _FileWritten(NamedTuple):
    """One history file, split into its groups' part files: what the run's summary needs of it."""

    run: RunFolder
    rel: str  # its path in the run folder
    summary_columns: pa.Table
    bad: list[BadLine]
    rows: dict[str | None, int]  # group key -> rows written


def _ingest_arrow(runs: list[RunFolder], groups_dir: Path) -> tuple[dict[str, RunSummary], list[Group]]:
    """Parses every file (DuckDB: one file at a time on all cores, while another thread splits and writes the
    previous one; pyarrow: two files at a time) and writes one part file per group of each file; a group is the
    folder of its parts."""
    summaries = {run.name: RunSummary() for run in runs}
    jobs = [(run, f, k) for run in runs for k, f in enumerate(run.history_files)]
    reader = JsonReader(use_duckdb=sum(f.stat().st_size for _, f, _ in jobs) >= DUCKDB_MIN_BYTES)

    def parse(job: tuple[RunFolder, Path, int]) -> tuple[pa.Table, list[BadLine]]:
        run, f, _ = job
        return read_history_file(f, run.name, f.relative_to(run.path).as_posix(), reader)

    def write(job: tuple[RunFolder, Path, int], parsed: tuple[pa.Table, list[BadLine]] | None) -> _FileWritten:
        run, f, k = job
        tbl, bad = parsed or parse(job)
        tbl = tbl.append_column("key", group_key(tbl))
        rows: dict[str | None, int] = {}
        for key, part in split_groups(tbl) if tbl.num_rows else []:
            folder = groups_dir / group_dir_name(run.name, key)
            folder.mkdir(exist_ok=True)
            pq.write_table(part, folder / f"part-{k:05d}.parquet", **PARQUET_OPTIONS)
            rows[key] = part.num_rows
        summary_cols = ["member", "event", "t", "pos", "view_id", "members", "merge"]
        return _FileWritten(run, f.relative_to(run.path).as_posix(), tbl.select(summary_cols), bad, rows)

    groups: dict[tuple[str, str | None], Group] = {}

    def add(result: _FileWritten) -> None:
        run, rel, tbl, bad, rows = result
        s = summaries[run.name]
        s.bad_lines.extend(bad)
        if tbl.num_rows == 0:
            s.empty_files.append(rel)
        s.add_table(tbl)
        for key, n in rows.items():
            g = groups.setdefault((run.name, key), Group(run.name, key, f"groups/{group_dir_name(run.name, key)}", 0))
            g.rows += n

    try:
        with ThreadPoolExecutor(min(2, os.cpu_count() or 1)) as pool:  # pyarrow works without holding the GIL
            pending: deque[Future[_FileWritten]] = deque()
            for job in jobs:
                parsed = None if reader.parallel_files else parse(job)  # DuckDB parses here, on every core
                pending.append(pool.submit(write, job, parsed))
                while len(pending) > 2:  # at most two parsed files wait for their writer
                    add(pending.popleft().result())
            while pending:
                add(pending.popleft().result())
    finally:
        reader.close()
    return summaries, list(groups.values())

"""One history file in, its groups' part files out: the reading that local and cluster ingest share.

`read_history_file` parses a file with DuckDB's JSON reader (`read_json` with the history schema) when DuckDB is
installed and the input is large enough to pay for its import, else with pyarrow's; both give the same table: `t`
must be a JSON integer and `member` and `event` JSON strings, or the file is read line by line (`_slow_parse`), which
keeps the valid lines and reports the others (file, line number, text, and the neighbours' times, so a cut-off line
can be told apart from damage). `ingest_file` then splits the file's events by group (a `deliver` goes to the group
named by its `sender`, any other event to its own member's) and writes one part file per group, and returns what the
run's summary needs of the file (`FileIngested`); `merge_files` adds those up in file order.

Local mode (`ingest.py`) runs these in the driver; with a cluster master (`spark_ingest.py`) the executors run them,
one file per task, and send back only each file's summary: both modes write the same cache (`cache.py`).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from analysis.cache import PARQUET_OPTIONS, BadLine, Group, RunSummary, group_dir_name, group_key, summary_from_doc
from analysis.schema import EVENTS_ARROW, HISTORY_FIELDS, REQUIRED, RunFolder

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
    DuckDB when installed (one connection, `threads` cores (default: all), one file at a time), else pyarrow (one
    core per file)."""

    def __init__(self, use_duckdb: bool = True, threads: int | None = None) -> None:
        self.con = None
        if use_duckdb:
            try:  # the analysis extra installs it; pyarrow's reader when it is missing
                import duckdb
            except ImportError:  # pragma: no cover - depends on the installation
                return
            self.error = duckdb.Error
            self.con = duckdb.connect(config={"threads": threads or os.cpu_count() or 1})
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


class FileJob(NamedTuple):
    """One history file to ingest: its run, its path in the run folder, its index there (which names its part files:
    `part-<k>.parquet` in each of its groups' folders) and where it is."""

    run: str
    rel: str
    k: int
    path: Path


def file_jobs(runs: list[RunFolder]) -> list[FileJob]:
    """Every history file of `runs`, in the order their summaries are added up."""
    return [
        FileJob(run.name, f.relative_to(run.path).as_posix(), k, f)
        for run in runs
        for k, f in enumerate(run.history_files)
    ]


def wants_duckdb(jobs: list[FileJob]) -> bool:
    """Whether to parse with DuckDB: below DUCKDB_MIN_BYTES of JSON lines in all, its import costs more than it
    saves (the same choice wherever the files are read, so both modes use the same reader for an input)."""
    return sum(job.path.stat().st_size for job in jobs) >= DUCKDB_MIN_BYTES


@dataclass
class FileIngested:
    """One history file, written to its groups' part files: what its run's summary needs of it."""

    run: str
    summary: RunSummary  # the file's own: counters, views, unparseable lines (and the file, if it had no event)
    rows: list[tuple[str | None, int]]  # the groups it wrote a part file to, and the rows of each

    def to_json(self) -> str:
        return json.dumps({"run": self.run, "summary": asdict(self.summary), "rows": self.rows})

    @classmethod
    def from_json(cls, text: str) -> FileIngested:
        doc = json.loads(text)
        return cls(doc["run"], summary_from_doc(doc["summary"]), [(key, n) for key, n in doc["rows"]])


def write_groups(job: FileJob, tbl: pa.Table, bad: list[BadLine], groups_dir: Path) -> FileIngested:
    """Splits a parsed file (read_history_file) by group and writes one part file per group."""
    tbl = tbl.append_column("key", group_key(tbl))
    rows: list[tuple[str | None, int]] = []
    for key, part in split_groups(tbl) if tbl.num_rows else []:
        folder = groups_dir / group_dir_name(job.run, key)
        folder.mkdir(exist_ok=True)
        pq.write_table(part, folder / f"part-{job.k:05d}.parquet", **PARQUET_OPTIONS)
        rows.append((key, part.num_rows))
    summary = RunSummary(bad_lines=bad, empty_files=[] if tbl.num_rows else [job.rel])
    summary.add_table(tbl)
    return FileIngested(job.run, summary, rows)


def ingest_file(job: FileJob, groups_dir: Path, reader: JsonReader) -> FileIngested:
    """Parses one history file and writes its groups' part files."""
    tbl, bad = read_history_file(job.path, job.run, job.rel, reader)
    return write_groups(job, tbl, bad, groups_dir)


def merge_files(runs: list[RunFolder], files: Iterable[FileIngested]) -> tuple[dict[str, RunSummary], list[Group]]:
    """The runs' summaries and the manifest of groups, from their files' (in file_jobs order: the summary's lists
    and the groups' order are the same however the files were read); a group is the folder of its parts."""
    summaries = {run.name: RunSummary() for run in runs}
    groups: dict[tuple[str, str | None], Group] = {}
    for done in files:
        summaries[done.run].merge(done.summary)
        for key, n in done.rows:
            g = groups.setdefault((done.run, key), Group(done.run, key, f"groups/{group_dir_name(done.run, key)}", 0))
            g.rows += n
    return summaries, list(groups.values())

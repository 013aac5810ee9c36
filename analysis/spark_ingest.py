"""Ingest with Spark's JSON source, for cluster masters: the same cache layout and summary as `ingest.py`.

One scan of the JSON lines and one shuffle by (run, sender group); each task writes the part files of the groups it
holds and returns counters, views and unparseable lines. With a cluster master the checked folder must be on storage
every executor sees (as for any Spark input).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from analysis.cache import GROUP_ARROW, BadLine, Group, RunSummary, group_dir_name
from analysis.schema import RunFolder, history_spark_schema
from analysis.spark import default_parallelism

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CORRUPT = "_corrupt"
OUT = pa.schema(
    [
        ("rtype", pa.string()),
        ("run", pa.string()),
        ("key", pa.string()),
        ("member", pa.string()),
        ("event", pa.string()),
        ("n", pa.int64()),
        ("tmin", pa.int64()),
        ("tmax", pa.int64()),
        ("pos", pa.int64()),
        ("text", pa.string()),
        ("view_id", pa.string()),
        ("members", pa.list_(pa.string())),
        ("merge", pa.bool_()),
    ]
)


TaskFunction = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]
GroupId = tuple[str, str | None]  # (run, key)


class _TaskRows:
    """What a task returns to the driver (OUT): counters, views, unparseable lines and the groups it wrote."""

    def __init__(self) -> None:
        self.columns: dict[str, list[object]] = {f.name: [] for f in OUT}

    def emit(self, **kw: object) -> None:
        for name, col in self.columns.items():
            col.append(kw.get(name))

    def bad_lines(self, bad: pa.Table) -> None:
        for r in bad.select(["run", "_file", "pos", CORRUPT]).to_pylist():
            text = (r[CORRUPT] or "an event without t, member or event")[:120]
            self.emit(rtype="bad", run=r["run"], member=Path(r["_file"]).stem, pos=r["pos"], text=text, key=r["_file"])

    def views(self, good: pa.Table) -> None:
        for r in good.filter(pc.equal(good["event"], "view")).to_pylist():
            self.emit(rtype="view", run=r["run"], member=r["member"], tmin=r["t"], pos=r["pos"],
                      view_id=r["view_id"], members=r["members"] or [], merge=bool(r["merge"]))  # fmt: skip

    def table(self) -> pa.Table:
        return pa.table(self.columns, schema=OUT)


def _add_counts(counts: dict[tuple[str, str, str], list[int]], good: pa.Table) -> None:
    """Adds a batch's events to the per (run, member, event) count, first and last time and last position."""
    agg = good.group_by(["run", "member", "event"]).aggregate(
        [("t", "count"), ("t", "min"), ("t", "max"), ("pos", "max")]
    )
    for r in agg.to_pylist():
        k = (r["run"], r["member"], r["event"])
        old = counts.get(k)
        new = [r["t_count"], r["t_min"], r["t_max"], r["pos_max"]]
        counts[k] = new if old is None else [old[0] + new[0], min(old[1], new[1]), max(old[2], new[2]),
                                             max(old[3], new[3])]  # fmt: skip


class _PartWriter:
    """Writes a sorted partition's events to part files: one per group, as its (run, key) segments arrive."""

    def __init__(self, groups_dir: Path, rows: _TaskRows) -> None:
        self.groups_dir, self.rows = groups_dir, rows
        self.current: GroupId | None = None
        self.writer: pq.ParquetWriter | None = None
        self.written = 0

    def write(self, group: GroupId, part: pa.Table) -> None:
        writer = self.writer
        if group != self.current or writer is None:
            self.close()
            folder = self.groups_dir / group_dir_name(*group)
            folder.mkdir(parents=True, exist_ok=True)
            writer = self.writer = pq.ParquetWriter(folder / f"part-{uuid.uuid4().hex}.parquet", GROUP_ARROW)
            self.current, self.written = group, 0
        writer.write_table(part)
        self.written += part.num_rows

    def write_segments(self, good: pa.Table) -> None:
        """The contiguous (run, key) segments of a batch of the sorted partition."""
        keys = good.select(["run", "key"]).to_pylist()
        start = 0
        for i in range(1, len(keys) + 1):
            if i < len(keys) and keys[i] == keys[start]:
                continue
            self.write((keys[start]["run"], keys[start]["key"]), good.slice(start, i - start))
            start = i

    def close(self) -> None:
        """Ends the current group's part file and reports it."""
        if self.writer is not None and self.current is not None:
            self.writer.close()
            self.rows.emit(rtype="group", run=self.current[0], key=self.current[1], n=self.written)
        self.writer = None


def _writer(groups_dir: str) -> TaskFunction:
    """The task function: writes each (run, key) segment of its sorted partition to a part file of the group."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = _TaskRows()
        parts = _PartWriter(Path(groups_dir), rows)
        counts: dict[tuple[str, str, str], list[int]] = {}
        for batch in batches:
            tbl = pa.Table.from_batches([batch])
            rows.bad_lines(tbl.filter(tbl["_bad"]))
            good = tbl.filter(pc.invert(tbl["_bad"])).drop_columns(["_bad", "_file", CORRUPT])
            if not good.num_rows:
                continue
            rows.views(good)
            _add_counts(counts, good)
            parts.write_segments(good.select(GROUP_ARROW.names).cast(GROUP_ARROW))
        parts.close()
        for (run, member, event), (n, tmin, tmax, pos) in counts.items():
            rows.emit(rtype="count", run=run, member=member, event=event, n=n, tmin=tmin, tmax=tmax, pos=pos)
        yield from rows.table().to_batches()

    return write


def ingest_with_spark(
    spark: SparkSession, runs: list[RunFolder], groups_dir: Path
) -> tuple[dict[str, RunSummary], list[Group]]:
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    # the server's and the executors' working folders are not ours: every path they get is absolute (a relative
    # groups folder had the executors of a standalone cluster write the cache into their own work/ folders)
    files = [str(f.absolute()) for run in runs for f in run.history_files]
    groups_dir = groups_dir.absolute()
    mapping = []
    for run in runs:
        for spelling in {str(run.path.resolve()), run.path.resolve().as_uri()}:
            mapping += [F.lit(spelling), F.lit(run.name)]
    df = (
        spark.read.schema(history_spark_schema(CORRUPT))
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(files)
    )
    path = F.col("_metadata.file_path")
    folder = F.regexp_extract(path, r"^(.*)/history/[^/]*$", 1)
    local = F.url_decode(F.regexp_replace(F.regexp_replace(folder, r"^file:(//)?", ""), r"\+", "%2B"))
    bad = F.col(CORRUPT).isNotNull() | F.col("t").isNull() | F.col("member").isNull() | F.col("event").isNull()
    key = F.when(bad, F.lit(None)).when(F.col("event") == "deliver", F.col("sender")).otherwise(F.col("member"))
    df = df.select(
        F.element_at(F.create_map(*mapping), local).alias("run"),
        "*",
        F.monotonically_increasing_id().alias("pos"),
        key.alias("key"),
        bad.alias("_bad"),
        F.regexp_extract(path, r"([^/]*/[^/]*)$", 1).alias("_file"),
    )
    out = (
        df.repartition(max(2, default_parallelism(spark)), "run", "key")
        .sortWithinPartitions("run", "key", "pos")
        .mapInArrow(_writer(str(groups_dir)), from_arrow_schema(OUT))
        .toArrow()
    )
    summaries = {run.name: RunSummary() for run in runs}
    groups: dict[tuple, Group] = {}
    bad_rows = []
    for r in out.to_pylist():
        s = summaries[r["run"]]
        if r["rtype"] == "count":
            s.add_counts(r["member"], r["event"], r["n"], r["tmin"], r["tmax"], r["pos"])
            s.events += r["n"]
        elif r["rtype"] == "view":
            s.views.append((r["member"], r["tmin"], r["pos"], r["view_id"], r["members"], r["merge"]))
        elif r["rtype"] == "group":
            g = groups.setdefault((r["run"], r["key"]), Group(r["run"], r["key"], "", 0))
            g.path = f"groups/{group_dir_name(r['run'], r['key'])}"
            g.rows += r["n"]
        elif r["rtype"] == "bad":
            bad_rows.append(r)
    for r in bad_rows:
        s = summaries[r["run"]]
        last_pos = max((v[3] for v in s.members.get(r["member"], {}).values()), default=-1)
        b = BadLine(r["run"], r["key"], None, r["text"], r["member"], r["pos"] > last_pos)
        if not b.last:
            b.prev_t, b.next_t = _neighbour_times(spark, groups_dir, r["run"], r["member"], r["pos"])
        s.bad_lines.append(b)
    return summaries, list(groups.values())


def _neighbour_times(
    spark: SparkSession, groups_dir: Path, run: str, member: str, pos: int
) -> tuple[int | None, int | None]:
    """Times of the member's events just before and after a damaged line (rare: one small query each)."""
    from pyspark.sql import functions as F

    ev = spark.read.option("recursiveFileLookup", "true").parquet(str(groups_dir))
    ev = ev.filter((F.col("run") == run) & (F.col("member") == member))
    row = ev.agg(
        F.max(F.when(F.col("pos") < pos, F.col("t"))).alias("prev"),
        F.min(F.when(F.col("pos") > pos, F.col("t"))).alias("next"),
    ).first()
    return (None, None) if row is None else (row["prev"], row["next"])

"""Ingest on the executors of any Spark master, with local mode's reader: the same cache, summary and bad lines.

The driver lists the history files and hands them to Spark as tasks (a DataFrame of file lists, one row per
partition): one file per task once the input is large, the largest first, so each slot takes the next file as it
frees; small files share a task (a task costs tens of milliseconds). Each task parses its files with
`history_reader.ingest_file` — the reader local mode uses (DuckDB's JSON reader, or pyarrow's under
DUCKDB_MIN_BYTES and without DuckDB), with the task's cores — writes each file's part files into the cache's group
folders, and returns only each file's summary (counters, views, unparseable lines: a few rows per member), never its
events. The driver adds them up in file order, as local mode does, so the summary is the one local mode writes.

The executors read the history files and write the cache themselves: with a cluster master the checked folder must
be on storage every executor sees, at the same path (as for any Spark input).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from analysis.cache import Group, RunSummary
from analysis.history_reader import FileIngested, FileJob, JsonReader, file_jobs, ingest_file, merge_files, wants_duckdb
from analysis.schema import RunFolder

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

OUT = pa.schema([("index", pa.int64()), ("file", pa.string())])  # a file's place in file_jobs, its FileIngested
TaskFunction = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]
# Below this many bytes of JSON lines per task, another task costs more than it saves (a task's own cost is tens of
# milliseconds; DuckDB parses 8 MiB, ~55k lines, in about 60 ms of one core).
MIN_TASK_BYTES = 8 << 20


def plan_files(sizes: list[int], min_task_bytes: int = MIN_TASK_BYTES) -> list[list[int]]:
    """Packs files (their sizes) into tasks: one task per `min_task_bytes` of input, at most one per file, each file
    onto the least loaded task, largest first; the largest tasks come first."""
    n = max(1, min(len(sizes), -(-sum(sizes) // min_task_bytes)))
    tasks: list[list[int]] = [[] for _ in range(n)]
    load = [0] * n
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        j = load.index(min(load))
        tasks[j].append(i)
        load[j] += sizes[i]
    return [tasks[j] for j in sorted(range(n), key=lambda j: -load[j]) if tasks[j]]


def _file_tasks(spark: SparkSession, jobs: list[FileJob]) -> DataFrame:
    """One row (`files`: JSON of [index, run, rel, k, absolute path] per file) per task, each its own partition.
    Absolute paths: the executors' working folders are not the driver's (a relative groups folder once had the
    executors of a standalone cluster write the cache into their own work/ folders)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    tasks = plan_files([job.path.stat().st_size for job in jobs])
    specs = [json.dumps([[i, *jobs[i][:3], str(jobs[i].path.absolute())] for i in task]) for task in tasks]
    # a range splits evenly: one row per partition, with no sampling job, as spark_job.group_tasks does
    ids = spark.range(0, len(specs), 1, len(specs))
    rows = ids.select(F.element_at(F.array(*map(F.lit, specs)), F.col("id").cast("int") + 1).alias("files"))
    return rows.to(T.StructType([T.StructField("files", T.StringType())]))  # the schema known: no round trip


def _task(groups_dir: str, use_duckdb: bool) -> TaskFunction:
    """The task function: ingests each file of its rows and yields one OUT row per file."""

    def ingest_files(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        reader = JsonReader(use_duckdb=use_duckdb, threads=context.cpus() if context is not None else 1)
        try:
            for batch in batches:
                for spec in batch.column("files").to_pylist():
                    for index, run, rel, k, path in json.loads(spec):
                        done = _ingest_here(FileJob(run, rel, k, Path(path)), Path(groups_dir), reader)
                        yield pa.record_batch([[index], [done.to_json()]], schema=OUT)
        finally:
            reader.close()

    return ingest_files


def _ingest_here(job: FileJob, groups_dir: Path, reader: JsonReader) -> FileIngested:
    """ingest_file on an executor, saying where when the file is not there."""
    if not job.path.is_file():
        raise FileNotFoundError(
            f"{job.path}: no such history file on {socket.gethostname()}, where a Spark executor runs: with a "
            "cluster master the checked folder must be on storage every executor sees, at the same path"
        )
    return ingest_file(job, groups_dir, reader)


def ingest_with_spark(
    spark: SparkSession, runs: list[RunFolder], groups_dir: Path
) -> tuple[dict[str, RunSummary], list[Group]]:
    """Parses every history file of `runs` on the executors into the cache's group folders under `groups_dir`;
    returns the runs' summaries and the manifest of groups, as ingest._ingest_arrow does."""
    from pyspark.sql.pandas.types import from_arrow_schema

    jobs = file_jobs(runs)
    ingest_files = _task(str(groups_dir.absolute()), wants_duckdb(jobs))
    out = _file_tasks(spark, jobs).mapInArrow(ingest_files, from_arrow_schema(OUT)).toArrow()
    order = sorted(zip(out["index"].to_pylist(), out["file"].to_pylist(), strict=True))
    if [i for i, _ in order] != list(range(len(jobs))):  # a task lost or repeated would skew the summary
        raise RuntimeError(f"the ingest job returned files {[i for i, _ in order]} of {len(jobs)}")
    return merge_files(runs, (FileIngested.from_json(doc) for _, doc in order))

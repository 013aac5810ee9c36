"""History JSON lines in, a Parquet cache out: one file per (run, sender) group, plus a small summary.

The cache is laid out for the checks: every event goes to the group of its sender — a `deliver` to the group named
by its `sender` field, any other event to its own member's — so the check of a group reads one file and needs no
shuffle (this *is* the one shuffle of the pipeline, done while the lines are parsed). Re-analysis of unchanged files
reads only the cache (`<checked folder>/.chaosbed-cache`).

Each file is parsed and split by `history_reader.py`: DuckDB's JSON reader (`read_json` with the history schema;
measured on 1M-line files: 1.2 CPU seconds per file, against 1.4-2.7 s for pyarrow's JSON reader, itself about 5x
faster than Spark's JSON source, which pays Jackson plus a row conversion per line), or pyarrow's under
DUCKDB_MIN_BYTES and without DuckDB. Local mode parses here, in the driver: DuckDB one file at a time on every core
while a second thread splits the previous file by group and writes its part files; pyarrow two files at a time.
With a cluster master the executors run the same reader on the files, one task per file (`spark_ingest.py`), and
the driver adds up what they return the same way: the same cache and summary (`cache.py`).

The summary holds per member and event the count, first/last time and last position, the `view` events, the lines
that could not be parsed (with their neighbours' times, so a cut-off line can be told apart from damage), and the
manifest of group files.
"""

from __future__ import annotations

import os
import shutil
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from analysis.cache import BadLine, Group, Ingested, RunSummary, cache_root, fingerprint, read_summary, write_summary
from analysis.config import InputError
from analysis.history_reader import (
    FileIngested,
    FileJob,
    JsonReader,
    file_jobs,
    ingest_file,
    merge_files,
    read_history_file,
    split_groups,
    wants_duckdb,
    write_groups,
)
from analysis.schema import RunFolder

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["JsonReader", "check_readable", "ingest", "read_history_file", "split_groups"]


def check_readable(runs: list[RunFolder], root: Path) -> None:
    """Raises InputError when there is nothing to check (no run folder, or a run without history files)."""
    if not runs:
        raise InputError(f"{root}: no run folder here (expected history/<member>.jsonl in it or in its subfolders)")
    for run in runs:
        if not run.history_files:
            raise InputError(f"{run.path / 'history'}: no <member>.jsonl history files")


def ingest(runs: list[RunFolder], root: Path, *, reader: str = "arrow", spark: SparkSession | None = None) -> Ingested:
    """Parses every history file of `runs` once into the cache (reused while the files are unchanged);
    `reader` is "arrow" (in this process) or "spark" (on the executors of any master; needs `spark`)."""
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


def _ingest_arrow(runs: list[RunFolder], groups_dir: Path) -> tuple[dict[str, RunSummary], list[Group]]:
    """Parses every file (DuckDB: one file at a time on all cores, while another thread splits and writes the
    previous one; pyarrow: two files at a time) and writes one part file per group of each file."""
    jobs = file_jobs(runs)
    reader = JsonReader(use_duckdb=wants_duckdb(jobs))

    def write(job: FileJob, parsed: tuple[pa.Table, list[BadLine]] | None) -> FileIngested:
        return ingest_file(job, groups_dir, reader) if parsed is None else write_groups(job, *parsed, groups_dir)

    def written() -> Iterator[FileIngested]:
        with ThreadPoolExecutor(min(2, os.cpu_count() or 1)) as pool:  # pyarrow works without holding the GIL
            pending: deque[Future[FileIngested]] = deque()
            for job in jobs:
                # DuckDB parses here, on every core
                parsed = None if reader.parallel_files else read_history_file(job.path, job.run, job.rel, reader)
                pending.append(pool.submit(write, job, parsed))
                while len(pending) > 2:  # at most two parsed files wait for their writer
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()

    try:
        return merge_files(runs, written())
    finally:
        reader.close()

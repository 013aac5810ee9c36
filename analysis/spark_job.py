"""The Spark job of the checks: one task per batch of (run, sender) groups, one pass over each group.

The cache already holds one Parquet file per (run, sender) group (`ingest.py` did the shuffle while parsing), so a
check is a single Spark job with no shuffle: each task reads its groups' files and runs `streams.check_sender`, which
computes fifo, exactly_once, complete, no_phantoms, delivered_within, latency, counters and delivery progress in one
pass, and counts the control events control_per_heal bounds. `fifo`, `exactly_once`, ... are that result filtered to
one check, so asking for all of them costs one job. The driver folds the rows into RunResults (results.py), where
`views_converge` works on the (small) view events and `control_per_heal` on the control counts summed over the groups.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from analysis.cache import Group
from analysis.membership import RunInfo
from analysis.results import RunResult, collect
from analysis.spark import default_parallelism
from analysis.streams import INPUT_COLUMNS, OUT_SCHEMA, check_sender

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def message_events(events: DataFrame, control_kinds: tuple[str, ...] = ()) -> DataFrame:
    """Send and deliver events (and those of `control_kinds`) keyed by (run, sender): a delivery by its sender field,
    any other event by its member (the groups of the cache)."""
    from pyspark.sql import functions as F

    key = F.when(F.col("event") == "deliver", F.col("sender")).otherwise(F.col("member")).alias("key")
    if "dest_address" not in events.columns:  # events from before sends named the receiver's incarnation
        events = events.withColumn("dest_address", F.lit(None).cast("string"))
    kinds = ["send", "deliver", *control_kinds]
    return events.filter(F.col("event").isin(*kinds)).select("run", key, *INPUT_COLUMNS)


def control_kinds(infos: dict[str, RunInfo]) -> tuple[str, ...]:
    """Every event kind some run's control_per_heal counts."""
    return tuple(sorted({k for info in infos.values() for k in info.checks.control_kinds}))


# A task of the check job costs about 60 ms of server CPU on its own (the Spark service, a job of an empty function:
# 0.11 s with one task, 0.30 s with four), more than checking tens of thousands of rows. Below this many rows a task,
# another task costs more than it saves. Measured per check, 4 tasks (2 per slot) -> 1: a 1k-event run 0.49 -> 0.27 s
# of server CPU, a 34k-event run 0.49 -> 0.29 s, wall time the same or less.
MIN_ROWS_PER_TASK = 50_000


def plan_tasks(
    groups: list[Group], slots: int, rows_per_task: int = 400_000, min_rows_per_task: int = MIN_ROWS_PER_TASK
) -> list[list[Group]]:
    """Packs groups into tasks, largest first onto the least loaded task: at least 2 tasks per slot when there is
    enough work, one task per `min_rows_per_task` rows below that, few tasks for many small runs."""
    total = sum(g.rows for g in groups)
    n = max(1, min(len(groups), -(-total // min_rows_per_task), max(2 * slots, total // rows_per_task)))
    tasks: list[list[Group]] = [[] for _ in range(n)]
    load = [0] * n
    for g in sorted(groups, key=lambda g: -g.rows):
        i = load.index(min(load))
        tasks[i].append(g)
        load[i] += g.rows
    order = sorted(range(n), key=lambda i: -load[i])
    return [tasks[i] for i in order if tasks[i]]


def group_tasks(spark: SparkSession, cache: Path, groups: list[Group]) -> DataFrame:
    """A DataFrame with one row per task (`task`, `groups` as JSON: run, key, absolute path), one per partition.
    Absolute: the Spark service's workers do not share the caller's working directory."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    # the slot count is a round trip on Spark Connect: asked only when the input makes more than one task
    many = sum(g.rows for g in groups) > MIN_ROWS_PER_TASK
    tasks = plan_tasks(groups, default_parallelism(spark) if many else 1)
    specs = F.array(*[F.lit(json.dumps([[g.run, g.key, str((cache / g.path).absolute())] for g in t])) for t in tasks])
    # a range splits evenly: one row per partition, and no sampling job (repartitionByRange ran one; on Spark
    # Connect every job is a round trip)
    ids = spark.range(0, len(tasks), 1, len(tasks))
    rows = ids.select(
        F.col("id").cast("int").alias("task"), F.element_at(specs, F.col("id").cast("int") + 1).alias("groups")
    )
    # the schema stated: mapInArrow reads its input's columns, which on Spark Connect is a round trip to analyse the
    # plan unless the DataFrame already knows them (`to` gives it the schema; the columns are these already)
    return rows.to(T.StructType([T.StructField("task", T.IntegerType()), T.StructField("groups", T.StringType())]))


def read_group(path: str, control_kinds: tuple[str, ...] = ()) -> pa.Table:
    """The send and deliver events of one cached group (a folder of Parquet parts), and those of `control_kinds`."""
    import pyarrow.parquet as pq

    kinds = ["send", "deliver", *control_kinds]
    return pq.read_table(path, columns=INPUT_COLUMNS, filters=[("event", "in", kinds)])


def stream_results(tasks: DataFrame, infos: dict[str, RunInfo]) -> DataFrame:
    """One row per violation, counter, latency summary, histogram bin and progress bucket (OUT_SCHEMA), computed
    per group file by `check_sender`; `tasks` comes from group_tasks."""
    from pyspark.sql.pandas.types import from_arrow_schema

    def run_tasks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for spec in batch.column("groups").to_pylist():
                for run, key, path in json.loads(spec):
                    info = infos[run]
                    yield from check_sender(read_group(path, info.checks.control_kinds), info, key).to_batches()

    return tasks.mapInArrow(run_tasks, from_arrow_schema(OUT_SCHEMA))


def stream_results_from_events(events: DataFrame, infos: dict[str, RunInfo]) -> DataFrame:
    """The same rows from any DataFrame of events (columns of the cache): groups by (run, sender) with a shuffle.
    Slower than the cache's group files; for events that come from elsewhere."""
    from pyspark.sql.pandas.types import from_arrow_schema

    def per_sender(table: pa.Table) -> pa.Table:
        return check_sender(table, infos[table["run"][0].as_py()], table["key"][0].as_py())

    rows = message_events(events, control_kinds(infos))
    return rows.groupBy("run", "key").applyInArrow(per_sender, from_arrow_schema(OUT_SCHEMA))


def _only(check: str) -> Callable[[DataFrame, dict[str, RunInfo]], DataFrame]:
    def violations(tasks: DataFrame, infos: dict[str, RunInfo]) -> DataFrame:
        from pyspark.sql import functions as F

        res = stream_results(tasks, infos)
        return res.filter((F.col("rtype") == "violation") & (F.col("check") == check))

    violations.__name__ = check
    violations.__doc__ = f"The {check} violations: a filter of the single pass (stream_results)."
    return violations


fifo = _only("fifo")
exactly_once = _only("exactly_once")
complete = _only("complete")
no_phantoms = _only("no_phantoms")
delivered_within = _only("delivered_within")


def check_events(
    spark: SparkSession, cache: Path, groups: list[Group], infos: dict[str, RunInfo]
) -> dict[str, RunResult]:
    """Runs every check on the cached group files: one Spark job, then views_converge in the driver."""
    rows = stream_results(group_tasks(spark, cache, groups), infos).toArrow() if groups else OUT_SCHEMA.empty_table()
    return collect(rows, infos)

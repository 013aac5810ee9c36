"""From a run folder (or a folder of runs) to results: read, cache, check, and sum up the statistics."""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from analysis.cache import BadLine, Ingested
from analysis.config import CheckConfig, InputError, read_checks
from analysis.contract import contract_findings, foreign_system
from analysis.ingest import check_readable, ingest
from analysis.membership import RunInfo, build_run_info, read_faults, read_schedule_start
from analysis.results import RunResult
from analysis.schema import RunFolder, discover_runs, runner_violations
from analysis.spark import get_spark, is_local, requested, using
from analysis.spark_job import check_events
from analysis.spark_service import SparkServiceError
from analysis.stats import RunStats, SkippedLine, run_stats
from analysis.synth import write_run
from analysis.verdict import Violation, sort_violations

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class SparkUnavailable(Exception):
    """Spark could not start (no Java, a bad master URL); the message says so."""


@dataclass
class Analysis:
    root: Path
    runs: list[RunFolder]
    results: dict[str, RunResult]
    stats: dict[str, RunStats]
    is_matrix: bool
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def events(self) -> int:
        return sum(s.events for s in self.stats.values())

    @property
    def ok(self) -> bool:
        return not any(r.violations for r in self.results.values())


def classify_bad_lines(
    run: RunFolder, bad: list[BadLine], faults: list[dict], *, lenient: bool = False
) -> list[SkippedLine]:
    """A line that is not a complete event is skipped when it is the file's last line or when its member was killed
    between the lines around it (the cut-off end of an earlier incarnation); anything else is damage (InputError;
    `lenient`: left out, for a foreign system's run, whose damaged lines analysis/contract.py reports)."""
    skipped: list[SkippedLine] = []
    for b in bad:
        lo = -(1 << 62) if b.prev_t is None else b.prev_t
        hi = (1 << 62) if b.next_t is None else b.next_t
        killed = any(f.get("kind") == "kill" and f.get("member") == b.member and lo <= f["t"] <= hi for f in faults)
        if not (b.last or killed):
            if lenient:
                continue
            where = f"{run.path / b.file}" + (f":{b.line}" if b.line else "")
            raise InputError(f"{where}: not a complete JSON event (and {b.member} was not killed there): {b.text!r}")
        skipped.append(SkippedLine(b.file, b.line, b.text[:80], "last line cut off" if b.last else "cut off by a kill"))
    return skipped


def start_spark(master: str | None) -> SparkSession:
    try:
        return get_spark(master)
    except Exception as exc:  # Py4J/launcher errors have many types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = (
            "is the Spark Connect server running? (chaosbed spark status)"
            if master and master.startswith("sc://")
            else "PySpark needs Java 17+ on PATH or in JAVA_HOME."
        )
        raise SparkUnavailable(f"Spark could not start (target {master or 'local'}): {first}. {hint}") from exc


def run_infos(
    runs: list[RunFolder],
    ing: Ingested,
    faults: dict[str, tuple[list[dict], int]],
    checks: dict[str, CheckConfig],
    foreign: frozenset[str] = frozenset(),
) -> tuple[dict[str, RunInfo], dict[str, list[SkippedLine]]]:
    """The membership facts of each run, and its skipped lines (InputError for damaged ones)."""
    infos: dict[str, RunInfo] = {}
    skipped: dict[str, list[SkippedLine]] = {}
    for run in runs:
        s = ing.summaries[run.name]
        recs, _ = faults[run.name]
        skipped[run.name] = classify_bad_lines(run, s.bad_lines, recs, lenient=run.name in foreign)
        infos[run.name] = build_run_info(
            run.name,
            s.member_events(),
            s.last_event(),
            s.views,
            recs,
            checks[run.name],
            s.t_range(),
            read_schedule_start(run.faults_file),
        )
    return infos, skipped


def _start_into(future: Future, master: str | None) -> None:
    """Starts Spark on a daemon thread (an unreadable input then exits without waiting for the JVM)."""
    try:
        session = start_spark(master)
        future.set_result((session, time.perf_counter()))
    except BaseException as exc:  # handed to the waiting thread
        future.set_exception(exc)


def analyze(
    path: str | Path, master: str | None = None, *, bound_views: float | None = None, reader: str | None = None
) -> Analysis:
    """Reads and checks a run folder or a folder of runs on a Spark target (`master`: any target of
    analysis/spark_config.py; None = the Spark service, started on demand). Raises InputError (exit 2) or
    SparkUnavailable."""
    root = Path(path)
    if not root.is_dir():
        raise InputError(f"{root}: no such folder" if not root.exists() else f"{root}: not a folder")
    t0 = time.perf_counter()
    for attempt in (1, 2):  # the Spark service may die under a check (its JVM killed): a new one takes it again
        with contextlib.ExitStack() as stack:
            try:  # on the Spark service, a lease keeps its idle timeout from stopping it mid-check
                target = stack.enter_context(using(master, warm_up=warm_up))
            except (SparkServiceError, ValueError, OSError) as exc:  # OSError: no state root to keep a service in
                raise SparkUnavailable(f"Spark target {requested(master)}: {exc}") from exc
            try:
                return run_pipeline(root, target, bound_views, reader, t0)
            except Exception as exc:
                # the server went away mid-check, or between the lease and the session (nothing answers any more)
                lost = connection_lost(exc) or (
                    isinstance(exc, SparkUnavailable) and isinstance(exc.__cause__, ConnectionError)
                )
                if not lost:
                    raise
                if master is None and attempt == 1:
                    continue  # the service, started on demand, is started again
                if isinstance(exc, SparkUnavailable):
                    raise
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise SparkUnavailable(
                    f"the Spark target {requested(master)} went away during the check ({first}): check again "
                    "(`chaosbed spark status` tells whether the service runs)"
                ) from exc
    raise AssertionError("unreachable: the second attempt returns or raises")


def connection_lost(exc: BaseException) -> bool:
    """Whether a Spark Connect error is the server going away (a transport failure), not an error of the query."""
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    if type(exc) is not SparkConnectGrpcException:  # its subclasses are the server's answers: errors of the query
        return False
    import grpc

    return exc.getGrpcStatusCode() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNKNOWN)


def warm_up(url: str) -> None:
    """Checks a tiny synthetic run on a new Connect server: its Python workers import the checks and its JVM compiles
    the job's path once, so the first real check is as quick as the later ones (measured: 4.7 s -> 1.4 s)."""
    with tempfile.TemporaryDirectory(prefix="chaosbed-warm-up-") as tmp:
        write_run(Path(tmp) / "run", members=3, rounds=10, inject=("gap",), seed=0)
        run_pipeline(Path(tmp) / "run", url)


def run_pipeline(
    root: Path, master: str, bound_views: float | None = None, reader: str | None = None, t0: float | None = None
) -> Analysis:
    """analyze() on a concrete target (LOCAL, an sc:// URL, a master), without taking a lease on the service."""
    timings: dict[str, float] = {}
    t0 = time.perf_counter() if t0 is None else t0
    runs = discover_runs(root)
    check_readable(runs, root)
    checks = {run.name: read_checks(run.scenario_file, bound_views) for run in runs}
    faults = {run.name: read_faults(run.faults_file) for run in runs}
    reader = reader or ("arrow" if is_local(master) else "spark")
    if reader == "spark":
        spark = start_spark(master)
        timings["spark_start"] = time.perf_counter() - t0
        ing = ingest(runs, root, reader=reader, spark=spark)
    else:  # the JVM starts while pyarrow parses: on 2 cores this hides most of the start-up
        starting: Future = Future()
        threading.Thread(target=_start_into, args=(starting, master), daemon=True).start()
        ing = ingest(runs, root, reader=reader)
        timings["ingest"] = time.perf_counter() - t0
        spark, ready = starting.result()
        timings["spark_start"] = ready - t0
    timings.setdefault("ingest", time.perf_counter() - t0 - timings["spark_start"])
    foreign = frozenset(run.name for run in runs if foreign_system(run))  # checked against the history contract too
    infos, skipped = run_infos(runs, ing, faults, checks, foreign)
    t2 = time.perf_counter()
    results = check_events(spark, ing.cache, ing.groups, infos)
    timings["checks"] = time.perf_counter() - t2
    for run in runs:  # the orchestrator's own observations (a `timeout`), from the run folder
        found = [Violation(**v, run=run.name) for v in runner_violations(run)]
        if run.name in foreign:
            broken, notes = contract_findings(run, skipped[run.name])
            found += broken
            results[run.name].notes.extend(notes)
        if found:
            results[run.name].violations = sort_violations(results[run.name].violations + found)
    stats = {
        run.name: run_stats(results[run.name], ing.summaries[run.name], skipped[run.name], faults[run.name][1])
        for run in runs
    }
    timings["total"] = time.perf_counter() - t0
    timings["from_cache"] = float(ing.from_cache)
    is_matrix = not (root / "history").is_dir()
    return Analysis(root, runs, results, stats, is_matrix, timings)

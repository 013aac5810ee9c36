"""`chaosbed spark cluster start|status|stop`: a Spark standalone cluster on this machine (analysis/spark_cluster.py),
a master and workers from pyspark's own classes; `chaosbed check --spark spark://127.0.0.1:PORT` checks on it."""

from __future__ import annotations

import sys
import time

import click

from orchestration.cli.options import console


def _ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    m, s = divmod(seconds, 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


@click.group("cluster")
def spark_cluster() -> None:
    """A Spark standalone cluster on this machine (master and workers on 127.0.0.1)."""


@spark_cluster.command("start")
@click.option("--workers", type=click.IntRange(1, 16), default=2, show_default=True)
@click.option("--cores", type=click.IntRange(1, 64), default=1, show_default=True, help="cores per worker")
@click.option("--memory", default="1g", show_default=True, help="memory per worker for its executors")
def cluster_start(workers: int, cores: int, memory: str) -> None:
    """Start a master and WORKERS workers (or report the running cluster)."""
    from analysis import spark_cluster as sc

    t0 = time.perf_counter()
    with console.status(f"starting a Spark master and {workers} workers (JVM starts: 10-60 s)"):
        try:
            info, started = sc.start(workers, cores, memory)
        except sc.SparkServiceError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)
    if not started:
        console.print(f"already running: {info.url} ({len(info.worker_pids)} workers, up {_ago(info.uptime)})")
        return
    console.print(
        f"started: {info.url} (master pid {info.master_pid}, {len(info.worker_pids)} workers x {info.cores} cores, "
        f"{info.memory}) in {time.perf_counter() - t0:.1f} s"
    )
    console.print(f"check on it: chaosbed check DIR --spark {info.url}   stop it: chaosbed spark cluster stop")


@spark_cluster.command("status")
def cluster_status() -> None:
    """Show the cluster: URL, workers alive, uptime. Exit 0 when it runs, 1 when not."""
    from analysis import spark_cluster as sc

    info = sc.status()
    if info is None:
        console.print(f"not running (state: {sc.cluster_dir()})")
        sys.exit(1)
    doc = sc.master_json(info.webui_port) or {}
    console.print(f"url           {info.url}")
    console.print(f"master        pid {info.master_pid}, web UI http://127.0.0.1:{info.webui_port}")
    console.print(
        f"workers       {sc.alive_workers(info.webui_port)} alive of {len(info.worker_pids)} "
        f"(pids {', '.join(map(str, info.worker_pids))}), {info.cores} cores and {info.memory} each"
    )
    apps = doc.get("activeapps")
    console.print(f"applications  {len(apps) if isinstance(apps, list) else 0} running")
    console.print(f"uptime        {_ago(info.uptime)}")
    console.print(f"state         {sc.cluster_dir()}")


@spark_cluster.command("stop")
def cluster_stop() -> None:
    """Stop the workers (and their executors), the master, and remove the state."""
    from analysis import spark_cluster as sc

    if sc.stop():
        console.print("stopped the Spark cluster")
    else:
        console.print("the Spark cluster was not running")

"""`chaosbed spark start|status|stop`: the warm Spark service (analysis/spark_service.py); `chaosbed spark cluster
...` (a standalone cluster) is spark_cluster.py. The `--spark` option of the commands that check histories (check,
run, matrix, bugs run) is in cli_options.py."""

from __future__ import annotations

import sys
import time

import click

from orchestration.cli.options import console, duration_arg
from orchestration.cli.spark_cluster import spark_cluster


def _ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


@click.group()
def spark() -> None:
    """The warm Spark service: a local Spark Connect server that checks share (no JVM start per check); `spark
    cluster`: a standalone Spark cluster on this machine."""


spark.add_command(spark_cluster)


@spark.command("start")
@click.option(
    "--idle-timeout",
    default="15m",
    show_default=True,
    callback=lambda _c, _p, v: duration_arg(v),
    help="stop by itself after this long with no check using it",
)
def spark_start(idle_timeout: float) -> None:
    """Start the service of this state root (or report the running one)."""
    from analysis import spark_service

    running = spark_service.status()
    t0 = time.perf_counter()
    with console.status("starting the Spark Connect server (JVM start and a first job: 10-30 s)"):
        try:
            info = spark_service.start(idle_timeout)
        except spark_service.SparkServiceError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)
    if running is not None and running.pid == info.pid:
        console.print(f"already running: {info.url} (pid {info.pid}, up {_ago(info.uptime)})")
    else:
        console.print(
            f"started: {info.url} (pid {info.pid}) in {time.perf_counter() - t0:.1f} s; "
            f"stops after {_ago(info.idle_timeout)} idle"
        )


@spark.command("status")
def spark_status() -> None:
    """Show the service: URL, pid, uptime, idle timeout. Exit 0 when it runs, 1 when not."""
    from analysis import spark_service

    info = spark_service.status()
    if info is None:
        console.print(f"not running (state: {spark_service.service_dir()})")
        sys.exit(1)
    folder = spark_service.service_dir()
    try:
        idle = time.time() - (folder / "last-used").stat().st_mtime
    except OSError:
        idle = info.uptime
    leases = sum(1 for _ in (folder / "leases").glob("*")) if (folder / "leases").is_dir() else 0
    console.print(f"url           {info.url}")
    console.print(f"pid           {info.pid} (supervisor; JVM {info.jvm_pid})")
    console.print(f"uptime        {_ago(info.uptime)}")
    console.print(f"idle timeout  {_ago(info.idle_timeout)} (idle for {_ago(idle)}; checks in flight: {leases})")
    console.print(f"state         {folder}")
    if info.code != spark_service.code_fingerprint():
        console.print("note          started with older analysis code: checks do not use it; restart it")


@spark.command("stop")
def spark_stop() -> None:
    """Stop the service (the JVM and its Python workers) and remove its state."""
    from analysis import spark_service

    if spark_service.stop():
        console.print("stopped the Spark service")
    else:
        console.print("the Spark service was not running")

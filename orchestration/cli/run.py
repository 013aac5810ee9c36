"""`chaosbed run FILE` (a scenario file on any backend, then its checks) and `chaosbed check FOLDER`."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import click

from orchestration.cli.options import (
    BACKEND,
    DEFAULT_BACKEND_HELP,
    default_backend,
    master_option,
    spark_option,
    spark_target,
)
from orchestration.cli.output import run_checks, run_shown


@click.command()
@click.argument("scenario_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--backend",
    type=BACKEND,
    default=None,
    help=DEFAULT_BACKEND_HELP,
)
@click.option("--seed", type=int, default=None, help="overrides the file's seed")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="the run folder (default: a new folder under ./runs/)",
)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="override any key, e.g. cluster.stack=unicast2")
@master_option
@spark_option
def run(
    scenario_file: Path,
    backend: str | None,
    seed: int | None,
    out: Path | None,
    sets: tuple[str, ...],
    master: str | None,
    spark: str | None,
) -> None:
    """Run a scenario file (docs/scenario-format.md) and check it: exit 0 clean, 1 violations, 2 could not run."""
    from orchestration.scenario import ScenarioError, load

    master = spark_target(spark, master)

    try:
        sc = load(scenario_file, list(sets), seed)
        backend = backend or default_backend()
        out = out or Path("runs") / f"{sc.name}-{backend}-seed{sc.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_shown(sc, backend, out, f"running {sc.name} on {backend} (seed {sc.seed})")
    except ScenarioError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    code = run_checks(out, master)
    replay = f"chaosbed run {shlex.quote(str(scenario_file))} --backend {backend} --seed {sc.seed}" + "".join(
        f" --set {shlex.quote(s)}" for s in sets
    )
    verdict = {0: "PASS", 1: "FAIL", 2: "UNREADABLE"}.get(code, str(code))
    click.echo(f"verdict: {verdict} ({out}); replay: {replay}")
    sys.exit(code)


@click.command()
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option("--master", default=None, help="Spark master URL (same as --spark URL)")
@spark_option
def check(folder: Path, master: str | None, spark: str | None) -> None:
    """Check a finished run folder (or a folder of run folders): exit 0 clean, 1 violations, 2 unreadable."""

    sys.exit(run_checks(folder, spark_target(spark, master)))

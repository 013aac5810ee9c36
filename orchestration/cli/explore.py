"""`chaosbed explore FILE`: search random fault schedules over FILE's cluster and workload, in the simulator (the
default) or on real members (--backend netns|docker, any system), shrink what fails to minimal scenarios, confirm
them on real members (docs/scenario-format.md, "Explore"; orchestration/explore/); with --soak, one long nemesis on
real members (orchestration/cli/soak.py). Exit 0: no failure found; 1: failures found (each shrunk); 2: could not
run."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource

from orchestration.cli.options import BACKEND, console, duration_arg, spark_option

if TYPE_CHECKING:
    from orchestration.explore.progress import Reporter
    from orchestration.explore.session import Explored, ExploreSpec
    from orchestration.scenario import Scenario

DEFAULT_BUDGET_S = 600.0
GUIDES = ("wire", "random")
DEFAULT_GUIDE = "wire"  # on netns without --warm (the tap needs a fresh netns cluster); random elsewhere
REAL_JOBS = 2  # clusters side by side on real members (docs/explore.md: what pays on 2 cores)
REAL_CONFIRM_RUNS = 10


def _kinds(value: str | None) -> list[str] | None:
    if value is None:
        return None
    from orchestration.explore.generator import GeneratorError, parse_kinds

    try:
        return parse_kinds(value)
    except GeneratorError as e:
        raise click.BadParameter(str(e), param_hint="--nemesis") from None


def _checks(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    from orchestration.scenario import VIOLATIONS

    names = tuple(sorted({v.strip() for v in value.split(",") if v.strip()}))
    bad = [n for n in names if n not in VIOLATIONS]
    if bad or not names:
        known = ", ".join(sorted(VIOLATIONS))
        raise click.BadParameter(
            f"unknown check {bad[0] if bad else value!r}; checks: {known}", param_hint="--violates"
        )
    return names


@click.command()
@click.argument("scenario_file", metavar="FILE", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--budget", type=duration_arg, default=None, metavar="DURATION", help="search this long, e.g. 10m (default 10m)"
)
@click.option("--schedules", type=click.IntRange(min=1), default=None, help="search this many schedules")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="worker processes (default: one per core)")
@click.option(
    "--backend",
    type=BACKEND,
    default="sim",
    show_default=True,
    help="sim: search in the simulator; netns, docker: search on real members (any system); with --soak: the soak's",
)
@click.option(
    "--soak", is_flag=True, help="one long random nemesis on real members, checked (--backend netns|docker|process)"
)
@click.option(
    "--nemesis",
    "kinds",
    default=None,
    metavar="KINDS",
    help="fault kinds to draw, comma-separated (all); a soak: its nemesis kind (combined)",
)
@click.option(
    "--interval", type=duration_arg, default=None, metavar="DURATION", help="a soak: a nemesis round every (10s)"
)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="override any key of FILE, as `run --set`")
@click.option("--seed", type=click.IntRange(min=0), default=None, help="the search's seed (default: FILE's seed)")
@click.option("--stop-at-first", is_flag=True, help="stop at the first failure")
@click.option("--keep-faults", is_flag=True, help="keep FILE's own faults under every schedule")
@click.option("--violates", "want", default=None, metavar="CHECKS", help="count only failures of exactly these checks")
@click.option(
    "--confirm", type=click.Choice(["netns", "docker"]), default=None, help="replay each minimal on real members"
)
@click.option(
    "--confirm-runs", type=click.IntRange(min=1), default=None, help="replays per failure (5; on real members 10)"
)
@click.option(
    "--shrink-runs", type=click.IntRange(min=0), default=None, help="runs a shrink may take (300; on real members 60)"
)
@click.option(
    "--guide",
    type=click.Choice(GUIDES),
    default=None,
    help="real members: draw schedules at random, or also mutate those that reached something new on the wire "
    f"({DEFAULT_GUIDE} on netns without --warm, else random)",
)
@click.option(
    "--warm",
    type=click.IntRange(min=0),
    default=None,
    help="real members: run schedule after schedule on a warm cluster, started afresh every K (0: a fresh cluster "
    "each, the default); a failure found warm is confirmed on a fresh cluster",
)
@click.option("--no-check", is_flag=True, help="leave each failure's run unchecked (chaosbed check DIR does it)")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None, help="default: runs/explore-*")
@spark_option
def explore(
    scenario_file: Path,
    budget: float | None,
    schedules: int | None,
    jobs: int | None,
    backend: str,
    soak: bool,
    kinds: str | None,
    interval: float | None,
    sets: tuple[str, ...],
    seed: int | None,
    stop_at_first: bool,
    keep_faults: bool,
    want: str | None,
    confirm: str | None,
    confirm_runs: int | None,
    shrink_runs: int | None,
    guide: str | None,
    warm: int | None,
    no_check: bool,
    out: Path | None,
    spark: str | None,
) -> None:
    """Search fault schedules for failures, shrink each to a minimal scenario: exit 0 none, 1 found, 2 could not run."""
    from orchestration.explore.generator import GeneratorError
    from orchestration.explore.pool import PoolError
    from orchestration.explore.progress import Reporter
    from orchestration.explore.real_shrink import REAL_MAX_RUNS
    from orchestration.explore.search import SearchSpec
    from orchestration.explore.session import ExploreSpec
    from orchestration.explore.shrink import MAX_RUNS
    from orchestration.runner import first_interrupt_only
    from orchestration.scenario import ScenarioError, load

    if soak:
        _soak(scenario_file, backend, budget, kinds, interval, sets, seed, out, spark)
        return
    real = _search_backend(backend, interval, confirm, guide, warm)
    try:
        sc = load(scenario_file, list(sets))
        if not real:
            _searchable(sc)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = out or Path("runs") / f"explore-{sc.name}-{stamp}"
        if out.exists() and any(out.iterdir()):
            raise ScenarioError(f"--out {out}: the folder exists and is not empty")
        spec = ExploreSpec(
            file=scenario_file,
            out=out,
            search=SearchSpec(
                seed=sc.seed if seed is None else seed,
                schedules=schedules,
                budget=budget if budget is not None or schedules is not None else DEFAULT_BUDGET_S,
                stop_at_first=stop_at_first,
                want=_checks(want),
            ),
            sets=sets,
            keep_faults=keep_faults,
            jobs=jobs or (REAL_JOBS if real else os.cpu_count() or 1),
            kinds=_kinds(kinds),
            confirm=confirm,
            confirm_runs=confirm_runs or (REAL_CONFIRM_RUNS if real else 5),
            check=not no_check,
            spark=spark,
            shrink_runs=(REAL_MAX_RUNS if real else MAX_RUNS) if shrink_runs is None else shrink_runs,
            backend=backend,
            guide=guide or _default_guide(backend, warm),
            warm=warm or 0,
        )
        restore = first_interrupt_only((signal.SIGINT, signal.SIGTERM))  # `kill PID` ends it as Ctrl-C does
        try:
            with Reporter(console) as reporter:
                explored = _run(spec, reporter)
        finally:
            restore()
    except (ScenarioError, GeneratorError, PoolError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    _summary(explored, out)
    sys.exit(1 if explored.failures else 0)


def _run(spec: ExploreSpec, reporter: Reporter) -> Explored:
    """The search: in the simulator (session.py) or on real members (real_session.py)."""
    if spec.backend != "sim":
        from orchestration.explore.real_session import explore_real

        return explore_real(spec, reporter)
    from orchestration.explore.session import explore as run_explore

    return run_explore(spec, reporter)


def _soak(
    scenario_file: Path,
    backend: str,
    budget: float | None,
    kinds: str | None,
    interval: float | None,
    sets: tuple[str, ...],
    seed: int | None,
    out: Path | None,
    spark: str | None,
) -> None:
    """--soak: one long nemesis on real members (orchestration/cli/soak.py); it exits."""
    if backend == "sim":
        raise click.BadParameter("a soak runs on real members: --backend netns, docker or process", param_hint="--soak")
    _refuse_for_soak(backend)
    from orchestration.cli.soak import soak as run_soak

    budget_s = DEFAULT_BUDGET_S if budget is None else budget
    run_soak(scenario_file, backend, budget_s, kinds, interval, sets, seed, out, spark)


def _default_guide(backend: str, warm: int | None) -> str:
    """--guide left out: the wire where its tap can watch (a fresh netns cluster each schedule), else random drawing
    (docs/explore.md: the guided bench, two runs)."""
    return DEFAULT_GUIDE if backend == "netns" and not warm else "random"


def _search_backend(
    backend: str, interval: float | None, confirm: str | None, guide: str | None = None, warm: int | None = None
) -> bool:
    """Whether the search runs on real members; BadParameter for what a search on this backend does not take."""
    if interval is not None:
        raise click.BadParameter("a nemesis round's interval is for a soak (--soak)", param_hint="--interval")
    if backend == "process":
        raise click.BadParameter(
            "the process backend's members share the host's loopback (no network faults): search with --backend "
            "netns (as root), docker or sim, or soak with --soak",
            param_hint="--backend",
        )
    real = backend != "sim"
    if guide is not None and not real:
        raise click.BadParameter("the simulator's search draws at random; --guide is for real members (--backend "
                                 "netns)", param_hint="--guide")  # fmt: skip
    if warm and not real:
        raise click.BadParameter("the simulator starts no cluster; --warm is for real members (--backend netns or "
                                 "docker)", param_hint="--warm")  # fmt: skip
    if warm and guide == "wire":
        raise click.BadParameter("a wire-guided schedule runs on a fresh cluster with its tap; leave out --warm or "
                                 "--guide wire", param_hint="--warm")  # fmt: skip
    if real and confirm is not None:
        raise click.BadParameter(
            f"a search on {backend} confirms each failure on fresh {backend} clusters; --confirm is for the "
            "simulator's search",
            param_hint="--confirm",
        )
    return real


def _searchable(sc: Scenario) -> Scenario:
    """The scenario, if the simulator can search it (ScenarioError naming the system otherwise)."""
    from orchestration.scenario import ScenarioError

    if not sc.system.native:
        raise ScenarioError(
            f"cluster.system: the simulator's search runs chaosbed's own member only; system {sc.system.name!r} "
            "runs on real members: --backend netns (as root) or docker"
        )
    return sc


_SEARCH_ONLY = ("schedules", "jobs", "stop_at_first", "keep_faults", "want", "confirm", "confirm_runs", "shrink_runs",
                "no_check", "guide", "warm")  # fmt: skip


def _refuse_for_soak(backend: str) -> None:
    """A soak takes none of the search's options: the first one given on the command line is named."""
    ctx = click.get_current_context()
    for param in ctx.command.params:
        if param.name in _SEARCH_ONLY and ctx.get_parameter_source(param.name) == ParameterSource.COMMANDLINE:
            option = max(param.opts, key=len)
            raise click.BadParameter(
                f"{option} is for a search; --soak runs one long nemesis on real members ({backend}), checked",
                param_hint=option,
            )


def _summary(explored: Explored, out: Path) -> None:
    from orchestration.explore.confirm import confirm_line
    from orchestration.explore.reliable import reliable_line
    from orchestration.explore.tables import faults_of

    for f in explored.failures:
        n_before, n_after = len(f.found.faults), len(faults_of(f.shrunk.raw))
        shrunk = "shrunk" if f.shrunk.complete else "shrinking stopped"
        console.print(
            f"failure {f.number}: [bold red]{', '.join(f.found.result.violated)}[/] (schedule seed {f.found.seed}); "
            f"{shrunk}: {n_before} -> {n_after} faults; minimal: {f.minimal}",
            soft_wrap=True,
        )
        if f.confirm:
            console.print(f"  {confirm_line(f.confirm)}", markup=False, soft_wrap=True)
        console.print(f"  replay: chaosbed run {f.minimal} --backend {f.backend}", markup=False, soft_wrap=True)
        reliable = f.confirm.get("reliable") if f.confirm else None
        if reliable is not None:
            line = reliable_line(reliable, len(f.shrunk.trail))
            console.print(f"  flaky, earlier forms: {line}", markup=False, soft_wrap=True)
            if reliable["file"]:
                form = f.minimal.with_name(reliable["file"])
                console.print(f"  replay: chaosbed run {form} --backend {f.backend}", markup=False, soft_wrap=True)
    r = explored.result
    state = " (interrupted)" if explored.interrupted else ""
    verdict = f"{len(explored.failures)} failure(s)" if explored.failures else "no failure found"
    console.print(f"explore{state}: {r.tried:,} schedules, {verdict}; {out / 'index.html'}", markup=False)

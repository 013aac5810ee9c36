"""`chaosbed matrix FILE` and `chaosbed bugs [run NAME|--all]`: many runs, a live progress display, one check
pass, matrix.json and the grid report. Exit 0: every cell as expected; 1: some cell not; 2: could not run."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click
from rich import box
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from orchestration.cli.options import BACKEND, console, master_option, spark_option, spark_target
from orchestration.matrix.results import CellResult, MatrixResult
from orchestration.matrix.run import check_all, run_cells, set_aside, write_matrix
from orchestration.matrix.spec import Matrix, MatrixError, load_matrix
from orchestration.toml_text import toml_value


def _fail(msg: str) -> None:
    click.echo(f"error: {msg}", err=True)
    sys.exit(2)


def _out_folder(out: Path | None, name: str) -> Path:
    out = out or Path("runs") / f"matrix-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if out.exists() and any(out.iterdir()):
        _fail(f"--out {out}: the folder exists and is not empty")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _preflight(matrix: Matrix) -> None:
    """Fails before anything runs: a backend this machine cannot run, a cell its backend cannot run."""
    from orchestration.cluster import ClusterError
    from orchestration.runner import backend_problem

    if any(c.backend == "netns" and not c.skip for c in matrix.cells):
        from orchestration.backends.netns import check_netns_available

        try:
            check_netns_available()
        except ClusterError as e:
            _fail(str(e))
    for c in matrix.cells:
        if c.skip:
            continue
        problem = backend_problem(c.load(), c.backend)
        if problem:
            _fail(f"{c.scenario.name} on {c.backend}: {problem}")


def execute(matrix: Matrix, out: Path, jobs: int, master: str | None) -> MatrixResult:
    """Runs the cells with a live display (cells done/failed, elapsed, ETA), then checks them in one pass."""
    failed = 0
    total = len(matrix.cells)
    live = console.is_terminal
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("[red]{task.fields[failed]} failed[/]  running: {task.fields[running]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        disable=not live,
    )
    running: list[str] = []
    task = progress.add_task(matrix.name, total=total, failed=0, running="")

    def started(cell) -> None:  # type: ignore[no-untyped-def]
        running.append(cell.id)
        progress.update(task, running=" ".join(running))

    def done(r: CellResult) -> None:
        nonlocal failed
        running.remove(r.cell.id)
        failed += r.status != "ran" or bool(r.outcome.get("timed_out"))
        progress.update(task, advance=1, failed=failed, running=" ".join(running))
        if not live:  # logs, CI: one line per cell
            state = r.status if r.status != "ran" else "ran (timeout)" if r.outcome.get("timed_out") else "ran"
            console.print(f"{r.cell.id} {r.cell.folder}: {state} in {r.seconds:.1f} s", markup=False)

    t0 = time.perf_counter()
    with progress:
        results, interrupted = run_cells(matrix, out, jobs, on_start=started, on_done=done)
    result = MatrixResult(matrix, out, results, interrupted, run_seconds=time.perf_counter() - t0)
    set_aside(out, results)
    if interrupted:
        console.print(
            f"[bold red]interrupted[/]: {sum(r.status == 'ran' for r in results)} of {total} cells finished; "
            "checking those"
        )
    with console.status(f"checking {sum(r.status == 'ran' for r in results)} runs in one pass"):
        check_all(result, master)
    write_matrix(result)
    return result


def _outcome(r: CellResult) -> str:
    if r.status == "skipped":
        return "skipped"
    return ("PASS" if r.passed else "FAIL " + ", ".join(r.violated)) if r.checked else (r.error or r.status)


def _mark(r: CellResult) -> str:
    return "[green]yes[/]" if r.ok else "[bold red]NO[/]"


def cells_table(result: MatrixResult) -> Table:
    """One row per cell: its scenario, the system its members run, settings, backend, seed, what was expected and
    what happened."""
    table = Table(title=f"matrix {result.matrix.name}", title_justify="left")
    for col in ("cell", "scenario", "system", "settings", "backend", "seed", "expected", "result", "as expected"):
        table.add_column(col, overflow="fold")
    for r in result.results:
        c = r.cell
        settings = " ".join(f"{_short(k)}={v if isinstance(v, str) else toml_value(v)}" for k, v in c.settings.items())
        settings = settings or "-"
        if c.label:
            settings = f"{c.label}: {settings}"
        expected = c.expect.describe()
        table.add_row(
            c.id, c.scenario_name, c.system, settings, c.backend, str(c.seed), expected, _outcome(r), _mark(r)
        )
    return table


def bugs_table(result: MatrixResult, ids: dict[Path, str]) -> Table:
    """One row per bug and pair (the model's flawed/fixed, and the real releases': `real X -> Y` under the bug's id
    and backend): what its flawed variant must violate, what each variant did, and whether both went as the
    catalogue says. Narrow enough for a 100-column terminal; the settings are in the replay lines."""
    backends = sorted({r.cell.backend for r in result.results})
    table = Table(title=f"known bugs ({len(ids)})", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("bug" + (" (id, backend)" if len(backends) > 1 else ""), no_wrap=True)
    for col, least in (("flawed must violate", 16), ("flawed", 16), ("fixed", 6)):
        table.add_column(col, overflow="fold", min_width=least, max_width=32)
    table.add_column("as expected", no_wrap=True, min_width=11)
    pairs: dict[tuple[Path, str, str], dict[str, CellResult]] = {}
    for r in result.results:
        real = r.cell.label.startswith("real-")
        pairs.setdefault((r.cell.scenario, r.cell.backend, "real" if real else "model"), {})[
            r.cell.label.removeprefix("real-")
        ] = r
    for (path, backend, pair), variants in pairs.items():
        flawed, fixed = variants.get("flawed"), variants.get("fixed")
        must = ", ".join(flawed.cell.expect.violates or ["any check"]) if flawed else "-"
        ok = all(v.ok for v in variants.values())
        below = ids.get(path, "") + (f", {backend}" if len(backends) > 1 else "")
        if pair == "real":  # a line of its own: two-digit releases (5.2.12 -> 5.2.13) would widen the column
            below += f"\n{_releases(flawed, fixed)}"
        row = [f"{path.stem}\n[dim]{escape(below)}[/]", must, _outcome(flawed) if flawed else "-"]
        row.append(_outcome(fixed) if fixed else "no fix" if flawed else "-")
        table.add_row(*row, "[green]yes[/]" if ok else "[bold red]NO[/]")
    return table


def _releases(flawed: CellResult | None, fixed: CellResult | None) -> str:
    """A real pair as the table names it: "real 5.4.6 -> 5.4.7"."""
    versions = [str(r.cell.settings.get("cluster.version", "?")) for r in (flawed, fixed) if r is not None]
    return "real " + " -> ".join(versions)


def summarize(result: MatrixResult, table: Table | None = None) -> int:
    """The cells table (or the given one), the replay command of each failed cell, the last line; returns the exit
    code."""
    console.print(table if table is not None else cells_table(result))
    for r in result.results:
        if (r.checked and not r.passed) or not r.ok:
            console.print(f"{r.cell.id} replay: {r.cell.replay()}", markup=False, soft_wrap=True)
    for r in result.results:
        for w in r.warnings:
            console.print(f"[bold red]WARNING[/] {escape(r.cell.id)}: {escape(w)}", soft_wrap=True)
    skipped = [r for r in result.results if r.status == "skipped"]
    for r in skipped:
        console.print(f"{r.cell.id} {r.cell.folder} skipped: {r.error}", markup=False, soft_wrap=True)
    counted = [r for r in result.results if r.status != "skipped"]
    n_ok = sum(r.ok for r in counted)
    timing = f"runs {result.run_seconds:.1f} s, one check pass {result.check_seconds:.1f} s"
    summary = (
        f"{n_ok} of {len(counted)} cells as expected" + (f", {len(skipped)} skipped" if skipped else "")
        + f"; {timing}; {result.out / 'report.html'}"
    )  # fmt: skip
    if result.check_error:
        console.print(f"[bold red]the checker could not run[/]: {result.check_error}")
    errors = [r for r in result.results if r.status == "error"]
    for r in errors:
        console.print(f"[bold red]{r.cell.id} could not run[/]: {r.error}", soft_wrap=True)
    if result.interrupted or result.check_error or errors:
        console.print(f"verdict: INCOMPLETE — {summary}", soft_wrap=True)  # one line, for logs and scripts
        return 2
    console.print(f"verdict: {'PASS' if result.ok else 'FAIL'} — {summary}", soft_wrap=True)
    return 0 if result.ok else 1


@click.command()
@click.argument("matrix_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-j", "--jobs", type=click.IntRange(1, 64), default=1, show_default=True, help="cells run at once")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None, help="default: runs/matrix-*")
@click.option("--backend", type=BACKEND, default=None, help="replaces the matrix's backend axis")
@master_option
@spark_option
def matrix(
    matrix_file: Path, jobs: int, out: Path | None, backend: str | None, master: str | None, spark: str | None
) -> None:
    """Run a matrix file (scenarios x axes x seeds x backends), check every cell in one pass, write matrix.json
    and report.html: exit 0 every cell as expected, 1 some cell not, 2 could not run."""
    try:
        m = load_matrix(matrix_file, backend=backend)
    except MatrixError as e:
        _fail(str(e))
    target = spark_target(spark, master)
    _preflight(m)
    folder = _out_folder(out, m.name)
    sys.exit(summarize(execute(m, folder, jobs, target)))


@click.group(invoke_without_command=True)
@click.pass_context
def bugs(ctx: click.Context) -> None:
    """The known-bug catalogue (scenarios/bugs/): list it, or `bugs run NAME` / `bugs run --all`."""
    if ctx.invoked_subcommand is not None:
        return
    from orchestration.matrix.bugs import catalogue

    try:
        entries = catalogue()
    except MatrixError as e:
        _fail(str(e))
    table = Table(title=f"known bugs ({len(entries)})", title_justify="left", show_lines=True)
    table.add_column("name", no_wrap=True)
    table.add_column("id", no_wrap=True)
    table.add_column("layer", no_wrap=True)
    table.add_column("title / what breaks / flawed variant", overflow="fold")
    table.add_column("violates", overflow="fold")
    for entry in entries:
        bug = entry.bug
        flawed = " ".join(f"{k}={toml_value(v)}" for k, v in bug.flawed.items()) or "(the file as written)"
        about = f"[bold]{bug.title}[/]\n{bug.breaks}\n[dim]flawed: {flawed if bug.modelled else '(not modelled)'}"
        if bug.real:
            about += f"\nreal: {bug.real.system} {bug.real.flawed} (flawed) -> {bug.real.fixed} (fixed)"
        about += "[/]"
        table.add_row(entry.path.stem, bug.id, bug.layer, about, ", ".join(bug.violates))
    console.print(table)
    console.print("run one: chaosbed bugs run NAME; all: chaosbed bugs run --all [-j 2]")


@bugs.command(name="run")
@click.argument("name", required=False)
@click.option("--all", "all_", is_flag=True, help="every bug of the catalogue (a matrix)")
@click.option("--backend", "backends", type=BACKEND, multiple=True, help="repeatable; default: netns as root")
@click.option("-j", "--jobs", type=click.IntRange(1, 64), default=2, show_default=True, help="runs at once")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None)
@master_option
@spark_option
def bugs_run(
    name: str | None,
    all_: bool,
    backends: tuple[str, ...],
    jobs: int,
    out: Path | None,
    master: str | None,
    spark: str | None,
) -> None:
    """Run a bug's flawed and fixed variants side by side: exit 0 when the flawed one violates exactly what the
    file names and the fixed one passes, 1 otherwise, 2 for bad input."""
    from orchestration.matrix.bugs import bug_matrix, catalogue, find

    if bool(name) == all_:
        _fail("name one bug (chaosbed bugs run NAME) or --all")
    target = spark_target(spark, master)
    try:
        entries = catalogue()
        chosen = entries if all_ else find(entries, name or "")
        title = "bugs" if all_ else chosen[0].path.stem if len(chosen) == 1 else str(name)
        m = bug_matrix(chosen, list(backends) or None, name=title)
    except MatrixError as e:
        _fail(str(e))
    _preflight(m)
    folder = _out_folder(out, m.name)
    result = execute(m, folder, jobs, target)
    if not all_ and len(chosen) == 1:
        _side_by_side(result)
        sys.exit(summarize(result))
    sys.exit(summarize(result, bugs_table(result, {e.path: e.bug.id for e in chosen})))


def _short(key: str) -> str:
    """A settings key as the table shows it: protocol properties without their common prefix."""
    return key.removeprefix("cluster.properties.")


def _side_by_side(result: MatrixResult) -> None:
    """Per check and a few counters, the flawed and fixed runs next to each other: what differed."""
    cols = [r for r in result.results if r.checked]
    if not cols:
        return
    stats = {}
    for r in cols:
        try:
            stats[r.cell.id] = json.loads((result.out / r.cell.folder / "verdict.json").read_text())["stats"]
        except (OSError, ValueError, KeyError):
            stats[r.cell.id] = {}
    table = Table(title="side by side", title_justify="left")
    table.add_column("")
    for r in cols:
        table.add_column(f"{r.cell.label} ({r.cell.backend})", justify="right")
    checks = sorted({c for r in cols for c in r.violated} | {"fifo", "exactly_once", "complete", "no_phantoms"})
    for check in checks:
        row = [str(stats[r.cell.id].get("violations", {}).get(check, 0)) for r in cols]
        table.add_row(f"{check} violations", *row, style="red" if len(set(row)) > 1 else None)
    for key in ("sends", "deliveries", "xmit", "ack"):
        row = [_count(stats[r.cell.id].get(key)) for r in cols]
        table.add_row(key, *row, style="bold" if len(set(row)) > 1 else None)
    for label, values in _bound_rows([stats[r.cell.id] for r in cols]):
        table.add_row(label, *values, style="bold" if len(set(values)) > 1 else None)
    console.print(table)


def _bound_rows(stats: list[dict]) -> list[tuple[str, list[str]]]:
    """The measured side of the bound checks: the slowest owed delivery after a heal, and the most events of each
    bounded control kind that one member wrote in one recovery interval."""
    rows = []
    within = [s.get("delivered_within") or {} for s in stats]
    if any(within):
        bound = next(w["bound_s"] for w in within if w)
        rows.append(
            (f"slowest delivery (bound {bound:g} s)", [f"{w['max_ms'] / 1e3:.2f} s" if w else "-" for w in within])
        )
    control = [s.get("control_per_heal") or {} for s in stats]
    kinds = sorted({k for c in control for k in c.get("bounds", {})})
    for kind in kinds:
        bound = next(c["bounds"][kind] for c in control if kind in c.get("bounds", {}))
        most = [str(_most(c, kind)) if c else "-" for c in control]
        rows.append((f"most {kind} per member per heal (bound {bound})", most))
    return rows


def _most(control: dict, kind: str) -> int:
    """The most `kind` events one member wrote in one recovery interval (stats.control_per_heal.counts)."""
    return max((n for per in control.get("counts", {}).values() for n in per.get(kind, [])), default=0)


def _count(v: object) -> str:
    if isinstance(v, dict):
        return f"{sum(x for x in v.values() if isinstance(x, int)):,}"
    return f"{v:,}" if isinstance(v, int) else "-"

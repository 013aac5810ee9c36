"""`chaosbed check DIR [--master URL]`: check a run folder (or a folder of runs), print the verdict table, write
verdict.json and report.html, and return the exit code (0 clean, 1 violations, 2 unreadable input)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table
from rich.text import Text

from analysis.config import BOUND_CHECKS, CORE_CHECKS, InputError
from analysis.pipeline import Analysis, SparkUnavailable, analyze
from analysis.report_workers import write_reports
from analysis.schema import run_system
from analysis.verdict import sort_violations, verdict_doc, write_verdict
from node.atomic import write_atomic

EXIT_OK, EXIT_VIOLATIONS, EXIT_UNREADABLE = 0, 1, 2
SHOWN = 20  # violations printed; verdict.json has them all
_LEGEND = "violations per check: fifo, exactly_once, complete, no_phantoms, views_converge; skipped = cut-off lines"
_COLUMNS = {"delivered_within": "within", "control_per_heal": "control"}  # the bounds' columns, when configured
RUN_MIN_WIDTH = 16  # a run column at least this wide (or as wide as the longest name) before anything else gives


MATRIX_FILE = "matrix.json"  # a folder written by `chaosbed matrix`: its report.html is the matrix's grid
CHECKS_REPORT = "checks.html"  # there, the table of every run's checks goes here instead


def write_outputs(analysis: Analysis) -> list[Path]:
    """verdict.json and report.html in every run folder, and matrix-level ones when a folder of runs was checked
    (the table of runs as checks.html in a `chaosbed matrix` folder, whose report.html is the matrix's grid)."""
    from analysis.report import render_matrix

    written = []
    for run in analysis.runs:
        write_verdict(run.path / "verdict.json", analysis.results[run.name].violations, analysis.stats[run.name],
                      run_system(run))  # fmt: skip
        written += [run.path / "verdict.json", run.path / "report.html"]
    write_reports(
        [
            (run.path / "report.html", run.name, analysis.results[run.name], analysis.stats[run.name])
            for run in analysis.runs
        ]
    )
    if analysis.is_matrix:
        every = [v for r in analysis.results.values() for v in r.violations]
        stats = {
            "runs": {
                run.name: {
                    "ok": not analysis.results[run.name].violations,
                    "events": analysis.stats[run.name].events,
                    "violations": analysis.stats[run.name].violations,
                }
                for run in analysis.runs
            },
            "events": analysis.events,
        }
        write_verdict(analysis.root / "verdict.json", every, stats)
        report = analysis.root / (CHECKS_REPORT if (analysis.root / MATRIX_FILE).exists() else "report.html")
        write_atomic(report, render_matrix(analysis))
        written += [analysis.root / "verdict.json", report]
    return written


def verdict_table(analysis: Analysis, bounds: list[str], *, compact: bool = False) -> Table:
    """One row per run: its verdict, events, violations per check ("off" where the run does not check it) and
    skipped lines. Headers and counts are never cut; a long run name folds within its column. `compact`: without
    the box, a space between columns and the run column as narrow as need be, for a narrow terminal."""
    table = Table(box=None, pad_edge=False, collapse_padding=True) if compact else Table()
    run_width = 0 if compact else min(RUN_MIN_WIDTH, max(len(run.name) for run in analysis.runs))
    table.add_column("run", overflow="fold", min_width=max(len("run"), run_width))
    table.add_column("verdict", no_wrap=True, min_width=len("verdict"))
    for col in ("events", "fifo", "once", "complete", "phantoms", "views", *(_COLUMNS[b] for b in bounds), "skipped"):
        table.add_column(col, justify="right", no_wrap=True, min_width=len(col))
    for run in analysis.runs:
        s = analysis.stats[run.name]
        verdict = "[green]OK[/]" if s.ok else "[bold red]FAIL[/]"
        cells = []
        for c in (*CORE_CHECKS, *bounds):
            n = s.violations.get(c, 0)
            cells.append("off" if not s.is_on(c) else f"[red]{n}[/]" if n else "0")
        table.add_row(Text(run.name), verdict, f"{s.events:,}", *cells, str(s.skipped_lines))
    return table


def table_width(console: Console, table: Table) -> int:
    """The width to print the table at. A pipe or a file has no width of its own (rich assumes 80 columns): there
    the table's natural width, one line per run with nothing folded. A terminal's own width, unless it is too
    narrow for the headers and counts: then what they need (the terminal wraps the lines; nothing is cut)."""
    natural = console.measure(table, options=console.options.update_width(1 << 16)).maximum
    if not console.is_terminal:
        return max(console.width, natural)
    return max(console.width, min(needed_width(table), natural))


def needed_width(table: Table) -> int:
    """The narrowest the table can be without cutting a header or a count: its no-wrap columns, the run column's
    minimum, and the box ("│ " and " " per column and a last "│") or, without a box, a space between columns."""
    n = len(table.columns)
    inner = sum(column_width(column) for column in table.columns[1:]) + (table.columns[0].min_width or 0)
    return inner + (n - 1 if table.box is None else 3 * n + 1)


def column_width(column: Column) -> int:
    """The width a no-wrap column takes: its header or its widest cell."""
    cells = [Text.from_markup(c) if isinstance(c, str) else c for c in column.cells]
    return max([column.min_width or 0, *(c.cell_len for c in cells if isinstance(c, Text))])


@contextlib.contextmanager
def console_width(console: Console, width: int) -> Iterator[None]:
    """Prints in this block at `width` (rich caps a print's own width at the console's)."""
    before = console.width
    console.width = width
    try:
        yield
    finally:
        console.width = before


def print_verdict(console: Console, analysis: Analysis) -> None:
    """The verdict table (one row per run), the first violations, and a last line with the verdict. Nothing is cut
    at the console's width: the title, violations, notes and the last line are one line each, however long."""
    bounds = configured_bounds(analysis)
    console.print(f"chaosbed check {analysis.root}", markup=False, soft_wrap=True)
    table = verdict_table(analysis, bounds)
    if console.is_terminal and needed_width(table) > console.width:  # a narrow terminal: the table without its box
        table = verdict_table(analysis, bounds, compact=True)
    with console_width(console, table_width(console, table)):
        console.print(table)
    console.print(_LEGEND.replace(";", "".join(f", {b}" for b in bounds) + ";", 1), style="dim")
    every = sort_violations([v for r in analysis.results.values() for v in r.violations])
    if every:
        console.print(f"violations (first {min(SHOWN, len(every))} of {len(every)}):")
        for v in every[:SHOWN]:
            where = v.where()
            console.print(
                f"  [red]{v.check}[/] {escape(v.run or '')}{' ' + escape(where) if where else ''}: {escape(v.detail)}",
                soft_wrap=True,
            )
    for run in analysis.runs:
        for note in analysis.stats[run.name].notes:
            console.print(f"[dim]{run.name}: {note}[/]", soft_wrap=True)
    out = analysis.root / "verdict.json"
    secs = analysis.timings.get("total", 0.0)
    if analysis.ok:
        console.print(
            f"[green]OK[/]: every check held — {len(analysis.runs)} run(s), {analysis.events:,} events "
            f"in {secs:.1f} s; {out}",
            soft_wrap=True,
        )
    else:
        bad = sum(1 for r in analysis.results.values() if r.violations)
        console.print(
            f"[bold red]FAIL[/]: {len(every)} violation(s) in {bad} of {len(analysis.runs)} run(s) — "
            f"{analysis.events:,} events in {secs:.1f} s; {out}",
            soft_wrap=True,
        )


def configured_bounds(analysis: Analysis) -> list[str]:
    """The bound checks (delivered_within, control_per_heal) that some run of the analysis configures."""
    return [b for b in BOUND_CHECKS if any(s.configures(b) for s in analysis.stats.values())]


def check(
    path: str | Path,
    master: str | None = None,
    *,
    bound_views: float | None = None,
) -> int:
    """Checks a run folder or a folder of runs; returns 0 (every check held), 1 (violations) or 2 (unreadable
    input, with a one-line message on stderr). `bound_views` (seconds) overrides the scenario's views_converge.
    The runner's own violations (a `timeout`) come from each run folder's outcome.json."""
    console = Console(highlight=False)
    try:
        analysis = analyze(path, master, bound_views=bound_views)
        write_outputs(analysis)
    except (InputError, SparkUnavailable) as exc:
        print(f"chaosbed check: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    except OSError as exc:
        print(f"chaosbed check: cannot write the verdict: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    print_verdict(console, analysis)
    return EXIT_OK if analysis.ok else EXIT_VIOLATIONS


def verdict(analysis: Analysis) -> dict[str, Any]:
    """The verdict.json document of a single-run analysis (for `chaosbed run`, which prints its own last line)."""
    (run,) = analysis.runs
    return verdict_doc(analysis.results[run.name].violations, analysis.stats[run.name])


if __name__ == "__main__":  # python -m analysis.command DIR [MASTER]
    sys.exit(check(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))

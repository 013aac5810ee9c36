"""Runs a matrix: each cell as a `chaosbed run` in its own process (at most `jobs` at once), then ONE pass of the
analysis pipeline over every finished run folder, then `matrix.json` and the grid report.

Why a process per cell: runs are isolated from each other (a netns cluster gets its own label, namespaces, subnet
and multicast group; a simulator run gets its own core), a cell that hangs or crashes cannot take the others with
it, and Ctrl-C reaches every running cell at once (the terminal sends SIGINT to the whole process group): each
cell takes its cluster down (runner.run's `finally`), the matrix waits for them, sets unfinished folders aside
(renamed to hidden `.unfinished-*` folders, which the checker skips) and checks what finished.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

from chaos.faults import JsonObject
from node.atomic import write_atomic
from orchestration.matrix.report import render
from orchestration.matrix.results import CellResult, MatrixResult
from orchestration.matrix.spec import Cell, Matrix
from orchestration.runner import OUTCOME_FILE, OutcomeDoc, first_interrupt_only

CELL_LOG = "run.log"  # what the cell printed
GRACE_S = 120.0  # beyond a scenario's timeout before a cell is interrupted (cluster start, stop, cleanup)
INTERRUPT_WAIT_S = 60.0  # how long cells get to take their clusters down after Ctrl-C


def cell_command(cell: Cell, out: Path) -> list[str]:
    spec = {
        "scenario": str(cell.scenario.resolve()),
        "settings": cell.settings,
        "seed": cell.seed,
        "backend": cell.backend,
        "out": str(out / cell.folder),
    }
    return [sys.executable, "-m", "orchestration.matrix.cell", json.dumps(spec)]


def run_cells(
    matrix: Matrix,
    out: Path,
    jobs: int,
    *,
    on_start: Callable[[Cell], None] | None = None,
    on_done: Callable[[CellResult], None] | None = None,
) -> tuple[list[CellResult], bool]:
    """Runs every cell, `jobs` at a time; returns the results in cell order and whether Ctrl-C stopped it."""
    pending = [c for c in matrix.cells if not c.skip]
    running: dict[int, tuple[Cell, subprocess.Popen[bytes], float, float]] = {}
    results: dict[int, CellResult] = {c.index: CellResult(c, "skipped", error=c.skip) for c in matrix.cells if c.skip}
    interrupted = False
    restore = first_interrupt_only()  # a second Ctrl-C must not cut the clean-up short
    try:
        while pending or running:
            while pending and len(running) < jobs:
                cell = pending.pop(0)
                (out / cell.folder).mkdir(parents=True, exist_ok=True)
                log = open(out / cell.folder / CELL_LOG, "wb")  # noqa: SIM115 (the child owns it until it exits)
                proc = subprocess.Popen(cell_command(cell, out), stdout=log, stderr=subprocess.STDOUT)
                log.close()
                deadline = time.monotonic() + cell.load().timeout + GRACE_S
                running[cell.index] = (cell, proc, time.monotonic(), deadline)
                if on_start:
                    on_start(cell)
            for idx, (cell, proc, started, deadline) in list(running.items()):
                code = proc.poll()
                if code is None and time.monotonic() > deadline:
                    _stop(proc)
                    code = proc.returncode
                    results[idx] = _finished(cell, out, code, time.monotonic() - started, hung=True)
                elif code is not None:
                    results[idx] = _finished(cell, out, code, time.monotonic() - started)
                else:
                    continue
                del running[idx]
                if on_done:
                    on_done(results[idx])
            if running:
                _wait_any([p for _, p, _, _ in running.values()], 0.2)
    except KeyboardInterrupt:
        interrupted = True
        # The terminal sent SIGINT to the whole group: each cell is taking its cluster down. Wait for them (a cell
        # started outside a terminal's group gets the signal from us).
        for _, proc, _, _ in running.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + INTERRUPT_WAIT_S
        for idx, (cell, proc, started, _) in running.items():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _stop(proc)
            results[idx] = CellResult(cell, "interrupted", time.monotonic() - started)
        for cell in pending:
            results[cell.index] = CellResult(cell, "not run")
    finally:
        restore()
    return [results[c.index] for c in matrix.cells], interrupted


def _wait_any(procs: list[subprocess.Popen[bytes]], timeout: float) -> None:
    """Returns when a child exits or after `timeout` (children are polled; os.waitid would reap foreign ones)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if any(p.poll() is not None for p in procs):
            return
        time.sleep(0.02)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT (the cell takes its cluster down), then SIGKILL by pid if it does not exit."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(INTERRUPT_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _finished(cell: Cell, out: Path, code: int | None, seconds: float, *, hung: bool = False) -> CellResult:
    folder = out / cell.folder
    outcome = OutcomeDoc()
    with contextlib.suppress(OSError, ValueError):
        outcome = cast(OutcomeDoc, json.loads((folder / OUTCOME_FILE).read_text()))  # the cell's write_outcome
    if hung:
        return CellResult(cell, "error", seconds, f"did not end within its timeout + {GRACE_S:g}s; interrupted")
    if code == 0 and outcome:
        return CellResult(cell, "ran", seconds, outcome=outcome)
    error = outcome.get("error") or _last_line(folder / CELL_LOG) or f"exit {code}"
    return CellResult(cell, "error", seconds, error)


def _last_line(path: Path) -> str | None:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return None
    return lines[-1] if lines else None


def set_aside(out: Path, results: list[CellResult]) -> None:
    """Folders of cells that did not finish are renamed to hidden ones: kept for a look, never checked."""
    for r in results:
        folder = out / r.cell.folder
        if r.status != "ran" and folder.exists():
            target = out / f".unfinished-{r.cell.folder}"
            if not target.exists():
                os.replace(folder, target)


def check_all(result: MatrixResult, master: str | None) -> None:
    """ONE pass of the analysis pipeline over every finished cell (one Spark session, one job per check phase; the
    runner's own violations, a `timeout`, come from each run's outcome.json); writes each run's verdict.json and
    report.html. Fills in each result's `violated`."""
    from analysis.command import write_outputs
    from analysis.config import InputError
    from analysis.pipeline import SparkUnavailable, analyze

    ran = [r for r in result.results if r.status == "ran"]
    write_matrix_json(result)  # what ran, before the check (and it marks the folder as a matrix's for the checker)
    if not ran:
        return
    t0 = time.perf_counter()
    try:
        analysis = analyze(result.out, master)
        for r in ran:
            res = analysis.results.get(r.cell.folder)
            if res is None:
                raise InputError(f"{r.cell.folder}: the checker found no run there")
            r.violated = sorted({v.check for v in res.violations})
            r.checked = True
        write_outputs(analysis)
        result.events = analysis.events
    except (InputError, SparkUnavailable, OSError) as e:
        result.check_error = str(e)
    result.check_seconds = time.perf_counter() - t0


def matrix_doc(result: MatrixResult) -> JsonObject:
    """matrix.json (docs/scenario-format.md): ok and one entry per cell; extended with status, expect, seconds, warnings
    and timings."""
    cells = []
    for r in result.results:
        c = r.cell
        cells.append(
            {
                "id": c.id,
                "scenario": c.scenario_name,
                "scenario_file": str(c.scenario),
                "settings": c.settings,
                "backend": c.backend,
                "seed": c.seed,
                "system": c.system or None,
                "label": c.label or None,
                "ok": r.ok,
                "passed": r.passed if r.checked else None,
                "expect": c.expect.describe(),
                "status": r.status,
                "violated": r.violated,
                "run": c.folder if r.status == "ran" else None,
                "replay": c.replay(),
                "seconds": round(r.seconds, 2),
                "error": r.error,
                "warnings": r.warnings,  # what the run did not do as planned (late actions, rules bypassed)
            }
        )
    return {
        "ok": result.ok,
        "name": result.matrix.name,
        "interrupted": result.interrupted,
        "check_error": result.check_error,
        "timings": {"runs_s": round(result.run_seconds, 2), "check_s": round(result.check_seconds, 2)},
        "events": result.events,
        "cells": cells,
    }


def write_matrix_json(result: MatrixResult) -> None:
    write_atomic(result.out / "matrix.json", json.dumps(matrix_doc(result), indent=2) + "\n")


def write_matrix(result: MatrixResult) -> None:
    """matrix.json and the grid report.html (the checker's table of every run is checks.html, linked from it)."""
    write_matrix_json(result)
    write_atomic(result.out / "report.html", render(result))

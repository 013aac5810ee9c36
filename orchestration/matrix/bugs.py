"""The known-bug catalogue (scenarios/bugs/*.toml, docs/scenario-format.md): each file is a scenario with a `[bug]`
table.

Running a bug = a matrix of two cells per backend, the flawed variant (expected to fail with exactly the checks the
file names) and the fixed one (expected to pass), checked in one pass like any matrix. A bug of a system without a fix
(`no_fix`) has the flawed cell only. A bug with a `[bug.real]` pair has two more cells per backend, real-flawed and
real-fixed: the same file on the real release that had the bug and on the one that fixed it
(orchestration/bug_table.py). A cell whose system cannot run on its backend (a foreign system on the simulator) or
on this machine (no JDK for the JGroups jar) is skipped with the reason, not failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestration.matrix.spec import (
    Cell,
    Expectation,
    Matrix,
    MatrixError,
    _slug,
    default_backend_name,
    system_label,
)
from orchestration.scenario import Bug, ScenarioError, load
from orchestration.systems import unavailable
from orchestration.systems.clusters import backend_problem

CATALOGUE = Path(__file__).resolve().parents[2] / "scenarios" / "bugs"


@dataclass
class Entry:
    path: Path
    name: str  # the scenario's name
    bug: Bug


def catalogue(folder: Path = CATALOGUE) -> list[Entry]:
    """Every bug file, validated with both variants applied (a bad file raises MatrixError naming it)."""
    entries = []
    for path in sorted(folder.glob("*.toml")):
        try:
            sc = load(path)
            if sc.bug is None:
                raise ScenarioError("bug: a catalogue file needs a [bug] table")
            for variant in sc.bug.variants:
                load(path, settings=sc.bug.settings(variant))
        except ScenarioError as e:
            raise MatrixError(f"{path.name}: {e}") from None
        entries.append(Entry(path, sc.name, sc.bug))
    return entries


def find(entries: list[Entry], name: str) -> list[Entry]:
    """By file stem, scenario name or bug id (case-insensitive). A bug id may name several files (JGRP-1548 as
    chaosbed's model of it and as the real JGroups jar's): all of them, side by side."""
    key = name.lower().removesuffix(".toml")
    by_name = [e for e in entries if key in (e.path.stem.lower(), e.name.lower())]
    found = by_name or [e for e in entries if key == e.bug.id.lower()]
    if not found:
        known = ", ".join(e.path.stem for e in entries)
        raise MatrixError(f"no bug {name!r} in the catalogue; bugs: {known}")
    return found


def bug_matrix(entries: list[Entry], backends: list[str] | None = None, name: str = "bugs") -> Matrix:
    """Each bug x (flawed, fixed) x backend as matrix cells with their expectations."""
    backends = backends or [default_backend_name()]
    cells: list[Cell] = []
    for e in entries:
        for backend in backends:
            for variant in e.bug.variants:
                settings = e.bug.settings(variant)
                sc = load(e.path, settings=settings)
                must = e.bug.must_violate(variant)
                expect = Expectation("fail", must) if must is not None else Expectation("pass")
                cell = Cell(len(cells) + 1, e.path, sc.name, settings, backend, sc.seed, expect, label=variant)
                cell.folder = f"{cell.id}-{_slug(sc.name)}-{variant}-{backend}"
                cell.system = system_label(sc)
                cell.skip = backend_problem(sc.system, backend) or unavailable(sc.system) or ""
                cells.append(cell)
    axes: dict[str, list[object]] = {"backend": list(backends)}
    columns = ["variant", "backend"] if len(backends) > 1 else ["variant"]
    return Matrix(name, None, cells, axes, rows=["scenario"], columns=columns)

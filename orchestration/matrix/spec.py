"""Matrix files (docs/scenario-format.md "Matrices"): scenarios crossed with axes, expanded into cells.

A cell is one `chaosbed run`: a scenario file, settings (dotted keys, applied like --set), a backend and a seed.
This module only reads and validates; `matrix_run.py` runs the cells and checks them in one pass.

```toml
name = "stacks-under-splits"
scenarios = ["../*.toml"]                  # paths or globs, relative to the matrix file
[axes]                                      # dotted scenario keys, or seed / backend
"cluster.stack" = ["unicast3+nakack2", "unicast2+nakack2"]
seed = [1, 2]
backend = ["sim", "netns"]
[[expect]]                                  # optional: cells that must FAIL (default: every cell must pass)
where = { "cluster.stack" = "unicast2+nakack2" }   # settings the cell has (and/or scenario = "name")
result = "fail"
violates = ["complete"]                     # optional: exactly these checks
[report]                                    # optional: the report's grid
rows = ["scenario"]                         # axes (or "scenario") down the side
columns = ["cluster.stack", "backend"]      # axes across the top; default: the last axis
```
"""

from __future__ import annotations

import glob
import itertools
import shlex
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestration.scenario import (
    CHECKS,
    CLUSTER_KEYS,
    VIOLATIONS,
    Scenario,
    ScenarioError,
    TomlTable,
    load,
    read_text,
)
from orchestration.systems import unavailable
from orchestration.toml_text import toml_value

BACKENDS = ("sim", "process", "netns", "docker", "swarm")
MATRIX_KEYS = {"name", "scenarios", "axes", "expect", "report"}
EXPECT_KEYS = {"scenario", "where", "result", "violates"}
# an axis may also set any [cluster] key a scenario file leaves out (scenario.CLUSTER_KEYS: system included)


class MatrixError(ValueError):
    """A matrix that cannot run: names the key and the reason (exit 2)."""


@dataclass
class Expectation:
    result: str  # "pass" | "fail"
    violates: list[str] | None = None  # for "fail": exactly these checks (None: any)

    def met(self, violated: list[str]) -> bool:
        if self.result == "pass":
            return not violated
        return bool(violated) and (self.violates is None or set(violated) == set(self.violates))

    def describe(self) -> str:
        if self.result == "pass":
            return "pass"
        return "fail" + (f" ({', '.join(self.violates)})" if self.violates else "")


@dataclass
class Cell:
    """One run of the matrix; `folder` is relative to the matrix's out folder."""

    index: int
    scenario: Path
    scenario_name: str
    settings: dict[str, object]  # dotted scenario key -> value (the axes' values of this cell)
    backend: str
    seed: int
    expect: Expectation
    label: str = ""  # e.g. "flawed"/"fixed" for the bug catalogue; shown in the grid
    folder: str = ""
    system: str = ""  # what the members run, as reports name it: "chaosbed (unicast3+nakack2)", "jgroups-2.12 (...)"
    skip: str = ""  # why this machine does not run the cell (its system's JDK is missing, ...): skipped, not failed

    @property
    def id(self) -> str:
        return f"c{self.index:03d}"

    def axis_value(self, axis: str) -> object:
        if axis == "scenario":
            return self.scenario_name
        if axis == "backend":
            return self.backend
        if axis == "seed":
            return self.seed
        if axis == "variant":
            return self.label
        if axis == "system":
            return self.system
        return self.settings.get(axis)

    def axis_label(self, axis: str) -> object:
        """The value as reports show it: a system with its stack ("jgroups-2.12 (unicast2-fast)")."""
        if axis in ("system", "cluster.system") and self.system:
            return self.system
        return self.axis_value(axis)

    def replay(self) -> str:
        """The `chaosbed run` command that runs this cell again, alone."""
        sets = "".join(f" --set {shlex.quote(f'{k}={toml_value(v)}')}" for k, v in self.settings.items())
        where = shlex.quote(display_path(self.scenario))
        return f"chaosbed run {where} --backend {self.backend} --seed {self.seed}{sets}"

    def load(self) -> Scenario:
        return load(self.scenario, seed=self.seed, settings=self.settings)


@dataclass
class Matrix:
    name: str
    path: Path | None
    cells: list[Cell]
    axes: dict[str, list[object]]
    rows: list[str]
    columns: list[str]
    extra: dict[str, object] = field(default_factory=dict)


def display_path(p: Path) -> str:
    """The path relative to the working directory when it is below it (short replay commands), else absolute."""
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p.resolve())


def _need(cond: bool, path: str, reason: str) -> None:
    if not cond:
        raise MatrixError(f"{path}: {reason}")


def load_matrix(path: str | Path, *, backend: str | None = None) -> Matrix:
    """Reads and validates a matrix file; every cell's scenario is loaded once with its settings, so a bad value
    fails here (exit 2), naming the axis, before anything runs. `backend` replaces the backend axis."""
    path = Path(path)
    try:
        raw = tomllib.loads(read_text(path, MatrixError))
    except tomllib.TOMLDecodeError as e:
        raise MatrixError(f"{path}: not valid TOML: {e}") from None
    for key in raw:
        _need(key in MATRIX_KEYS, key, f"unknown key; a matrix has: {', '.join(sorted(MATRIX_KEYS))}")
    name = raw.get("name", path.stem)
    _need(isinstance(name, str) and bool(name), "name", "must be a non-empty string")
    scenarios = _scenario_files(raw.get("scenarios"), path.parent)
    axes = raw.get("axes", {})
    _need(isinstance(axes, dict), "axes", "must be a table of axis = [values]")
    for key, values in axes.items():
        _need(isinstance(values, list), f"axes.{key}", "must be a list of values")
        _need(bool(values), f"axes.{key}", "is empty: an axis needs at least one value")
        _need(len({toml_value(v) for v in values}) == len(values), f"axes.{key}", "has a value twice")
    if "seed" in axes:
        for v in axes["seed"]:
            _need(isinstance(v, int) and not isinstance(v, bool) and v >= 0, "axes.seed", f"not a seed: {v!r}")
    if backend is not None:
        axes = {**axes, "backend": [backend]}
    for b in axes.get("backend", []):
        _need(b in BACKENDS, "axes.backend", f"unknown backend {b!r}; backends: {', '.join(BACKENDS)}")
    expectations = _expectations(raw.get("expect", []))
    cells = expand(scenarios, axes, expectations, default_backend=backend)
    rows, columns = _grid(raw.get("report", {}), axes, len(scenarios) > 1)
    return Matrix(name, path, cells, axes, rows, columns)


def _scenario_files(value: object, base: Path) -> list[Path]:
    if not (isinstance(value, list) and value and all(isinstance(v, str) and v for v in value)):
        raise MatrixError('scenarios: a non-empty list of paths or globs, e.g. ["scenarios/*.toml"]')
    files: list[Path] = []
    for pattern in value:
        full = pattern if Path(pattern).is_absolute() else str(base / pattern)
        hits = sorted(Path(p) for p in glob.glob(full, recursive=True)) if glob.has_magic(pattern) else [Path(full)]
        hits = [p for p in hits if p.is_file()]
        _need(bool(hits), "scenarios", f"{pattern!r} matches no file (relative to {base})")
        files += [p for p in hits if p not in files]
    return files


Expect = tuple[str | None, TomlTable, Expectation]  # an [[expect]]: scenario name (None: any), where, expectation


def _expectations(value: object) -> list[Expect]:
    if not (isinstance(value, list) and all(isinstance(e, dict) for e in value)):
        raise MatrixError("expect: an array of tables")
    out: list[Expect] = []
    for i, e in enumerate(value):
        where = f"expect[{i}]"
        for key in e:
            known = ", ".join(sorted(EXPECT_KEYS))
            _need(key in EXPECT_KEYS, f"{where}.{key}", f"unknown key; [[expect]] has: {known}")
        result = e.get("result", "fail")
        _need(result in ("pass", "fail"), f"{where}.result", "pass | fail")
        violates = e.get("violates")
        if violates is not None:
            _need(result == "fail", f"{where}.violates", 'only for result = "fail"')
            _need(isinstance(violates, list) and bool(violates), f"{where}.violates", "a non-empty list of checks")
            for v in violates:
                checks = ", ".join(sorted(VIOLATIONS))
                _need(v in VIOLATIONS, f"{where}.violates", f"unknown check {v!r}; checks: {checks}")
        cond = e.get("where", {})
        _need(isinstance(cond, dict), f"{where}.where", "a table of axis = value")
        scenario = e.get("scenario")
        _need(scenario is None or isinstance(scenario, str), f"{where}.scenario", "a scenario name")
        out.append((scenario, cond, Expectation(result, violates)))
    return out


def expand(
    scenarios: list[Path],
    axes: dict[str, list[object]],
    expectations: Sequence[Expect] = (),
    *,
    default_backend: str | None = None,
) -> list[Cell]:
    """Every scenario x every combination of the axes (in file order), validated by loading it."""
    keys = list(axes)
    cells: list[Cell] = []
    for path in scenarios:
        for key in keys:  # once per scenario file, not per combination
            if key not in ("backend", "seed"):
                _check_axis_key(path, key)
        for combo in itertools.product(*(axes[k] for k in keys)):
            values = dict(zip(keys, combo, strict=True))
            backend = str(values.pop("backend", None) or default_backend or default_backend_name())
            seed = values.pop("seed", None)
            assert seed is None or isinstance(seed, int)  # load_matrix checked the seed axis
            settings = values
            try:
                sc = load(path, seed=seed, settings=settings)
            except ScenarioError as e:
                where = ", ".join(f"{k}={toml_value(v)}" for k, v in settings.items())
                raise MatrixError(f"{path.name} with {where or 'no settings'}: {e}") from None
            cell = Cell(len(cells) + 1, path, sc.name, settings, backend, sc.seed, Expectation("pass"))
            cell.system, cell.skip = system_label(sc), unavailable(sc.system) or ""
            for name, cond, exp in expectations:
                if (name is None or name == sc.name) and all(cell.axis_value(k) == v for k, v in cond.items()):
                    cell.expect = exp
            cell.folder = f"{cell.id}-{_slug(sc.name)}-{backend}-seed{sc.seed}"
            cells.append(cell)
    return cells


def system_label(sc: Scenario) -> str:
    """The system a cell runs, with its stack: chaosbed's own members name the scenario's stack."""
    return f"chaosbed ({sc.stack})" if sc.system.native else sc.system.label


def _check_axis_key(path: Path, key: str) -> None:
    """An axis key must name a key the scenario has, or one the format defines (cluster.*, checks.*, properties)."""
    raw = tomllib.loads(path.read_text())
    parts = key.split(".")
    node: object = raw
    for i, p in enumerate(parts):
        if isinstance(node, dict) and p in node:
            node = node[p]
        elif isinstance(node, list) and p.isdigit() and int(p) < len(node):
            node = node[int(p)]
        else:
            prefix = parts[:i]
            known = (
                (prefix == [] and p in {"timeout", "name"})
                or (prefix == ["cluster"] and p in CLUSTER_KEYS)
                or (prefix == ["checks"] and p in CHECKS)
                or (prefix[:2] == ["cluster", "properties"] and len(parts) == 4)  # validated by the stack
                or (prefix[:1] in (["faults"], ["workload"]) and len(prefix) == 2)  # validated by the parser
            )
            _need(known, f"axes.{key}", f"{path.name} has no key {'.'.join(parts[: i + 1])!r}")
            return


def _grid(report: object, axes: dict[str, list[object]], many_scenarios: bool) -> tuple[list[str], list[str]]:
    if not isinstance(report, dict):
        raise MatrixError("report: a table with rows and columns")
    names = ["scenario", "system", *axes]  # system: what the members run, with its stack (always known)
    varying = [a for a in axes if len(axes[a]) > 1]
    columns = report.get("columns", varying[-1:] if varying else [])
    rows = report.get("rows", [a for a in (["scenario"] if many_scenarios else []) + varying if a not in columns])
    for key, value in (("rows", rows), ("columns", columns)):
        _need(isinstance(value, list), f"report.{key}", "a list of axes")
        for a in value:
            _need(a in names, f"report.{key}", f"{a!r} is not an axis; axes: {', '.join(names)}")
    return rows, columns


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)[:48]


def default_backend_name() -> str:
    """netns as root with the ip tool, else process (docs/scenario-format.md's default)."""
    from orchestration.cli.options import default_backend as _default_backend

    return _default_backend()

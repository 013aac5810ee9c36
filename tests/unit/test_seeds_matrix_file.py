"""The shipped seeds matrix (scenarios/matrix/seeds.toml, docs/foreign/jgroups5.md "The seeds side by side"): every
seed scenario on the real JGroups 5 and on chaosbed's own stack, netns, and every cell with the verdict its file
expects written out; a scenario file of scenarios/seeds/ that the matrix leaves out is a mistake."""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path

from orchestration.matrix.spec import load_matrix

REPO = Path(__file__).resolve().parents[2]
MATRIX = REPO / "scenarios" / "matrix" / "seeds.toml"
SEEDS = REPO / "scenarios" / "seeds"


def test_every_seed_scenario_runs_on_both_systems_on_netns() -> None:
    matrix = load_matrix(MATRIX)
    names = {path.stem for path in SEEDS.glob("*.toml")}
    per_scenario = Counter(c.scenario_name for c in matrix.cells)
    assert set(per_scenario) == names and len(names) >= 6
    assert all(n == 2 for n in per_scenario.values())
    systems = {(c.scenario_name, str(c.settings["cluster.system"])) for c in matrix.cells}
    assert systems == {(n, s) for n in names for s in ("jgroups-5", "chaosbed")}
    assert {c.backend for c in matrix.cells} == {"netns"}
    assert all(c.system.startswith("chaosbed (") for c in matrix.cells if c.settings["cluster.system"] == "chaosbed")
    assert all(c.system.startswith("jgroups-5 (5.") for c in matrix.cells if c.settings["cluster.system"] != "chaosbed")


def test_every_cell_has_a_written_expectation() -> None:
    """Each [[expect]] names its scenario; together they cover every cell (the default, pass, is never relied on)."""
    expects = tomllib.loads(MATRIX.read_text())["expect"]
    covered: set[tuple[str, str]] = set()
    for e in expects:
        assert "scenario" in e, e
        systems = [e["where"]["cluster.system"]] if "where" in e else ["jgroups-5", "chaosbed"]
        covered |= {(e["scenario"], s) for s in systems}
    cells = {(c.scenario_name, str(c.settings["cluster.system"])) for c in load_matrix(MATRIX).cells}
    assert covered == cells


def test_each_seed_file_says_what_differs_on_chaosbed() -> None:
    for path in sorted(SEEDS.glob("*.toml")):
        raw = tomllib.loads(path.read_text())
        assert raw["cluster"]["system"] == "jgroups-5", path.name
        assert "cluster.stack" in raw["per_system"]["chaosbed"], path.name

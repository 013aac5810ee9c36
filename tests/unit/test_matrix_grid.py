"""The matrix report's grid: a `cluster.system` column whose system runs a different stack per scenario (the seeds
matrix: jgroups-5 with udp-fast, tcp-noxmit-fast, a stack file) makes the axis one column per value, headed by the
value, each badge naming its system and stack; an axis whose every value has one label keeps the labels in the header
(the 2.12 side-by-side matrix)."""

from __future__ import annotations

from pathlib import Path

from orchestration.matrix.report import grid
from orchestration.matrix.results import CellResult, MatrixResult
from orchestration.matrix.spec import Cell, Expectation, Matrix


def _cell(i: int, scenario: str, system: str, label: str) -> CellResult:
    cell = Cell(i, Path(f"{scenario}.toml"), scenario, {"cluster.system": system}, "netns", 1, Expectation("pass"))
    cell.system, cell.folder = label, f"c{i:03d}"
    return CellResult(cell, "ran", checked=True)


def _grid(results: list[CellResult]) -> str:
    axes: dict[str, list[object]] = {"cluster.system": ["jgroups-5", "chaosbed"]}
    matrix = Matrix("m", None, [r.cell for r in results], axes, ["scenario"], ["cluster.system"])
    return grid(MatrixResult(matrix, Path("."), results))


def test_a_system_with_a_stack_per_scenario_is_one_column_and_each_badge_names_its_stack() -> None:
    html = _grid(
        [
            _cell(1, "u", "jgroups-5", "jgroups-5 (5.5.6, udp-fast)"),
            _cell(2, "u", "chaosbed", "chaosbed (unicast3)"),
            _cell(3, "n", "jgroups-5", "jgroups-5 (5.4.3, tcp-noxmit-fast)"),
            _cell(4, "n", "chaosbed", "chaosbed (unicast3)"),
        ]
    )
    head = html[: html.index("</tr>")]
    assert head.count("<th>") == 3 and "<th>jgroups-5</th>" in head and "<th>chaosbed</th>" in head  # not per stack
    assert "jgroups-5 (5.4.3, tcp-noxmit-fast)</span>" in html and "jgroups-5 (5.5.6, udp-fast)</span>" in html
    assert html.count("chaosbed (unicast3)</span>") == 2


def test_a_system_with_one_stack_keeps_its_label_in_the_header() -> None:
    html = _grid(
        [
            _cell(1, "u", "jgroups-5", "jgroups-5 (5.5.6, udp-fast)"),
            _cell(2, "u", "chaosbed", "chaosbed (unicast3)"),
        ]
    )
    assert "<th>jgroups-5 (5.5.6, udp-fast)</th>" in html and "<th>chaosbed (unicast3)</th>" in html
    assert "</span>" not in html

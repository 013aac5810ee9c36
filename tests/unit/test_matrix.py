"""Matrix files: expansion into cells, expectations, replay commands, and bad files that exit 2 naming the problem."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestration.cli.main import main
from orchestration.matrix.spec import MatrixError, load_matrix
from orchestration.scenario import load

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.toml"
    path.write_text(text)
    return path


def base(axes: str = "", extra: str = "") -> str:
    files = f'["{SCENARIOS}/crash-rejoin.toml", "{SCENARIOS}/flapping-link.toml"]'
    return f'name = "t"\nscenarios = {files}\n{extra}\n[axes]\n{axes}\n'


def test_cells_are_every_scenario_times_every_combination_in_file_order(tmp_path: Path) -> None:
    m = load_matrix(
        write(
            tmp_path,
            base('"cluster.stack" = ["unicast3+nakack2", "unicast2+nakack2"]\nseed = [1, 2, 3]\nbackend = ["sim"]'),
        )
    )
    assert len(m.cells) == 12
    first = m.cells[0]
    assert (first.scenario_name, first.settings, first.seed, first.backend) == (
        "crash-rejoin",
        {"cluster.stack": "unicast3+nakack2"},
        1,
        "sim",
    )
    assert [c.seed for c in m.cells[:3]] == [1, 2, 3]
    assert len({c.folder for c in m.cells}) == 12, "every cell has its own run folder"
    assert m.rows == ["scenario", "cluster.stack"] and m.columns == ["seed"]


def test_backend_option_replaces_the_backend_axis(tmp_path: Path) -> None:
    m = load_matrix(write(tmp_path, base('backend = ["netns", "sim"]')), backend="sim")
    assert {c.backend for c in m.cells} == {"sim"} and len(m.cells) == 2


def test_expectations_apply_to_the_cells_they_match(tmp_path: Path) -> None:
    text = base(
        '"cluster.stack" = ["unicast3+nakack2", "unicast2+nakack2"]\nbackend = ["sim"]',
        '[[expect]]\nscenario = "crash-rejoin"\nwhere = { "cluster.stack" = "unicast2+nakack2" }\n'
        'result = "fail"\nviolates = ["timeout"]',
    )
    m = load_matrix(write(tmp_path, text))
    expected = {(c.scenario_name, c.settings["cluster.stack"]): c.expect for c in m.cells}
    assert expected[("crash-rejoin", "unicast2+nakack2")].result == "fail"
    assert expected[("crash-rejoin", "unicast2+nakack2")].met(["timeout"])
    assert not expected[("crash-rejoin", "unicast2+nakack2")].met(["timeout", "complete"])
    assert not expected[("crash-rejoin", "unicast2+nakack2")].met([])
    assert expected[("flapping-link", "unicast2+nakack2")].result == "pass"


def test_the_replay_command_loads_the_same_scenario(tmp_path: Path) -> None:
    m = load_matrix(
        write(
            tmp_path,
            base('"cluster.properties.unicast3.xmit_interval" = ["200ms"]\n"checks.fifo" = [true]\nseed = [4]'),
        )
    )
    cell = m.cells[0]
    argv = shlex.split(cell.replay())
    assert argv[:3] == ["chaosbed", "run", argv[2]] and Path(argv[2]).resolve() == cell.scenario.resolve()
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    replayed = load(argv[2], sets, int(argv[argv.index("--seed") + 1]))
    direct = cell.load()
    assert replayed.raw == direct.raw and replayed.seed == 4
    assert replayed.properties["unicast3"]["xmit_interval"] == "200ms" and replayed.checks["fifo"] is True


@pytest.mark.parametrize(
    ("axes", "extra", "message"),
    [
        ('"cluster.stak" = ["unicast2"]', "", "axes.cluster.stak: crash-rejoin.toml has no key 'cluster.stak'"),
        ('"cluster.stack" = []', "", "axes.cluster.stack: is empty"),
        ('"cluster.stack" = ["nope"]', "", "cluster.stack: unknown stack 'nope'"),
        ("seed = [-1]", "", "axes.seed: not a seed: -1"),
        ('backend = ["vm"]', "", "axes.backend: unknown backend 'vm'"),
        ('"cluster.members" = [3, 3]', "", "axes.cluster.members: has a value twice"),
        ("", '[[expect]]\nresult = "maybe"', "expect[0].result: pass | fail"),
        ("", '[[expect]]\nviolates = ["slow"]', "expect[0].violates: unknown check 'slow'"),
        ("", '[report]\ncolumns = ["colour"]', "report.columns: 'colour' is not an axis"),
        ("", "colour = 1", "colour: unknown key"),
    ],
)
def test_bad_matrix_files_exit_2_naming_the_problem(tmp_path: Path, axes: str, extra: str, message: str) -> None:
    text = base(axes, extra) if extra != "colour = 1" else extra + "\n" + base(axes)
    path = write(tmp_path, text)
    with pytest.raises(MatrixError) as e:
        load_matrix(path)
    assert message in str(e.value)
    result = CliRunner().invoke(main, ["matrix", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "out").exists(), "nothing runs, nothing is written"


@pytest.mark.parametrize(
    ("scenarios", "message"),
    [
        ('["nowhere/*.toml"]', "scenarios: 'nowhere/*.toml' matches no file"),
        ('["missing.toml"]', "scenarios: 'missing.toml' matches no file"),
        ("[]", "scenarios: a non-empty list of paths or globs"),
        ('"x.toml"', "scenarios: a non-empty list of paths or globs"),
    ],
)
def test_bad_scenario_globs_exit_2(tmp_path: Path, scenarios: str, message: str) -> None:
    path = write(tmp_path, f'name = "t"\nscenarios = {scenarios}\n')
    result = CliRunner().invoke(main, ["matrix", str(path)])
    assert result.exit_code == 2 and message in result.output, result.output


def test_globs_are_relative_to_the_matrix_file(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    for name in ("b", "a"):
        (tmp_path / "s" / f"{name}.toml").write_text((SCENARIOS / "crash-rejoin.toml").read_text())
    m = load_matrix(write(tmp_path, 'scenarios = ["s/*.toml"]\n[axes]\nbackend = ["sim"]\n'))
    assert [c.scenario.name for c in m.cells] == ["a.toml", "b.toml"]

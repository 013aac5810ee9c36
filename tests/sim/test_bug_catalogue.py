"""The known-bug catalogue on the simulator: every bug's flawed variant violates exactly the checks its file names,
its fixed variant passes (all bugs as one matrix, checked in one pass); and `chaosbed bugs` lists and runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestration.cli.main import main
from orchestration.matrix.bugs import catalogue
from orchestration.matrix.results import MatrixResult
from orchestration.scenario import load
from tests.bug_catalogue import BUG_FILES, FOREIGN_BUG_FILES, NATIVE_BUG_FILES, assert_reproduced, run_catalogue

pytestmark = [pytest.mark.sim]


@pytest.fixture(scope="module")
def sim_catalogue(tmp_path_factory: pytest.TempPathFactory) -> tuple[list, MatrixResult]:
    return run_catalogue("sim", tmp_path_factory.mktemp("bugs-sim"))


def test_the_catalogue_has_the_bugs_issue_11_names() -> None:
    ids = " ".join(e.bug.id for e in catalogue())
    for needed in ("UNICAST2", "JGRP-1563", "JGRP-1548", "JGRP-1873", "JGRP-1874", "JGRP-1578", "JGRP-1904",
                   "JGRP-2675", "JGRP-2853", "JGRP-940"):  # fmt: skip
        assert needed in ids, f"no catalogue entry names {needed}: {ids}"


@pytest.mark.parametrize("path", BUG_FILES, ids=[p.stem for p in BUG_FILES])
def test_every_bug_file_documents_itself(path: Path) -> None:
    """A comment at the top says what the bug was, the faults, the symptom and the source; the [bug] table says
    where it is documented and what breaks."""
    text = path.read_text()
    assert text.startswith("#") and len([ln for ln in text.splitlines() if ln.startswith("#")]) >= 3
    bug = load(path).bug
    assert bug is not None and bug.source and bug.breaks and bug.layer


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("path", NATIVE_BUG_FILES, ids=[p.stem for p in NATIVE_BUG_FILES])
def test_flawed_fails_with_the_named_checks_and_fixed_passes_on_sim(path: Path, sim_catalogue) -> None:  # type: ignore[no-untyped-def]
    entries, result = sim_catalogue
    assert_reproduced(result, path, entries)


@pytest.mark.spark
@pytest.mark.slow
def test_the_real_jar_bugs_are_skipped_on_sim_with_the_reason(sim_catalogue) -> None:  # type: ignore[no-untyped-def]
    """The simulator runs chaosbed's own protocols: the JGroups jar's bugs are skipped there, not failed."""
    _, result = sim_catalogue
    assert FOREIGN_BUG_FILES
    for path in FOREIGN_BUG_FILES:
        cells = [r for r in result.results if r.cell.scenario == path]
        assert cells and all(r.status == "skipped" and r.ok for r in cells), [(r.status, r.error) for r in cells]
        assert all("runs on the process, netns, docker backends, not sim" in str(r.error) for r in cells)
    assert result.ok


def test_chaosbed_bugs_lists_the_catalogue() -> None:
    result = CliRunner().invoke(main, ["bugs"], terminal_width=400)
    assert result.exit_code == 0, result.output
    for e in catalogue():
        assert e.path.stem in result.output and e.bug.id in result.output


def test_bugs_run_needs_a_name_or_all_and_names_unknown_bugs() -> None:
    result = CliRunner().invoke(main, ["bugs", "run"])
    assert result.exit_code == 2 and "name one bug" in result.output
    result = CliRunner().invoke(main, ["bugs", "run", "no-such-bug", "--backend", "sim"])
    assert result.exit_code == 2 and "no bug 'no-such-bug' in the catalogue" in result.output


@pytest.mark.spark
@pytest.mark.slow
def test_bugs_run_one_prints_both_variants_side_by_side(tmp_path: Path) -> None:
    name = BUG_FILES[0].stem
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestration", "bugs", "run", name, "--backend", "sim", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "side by side" in proc.stdout and "flawed (sim)" in proc.stdout and "fixed (sim)" in proc.stdout
    doc = json.loads((out / "matrix.json").read_text())
    assert [c["label"] for c in doc["cells"]] == ["flawed", "fixed"] and doc["ok"] is True

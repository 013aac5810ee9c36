"""`chaosbed matrix` end to end on the simulator: 12 cells with -j 2, one check pass, matrix.json, and a report
whose grid links every cell to its run and lists the replay command of every failed cell."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.sim, pytest.mark.spark, pytest.mark.slow]

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
CHAOSBED = [sys.executable, "-m", "orchestration"]


def test_a_12_cell_matrix_runs_with_2_jobs_to_one_report(tmp_path: Path) -> None:
    # JGRP-1578's flawed variant (UNICAST3 without re-acking duplicates) retransmits forever after its ACKs were lost:
    # failed cells, expected by the [[expect]] for seed 1 only, so seeds 2 and 3 fail unexpectedly.
    bug = SCENARIOS / "bugs" / "unicast3-duplicates-not-reacked.toml"
    key = "cluster.properties.unicast3.ack_duplicates"
    matrix = tmp_path / "m.toml"
    matrix.write_text(
        f'name = "twelve"\nscenarios = ["{bug}", "{SCENARIOS}/flapping-link.toml"]\n'
        f'[axes]\n"{key}" = [true, false]\nseed = [1, 2, 3]\nbackend = ["sim"]\n'
        f'[[expect]]\nscenario = "unicast3-duplicates-not-reacked"\nwhere = {{ "{key}" = false, seed = 1 }}\n'
        'result = "fail"\nviolates = ["control_per_heal", "timeout"]\n'
        f'[report]\nrows = ["scenario", "{key}"]\ncolumns = ["seed"]\n'
    )
    out = tmp_path / "out"
    proc = subprocess.run(
        [*CHAOSBED, "matrix", str(matrix), "-j", "2", "--out", str(out)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads((out / "matrix.json").read_text())
    assert doc["ok"] is False and len(doc["cells"]) == 12
    by = {(c["scenario"], c["settings"][key], c["seed"]): c for c in doc["cells"]}
    for seed in (1, 2, 3):
        assert by[("flapping-link", True, seed)]["ok"] is True
        bad = by[("unicast3-duplicates-not-reacked", False, seed)]
        assert bad["violated"] == ["control_per_heal", "timeout"] and bad["passed"] is False
        assert bad["ok"] is (seed == 1), "the expected failure is ok, the others are not"
    for c in doc["cells"]:  # every cell ran and was checked; each run folder has its own verdict and report
        assert c["status"] == "ran" and (out / c["run"] / "verdict.json").is_file()
        assert (out / c["run"] / "report.html").is_file()
        argv = shlex.split(c["replay"])
        assert argv[:2] == ["chaosbed", "run"] and "--seed" in argv and str(c["seed"]) in argv

    report = (out / "report.html").read_text()
    links = set(re.findall(r'href="([^"]+)/report.html"', report))
    assert links == {c["run"] for c in doc["cells"]}, "every grid cell links to its run's report"
    failed = [c for c in doc["cells"] if not c["passed"]]
    assert len(failed) == 3
    for c in failed:  # the replay command of every failed cell (HTML-escaped quotes)
        assert c["replay"].replace("'", "&#x27;").replace('"', "&quot;") in report
    assert "<th class='row'>unicast3-duplicates-not-reacked</th><th class='row'>false</th>" in report
    # the checker's table of every run is checks.html, linked from the grid; re-checking the folder keeps the grid
    assert "href='checks.html'" in report and (out / "checks.html").is_file()
    again = subprocess.run([*CHAOSBED, "check", str(out)], capture_output=True, text=True, timeout=600)
    assert again.returncode == 1, again.stdout + again.stderr
    assert (out / "report.html").read_text() == report
    # one line per failed cell with its replay, and the verdict as the last line
    assert proc.stdout.count("replay: chaosbed run") == 3
    assert proc.stdout.strip().splitlines()[-1].startswith("verdict: FAIL — 10 of 12 cells as expected")

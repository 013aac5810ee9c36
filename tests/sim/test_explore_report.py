"""What a failure leaves behind, made the normal way: its run folder is run by the runner and checked by the analysis
pipeline (verdict.json and report.html, as `chaosbed run` leaves them, agreeing with the search's checker), and
explore's index.html shows the failure: its checks, its minimal scenario, the timeline of its minimal run (one lane
per member) and the command that replays it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestration.cli.main import main
from orchestration.explore.timeline import read_lanes

pytestmark = [pytest.mark.sim, pytest.mark.spark, pytest.mark.slow]

BUG = Path(__file__).resolve().parents[2] / "scenarios" / "bugs" / "unicast3-duplicates-not-reacked.toml"


def test_a_failure_gets_a_checked_run_folder_and_a_section_of_index_html(tmp_path: Path) -> None:
    out = tmp_path / "x"
    args = ["explore", str(BUG), "--set", "cluster.properties.unicast3.ack_duplicates=false", "--schedules", "60",
            "--stop-at-first", "-j", "1", "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(main, args, terminal_width=200)
    assert result.exit_code == 1, result.output
    (failure,) = json.loads((out / "explore.json").read_text())["failures"]
    run = out / failure["run"]
    verdict = json.loads((run / "verdict.json").read_text())
    assert sorted({v["check"] for v in verdict["violations"]}) == failure["violated"] == failure["checked"]
    assert (run / "report.html").is_file() and (run / "scenario.toml").is_file()
    page = (out / "index.html").read_text()
    for needed in ("Failure 1", ", ".join(failure["violated"]), failure["replay"], "minimal.toml", "data:image/png",
                   f"{failure['faults_before']} as found, {failure['faults_after']} after shrinking"):  # fmt: skip
        assert needed in page, needed
    lanes = read_lanes(run)
    assert lanes.members == ["A", "B"] and lanes.xmits.get("A"), "A's retransmissions are in its lane"
    assert sum(len(b) for b in lanes.bars.values()) == failure["faults_after"]

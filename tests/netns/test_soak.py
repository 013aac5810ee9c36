"""A soak on real members (`chaosbed explore FILE --soak --backend netns`): one nemesis of kills and restarts
against a paced workload; the run checks clean, soak.json counts the faults applied and the messages, the restarted
members resume their shares so the send rate at the end is the rate at the start, and no cluster of ours is left
behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestration.cli.main import main
from tests.clusters import chaos_tests, clusters_under

pytestmark = [*chaos_tests(), pytest.mark.slow, pytest.mark.spark]

SCENARIO = """
name = "soak-test"
seed = 4
[cluster]
members = 4
stack = "unicast3+nakack2"
[cluster.properties]
fd = { interval = "0.5s", timeout = "2s", timeout_check_interval = "0.5s" }
gms = { join_timeout = "1s", discovery_timeout = "1s" }
[[workload]]
kind = "unicast"
from = "*"
to = "*"
count = 10
rate = 20
"""


def test_a_soak_of_kills_and_restarts_holds_its_load(tmp_path: Path) -> None:
    scenario, out = tmp_path / "soak.toml", tmp_path / "out"
    scenario.write_text(SCENARIO)
    args = ["explore", str(scenario), "--soak", "--backend", "netns", "--budget", "32s", "--nemesis", "kill-restart"]
    result = CliRunner().invoke(main, [*args, "--interval", "5s", "--out", str(out)], terminal_width=200)
    assert result.exit_code == 0, result.output
    soak = json.loads((out / "soak.json").read_text())
    assert soak["verdict"] == "PASS" and soak["rounds"] == 3
    assert soak["faults"] == {"kill": 3, "restart": 3}
    # 12 shares at 20/s for 17 s, less what each killed member's 3 shares did not send in its 2.5 s down
    expected = 12 * 20 * (32 - 15) - 3 * (3 * 20 * 2.5)
    assert abs(soak["sent"] - expected) <= 0.03 * expected, (soak["sent"], expected)
    assert len(soak["send_rate"]) == 10
    first, last = soak["send_rate"][0], soak["send_rate"][-1]
    assert last >= 0.9 * first > 0, soak["send_rate"]  # the restarted members send again
    assert set(soak["peak_rss_kib"]) == {"A", "B", "C", "D"}
    assert "verdict: PASS" in result.output and "replay: chaosbed explore" in result.output
    assert clusters_under(tmp_path) == []

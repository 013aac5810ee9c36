"""`chaosbed explore FILE --backend netns`: the search, the shrink by rates and the confirmation on real members.

- chaosbed's own member: a catalogue bug with its flawed setting and none of its faults is found by schedules run on
  fresh clusters (two side by side), shrunk, confirmed on fresh clusters with a rate, and its failing run is kept;
- a synthetic flaky member (tests/foreign/flaky_member.py, an inline [cluster.member]) that loses a message in every
  second run: the shrink keeps a step whose candidate failed in 1 of its 2 runs, and the confirmation calls the
  minimal scenario flaky at 50%; its earlier forms, confirmed in turn, are as flaky. No cluster of ours is left
  behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestration.cli.main import main
from orchestration.explore.worker import SCRATCH_ENV
from tests.clusters import chaos_tests, clusters_under

pytestmark = [*chaos_tests(nfqueue=True), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BUG = REPO / "scenarios" / "bugs" / "unicast2-last-message.toml"
FLAKY = REPO / "tests" / "foreign" / "flaky_member.py"


def explore(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: object) -> tuple[int, str]:
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path / "scratch"))  # the search's runs inside tmp_path
    (tmp_path / "scratch").mkdir(exist_ok=True)
    result = CliRunner().invoke(main, ["explore", *map(str, args)], terminal_width=200)
    return result.exit_code, result.output


def test_search_on_netns_finds_shrinks_and_confirms_a_catalogue_bug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "x"
    code, text = explore(tmp_path, monkeypatch, BUG, "--set", "cluster.properties.unicast2.resend_last_seqno=false",
                         "--backend", "netns", "--guide", "random", "--schedules", "6", "-j", "2", "--stop-at-first",
                         "--no-check", "--shrink-runs", "6", "--confirm-runs", "2", "--out", out)  # fmt: skip
    assert code == 1, text
    doc = json.loads((out / "explore.json").read_text())
    assert doc["backend"] == "netns" and doc["jobs"] == 2 and doc["schedules"] >= 1
    (failure,) = doc["failures"]
    assert "delivered_within" in failure["violated"]
    assert failure["faults_after"] <= failure["faults_before"] and failure["shrink"]["runs"] <= 6
    assert len(failure["shrink"]["rates"]) == len(failure["shrink"]["steps"])
    assert all(s.endswith("]") and " [1/" in s for s in failure["shrink"]["steps"])
    assert (out / failure["found_run"] / "history" / "B.jsonl").is_file(), "the failing schedule's run is kept"
    minimal = out / failure["minimal"]
    assert "replay: chaosbed run minimal.toml --backend netns" in minimal.read_text()
    assert (minimal.parent / "run" / "history" / "A.jsonl").is_file()
    confirm = failure["confirm"]
    assert confirm["backend"] == "netns" and confirm["runs"] == 2 and len(confirm["violated"]) == 2
    assert confirm["rate"] == confirm["reproduced"] / 2 and confirm["confirmed"] == (confirm["rate"] >= 0.75)
    assert confirm["parity_gap"] is False, "the simulator shows this bug too"
    for k in (1, 2):
        assert (minimal.parent / f"confirm-netns-{k}" / "faults.jsonl").is_file()
    assert failure["replay"].endswith("--backend netns") and "searched" in text and "/hour" in text
    assert clusters_under(tmp_path) == []


def flaky_scenario(path: Path, counter: Path) -> None:
    path.write_text(f"""
name = "flaky"
seed = 3
timeout = "20s"

[cluster]
members = 2
system = "flaky-rb"
transport = "udp"

[cluster.member]
command = ["python3", "{FLAKY}", "{counter}", "2", "{{config}}"]
stack = "flaky-rb"

[[workload]]
kind = "unicast"
from = "A"
to = "B"
count = 20
size = 100
rate = 50

[checks]
fifo = true
no_phantoms = true
""")


def test_the_shrink_keeps_a_step_that_fails_in_one_of_its_runs_and_the_rate_says_flaky(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario, counter, out = tmp_path / "flaky.toml", tmp_path / "runs.count", tmp_path / "x"
    flaky_scenario(scenario, counter)
    code, text = explore(tmp_path, monkeypatch, scenario, "--backend", "netns", "--guide", "random",
                         "--nemesis", "delay", "--schedules", "1", "-j", "1", "--no-check", "--shrink-runs", "4",
                         "--confirm-runs", "4", "--out", out)  # fmt: skip
    assert code == 1, text
    (failure,) = json.loads((out / "explore.json").read_text())["failures"]
    assert failure["violated"] == ["fifo"], "B delivers #2 without #1: a gap"
    rates = failure["shrink"]["rates"]
    assert [1, 2] in rates, f"a step kept at 1 failing run of 2: {failure['shrink']}"
    assert any(s.endswith("[1/2]") for s in failure["shrink"]["steps"])
    confirm = failure["confirm"]
    assert confirm["runs"] == 4 and confirm["reproduced"] == 2 and confirm["rate"] == 0.5
    assert confirm["confirmed"] is False and "flaky (50%)" in text
    assert "parity_gap" not in confirm, "a foreign system has no simulator to compare with"
    # every earlier form of the shrink loses the message in one run of two as well: none is confirmed
    reliable, steps = confirm["reliable"], len(failure["shrink"]["steps"])
    assert reliable["file"] is None and reliable["tried"], reliable
    assert all((t["runs"], t["reproduced"]) == (4, 2) for t in reliable["tried"]), reliable
    assert reliable["tried"][-1]["steps_back"] == steps, "down to the schedule as found"
    assert not (out / failure["minimal"]).with_name("reliable.toml").exists()
    assert "no earlier form confirmed" in text
    assert clusters_under(tmp_path) == []

"""Warm clusters (orchestration/explore/warm.py): one netns cluster runs schedule after schedule.

- Three schedules on one cluster: each segment's folder holds that schedule's sends only (A's message numbers go on
  from the last segment: #1-100, #101-200, #201-300), B delivered each of them in it, each is checked and passes.
- A failure found warm counts once a fresh cluster shows it (`warm-confirmed`), and the warm cluster is started
  afresh after it; a schedule with a discard aimed at a seqno runs fresh.
- `chaosbed explore --backend netns --warm K`: the search says how its schedules ran (explore.json `warm`); no
  cluster of ours is left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestration.cli.main import main
from orchestration.explore.case import load_base, scenario_of, with_faults
from orchestration.explore.real_case import REMOVE
from orchestration.explore.tables import TomlTable
from orchestration.explore.warm import WarmCluster, WarmRunner, warm_spec
from orchestration.explore.worker import SCRATCH_ENV
from tests.clusters import chaos_tests, clusters_under

pytestmark = [*chaos_tests(nfqueue=True), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BUG = REPO / "scenarios" / "bugs" / "unicast2-last-message.toml"
FIXED = "cluster.properties.unicast2.resend_last_seqno=true"
FLAWED = "cluster.properties.unicast2.resend_last_seqno=false"


def schedule(base: TomlTable, seed: int, *faults: TomlTable) -> TomlTable:
    return with_faults(base, list(faults), seed)


def sends_and_deliveries(run: Path) -> tuple[list[str], list[str]]:
    a = [json.loads(x) for x in (run / "history" / "A.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (run / "history" / "B.jsonl").read_text().splitlines()]
    return [str(e["msg_id"]) for e in a if e["event"] == "send"], [
        str(e["msg_id"]) for e in b if e["event"] == "deliver"
    ]


def test_a_warm_cluster_runs_schedule_after_schedule_each_segment_checked(tmp_path: Path) -> None:
    base = load_base(BUG, [FIXED])
    schedules = [
        schedule(base, 11),
        schedule(base, 12, {"at": "1s", "kind": "partition", "from": ["A"], "to": ["B"], "for": "0.5s"}),
        schedule(base, 13, {"at": "0.2s", "kind": "loss", "from": ["A"], "to": ["B"], "probability": 0.3, "for": "1s"}),
    ]
    warm = WarmCluster(warm_spec(scenario_of(schedules[0]), "netns"), tmp_path / "warm")
    try:
        for k, raw in enumerate(schedules):
            out = tmp_path / f"segment-{k}"
            res, why = warm.run(scenario_of(raw), out)
            assert res.error is None and res.violated == (), (k, res.details)
            assert why is None, f"schedule {k}: the cluster should stay warm, not end ({why})"
            sent, delivered = sends_and_deliveries(out)
            want = [f"A>B#{n}" for n in range(100 * k + 1, 100 * k + 101)]
            assert sent == want, f"segment {k} holds its own sends only"
            assert sorted(set(delivered)) == sorted(want), f"segment {k}: B delivered each of them"
            assert json.loads((out / "faults.jsonl").read_text().splitlines()[0])["event"] == "start"
            assert res.events > 0
        assert warm.used == 3
    finally:
        warm.close()
    assert clusters_under(tmp_path) == []


def test_a_warm_failure_counts_once_a_fresh_cluster_shows_it(tmp_path: Path) -> None:
    base = load_base(BUG, [FLAWED])
    runner = WarmRunner(tmp_path / "scratch", "netns", every=10)
    try:
        passing = runner.run(schedule(base, 21), REMOVE)
        assert passing.warm == "warm" and passing.violated == ()
        # the first burst's tail cut off: without resend_last_seqno B learns of it only from A's next burst, 4.3 s
        # after the heal (delivered_within's bound is 2 s), warm and fresh
        cut = {"at": "0.2s", "kind": "partition", "from": ["A"], "to": ["B"], "for": "0.5s"}
        failing = runner.run(schedule(base, 22, cut), REMOVE)
        assert failing.warm == "warm-confirmed" and "delivered_within" in failing.violated, failing
        assert runner.warm is None, "a warm cluster is started afresh after a failure"
        aimed = {"at": "0s", "kind": "discard", "match": "UNICAST2.DATA(seqno=50)", "from": ["A"], "to": ["B"],
                 "count": 1}  # fmt: skip
        assert runner.run(schedule(base, 23, aimed), REMOVE).warm == "fresh-seqno"
        after = runner.run(schedule(base, 24), REMOVE)
        assert after.warm == "warm" and after.violated == ()
        assert runner.stats.started == 2 and runner.stats.restarts == {"failed": 1}
    finally:
        runner.close()
    assert clusters_under(tmp_path) == []


def test_explore_on_warm_clusters_says_how_its_schedules_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    out = tmp_path / "x"
    result = CliRunner().invoke(main, ["explore", str(BUG), "--set", FIXED, "--backend", "netns", "--warm", "4",
                                       "--schedules", "6", "-j", "2", "--no-check", "--shrink-runs", "2",
                                       "--confirm-runs", "1", "--out", str(out)], terminal_width=200)  # fmt: skip
    assert result.exit_code in (0, 1), result.output
    doc = json.loads((out / "explore.json").read_text())
    assert doc["warm"]["every"] == 4
    assert sum(doc["warm"]["schedules"].values()) == doc["schedules"] == 6
    assert doc["warm"]["schedules"].get("warm", 0) >= 1, doc["warm"]
    assert "warm clusters (afresh every 4)" in result.output
    assert "--warm 4" in doc["command"]
    assert clusters_under(tmp_path) == []

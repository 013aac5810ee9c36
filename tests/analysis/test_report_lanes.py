"""A long run's report (analysis/report_lanes.py): faults in rounds (a [[nemesis]] round as faults.jsonl tags it, else
faults whose windows overlap, a kill lasting until its restart), and past LANES_AFTER faults a lane per member and a
table with a row per round instead of one label and one row per fault."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.config import CheckConfig
from analysis.membership import build_run_info, fault_intervals
from analysis.report_lanes import LANES_AFTER, fault_rounds, grouped, touched
from orchestration.cli.main import main
from orchestration.scenario import parse

S = 1_000_000_000


def info_of(records: list[dict]):
    members = ["A", "B", "C", "D"]
    lines = [{"event": "fault", "seed": 1, **r} for r in records]
    return build_run_info("r", {m: {} for m in members}, {}, [], lines, CheckConfig(), (0, 100 * S))


def test_overlapping_faults_form_one_round_and_a_kill_lasts_until_its_restart() -> None:
    info = info_of(
        [
            {"t": 1 * S, "kind": "partition", "id": "f1", "from": ["A"], "to": ["B"], "for": "2s"},
            {"t": 2 * S, "kind": "loss", "id": "f2", "from": ["C"], "to": ["D"], "probability": 0.5, "for": "2s"},
            {"t": 10 * S, "kind": "kill", "member": "C"},
            {"t": 14 * S, "kind": "partition", "id": "f3", "from": ["A"], "to": ["D"], "for": "1s"},
            {"t": 16 * S, "kind": "restart", "member": "C"},
            {"t": 30 * S, "kind": "pause", "member": "D"},
        ]
    )
    rounds = fault_rounds(info)
    assert [[f.kind for f in r.faults] for r in rounds] == [
        ["partition", "loss"],
        ["kill", "partition", "restart"],  # the partition at 14 s starts while C is down: the same round
        ["pause"],
    ]
    assert [r.number for r in rounds] == [1, 2, 3]
    assert (rounds[0].t, rounds[0].end) == (1 * S, 4 * S)
    assert rounds[1].summary() == "kill C; partition A→D; restart C"


def test_nemesis_rounds_come_from_the_tags_not_from_overlap() -> None:
    info = info_of(
        [  # round 1 of entry 0 has two faults apart in time; round 2 overlaps round 1's second fault
            {
                "t": 1 * S,
                "kind": "partition",
                "id": "f1",
                "from": ["A"],
                "to": ["B"],
                "for": "1s",
                "nemesis": 0,
                "round": 1,
            },
            {
                "t": 5 * S,
                "kind": "partition",
                "id": "f2",
                "from": ["A"],
                "to": ["C"],
                "for": "3s",
                "nemesis": 0,
                "round": 1,
            },
            {
                "t": 6 * S,
                "kind": "partition",
                "id": "f3",
                "from": ["B"],
                "to": ["C"],
                "for": "1s",
                "nemesis": 0,
                "round": 2,
            },
            {"t": 6 * S, "kind": "kill", "member": "D", "nemesis": 1, "round": 1},  # another entry, same time
            {"t": 7 * S, "kind": "restart", "member": "D", "nemesis": 1, "round": 1},
        ]
    )
    rounds = fault_rounds(info)
    # in time order; at 6 s the kill (kinds in name order at one instant) makes its round first
    names = [[f.record.get("id", f.kind) for f in r.faults] for r in rounds]
    assert names == [["f1", "f2"], ["kill", "restart"], ["f3"]]
    assert {(r.faults[0].record["nemesis"], r.faults[0].record["round"]) for r in rounds} == {(0, 1), (0, 2), (1, 1)}


def test_the_members_a_fault_touches() -> None:
    info = info_of(
        [
            {"t": 1 * S, "kind": "split", "id": "f1", "groups": [["A", "B"], ["C", "D"]], "for": "1s"},
            {"t": 1 * S, "kind": "partition", "id": "f2", "from": ["A"], "to": ["C"], "for": "1s"},
            {"t": 1 * S, "kind": "discard", "id": "f3", "match": "GMS.VIEW()", "for": "1s"},
            {"t": 1 * S, "kind": "kill", "member": "B"},
        ]
    )
    by_kind = {f.kind: touched(f, info.members) for f in info.faults}
    assert by_kind == {
        "split": {"A", "B", "C", "D"},
        "partition": {"A", "C"},
        "discard": {"A", "B", "C", "D"},  # no from/to: every member's traffic
        "kill": {"B"},
    }


def test_a_nemesis_tags_each_fault_with_its_entry_and_round() -> None:
    scenario = parse(
        {
            "cluster": {"members": 5},
            "workload": [{"kind": "unicast", "from": "A", "to": "B", "count": 10}],
            "nemesis": [
                {"kind": "combined", "start": "1s", "interval": "2s", "for": "1s", "rounds": 12, "seed": 5},
                {"kind": "isolate-one", "start": "1s", "interval": "3s", "for": "1s", "rounds": 2, "seed": 6},
            ],
        }
    )
    tagged = [f for f in scenario.faults if f.nemesis is not None]
    assert len(tagged) == len(scenario.faults) > 12
    for f in tagged:
        index, rnd = f.nemesis
        interval = (2.0, 3.0)[index]
        assert 1.0 + (rnd - 1) * interval <= f.at < 1.0 + rnd * interval, (f.kind, f.at, f.nemesis)
    kills = [f for f in tagged if f.kind == "kill"]
    for k in kills:  # a kill's restart belongs to the kill's round
        member = k.args["member"]
        restart = next(f for f in tagged if f.kind == "restart" and f.args["member"] == member and f.at > k.at)
        assert restart.nemesis == k.nemesis
    assert {f.nemesis[1] for f in tagged if f.nemesis[0] == 0} == set(range(1, 13))


LONG = """
name = "long"
seed = 2
timeout = "60s"
[cluster]
members = 4
stack = "unicast3+nakack2"
[cluster.properties]
fd = { interval = "0.3s", timeout = "1s", timeout_check_interval = "0.3s" }
gms = { join_timeout = "1s", discovery_timeout = "1s" }
merge = { min_interval = "0.5s", max_interval = "2s" }
[[workload]]
kind = "unicast"
from = "*"
to = "*"
count = 200
rate = 20
[[nemesis]]
kind = "isolate-one"
start = "1s"
interval = "0.5s"
for = "0.25s"
rounds = 14
"""


@pytest.mark.spark
@pytest.mark.slow
def test_a_long_run_report_has_lanes_and_a_row_per_round(tmp_path: Path) -> None:
    scenario, out = tmp_path / "long.toml", tmp_path / "out"
    scenario.write_text(LONG)
    result = CliRunner().invoke(
        main, ["run", str(scenario), "--backend", "sim", "--out", str(out)], catch_exceptions=False
    )
    assert result.exit_code in (0, 1), result.output
    faults = [json.loads(line) for line in (out / "faults.jsonl").read_text().splitlines()][1:]
    tagged = [f for f in faults if f["kind"] != "heal"]
    assert len(tagged) == 14 > LANES_AFTER
    assert [(f["nemesis"], f["round"]) for f in tagged] == [(0, r) for r in range(1, 15)]
    assert all("round" not in f for f in faults if f["kind"] == "heal")
    page = (out / "report.html").read_text()
    assert len(re.findall(r'<img alt="plot" src="data:image/png;base64,', page)) == 3  # timeline, lanes, latency
    assert "14 faults in 14 rounds" in page
    assert len(re.findall(r"<details><summary>1</summary>", page)) == 14
    assert "nemesis=" not in page  # the tags group the rows; they are not shown as details


def test_a_short_run_keeps_one_row_per_fault() -> None:
    info = info_of(
        [{"t": i * S, "kind": "partition", "id": f"f{i}", "from": ["A"], "to": ["B"], "for": "1s"} for i in range(12)]
    )
    assert not grouped(info)
    info.faults.extend(fault_intervals([{"t": 50 * S, "kind": "kill", "member": "A"}]))
    assert grouped(info)

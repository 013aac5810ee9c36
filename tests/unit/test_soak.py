"""A soak's scenario (orchestration/explore/soak.py): FILE's paced workloads stretched over the budget, one nemesis
filling it, errors that name the field; its summary's send rate over the run; the CLI refuses search-only options."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestration.cli.main import main
from orchestration.explore.soak import FIRST_ROUND_S, SETTLE_S, SoakPlan, SoakSummary, send_rate, soak_scenario
from orchestration.scenario import ScenarioError, parse

BASE = {
    "name": "base",
    "seed": 3,
    "cluster": {"members": 4, "stack": "unicast3+nakack2"},
    "workload": [
        {"kind": "unicast", "from": "*", "to": "*", "count": 10, "rate": 20},
        {"kind": "multicast", "from": ["A"], "count": 10, "rate": 50, "start": "2s"},
    ],
}


def test_workloads_send_for_the_whole_run_and_the_nemesis_fills_it() -> None:
    plan = SoakPlan(120.0, "combined", 10.0, seed=9)
    raw = soak_scenario(BASE, plan)
    sending = 120.0 - SETTLE_S
    assert [w["count"] for w in raw["workload"]] == [math.ceil(20 * sending), math.ceil(50 * (sending - 2))]
    (nemesis,) = raw["nemesis"]
    assert nemesis["rounds"] == plan.rounds == math.floor((sending - FIRST_ROUND_S) / 10.0)
    assert (nemesis["kind"], nemesis["interval"], nemesis["for"], nemesis["seed"]) == ("combined", "10s", "5s", 9)
    sc = parse(raw)
    assert sc.faults and max(f.at + (f.duration or 0) for f in sc.faults) <= sending + 1e-9
    assert sc.timeout > 120.0 and sc.seed == 9 and sc.name == "base-soak"
    assert BASE["workload"][0]["count"] == 10  # the base is left as it was


@pytest.mark.parametrize(
    ("change", "plan", "message"),
    [
        ({"workload": [{"kind": "unicast", "from": "*", "to": "*", "count": 10}]}, SoakPlan(60), "workload[0].rate"),
        ({"workload": []}, SoakPlan(60), "workload: a soak needs a workload"),
        ({}, SoakPlan(20), "--budget: a soak needs at least 27s"),
        ({}, SoakPlan(60, interval=0), "--interval: a nemesis round needs a duration > 0"),
        ({}, SoakPlan(60, "partition"), "--nemesis 'partition': a soak runs one nemesis kind"),
        ({"cluster": {"members": 2}}, SoakPlan(60, "bridge"), "cluster.members: the bridge nemesis needs 3 members"),
    ],
)
def test_what_cannot_be_soaked_is_named(change: dict, plan: SoakPlan, message: str) -> None:
    with pytest.raises(ScenarioError, match=message.replace("[", r"\[").replace("]", r"\]").replace("'", ".")):
        soak_scenario({**BASE, **change}, plan)


def test_send_rate_in_tenths_of_the_run(tmp_path: Path) -> None:
    history = tmp_path / "history"
    history.mkdir()
    s = 1_000_000_000
    lines = [{"t": 5 * s + i * s // 10, "event": "send", "member": "A"} for i in range(100)]  # 10/s for 10 s
    lines += [{"t": 5 * s + i * s, "event": "deliver", "member": "A"} for i in range(10)]  # not counted
    (history / "A.jsonl").write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
    (history / "B.jsonl").write_text(
        "".join(json.dumps({"t": 5 * s + i * s // 2, "event": "send"}) + "\n" for i in range(10))  # 2/s for 5 s
    )
    rates = send_rate(history, 10.0)
    assert rates == [12.0] * 5 + [10.0] * 5
    summary = SoakSummary("netns", 2, "combined", 25.0, 1, {"kill": 1}, 110, 200, 3, "PASS", [], rates, {"A": 2048})
    assert summary.held() == pytest.approx(10 / 12)
    text = "\n".join(summary.lines())
    assert "1 faults applied (1 kill)" in text and "held 83%" in text and "peak RSS: 2.0 MiB (A" in text


def test_search_options_are_refused_for_a_soak(tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text('[cluster]\nmembers = 3\n[[workload]]\nkind = "unicast"\nfrom = "A"\nto = "B"\nrate = 5\n')
    result = CliRunner().invoke(main, ["explore", str(scenario), "--soak", "--backend", "netns", "--schedules", "5"])
    assert result.exit_code == 2 and "--schedules is for a search" in result.output
    result = CliRunner().invoke(main, ["explore", str(scenario), "--interval", "5s", "--schedules", "1"])
    assert result.exit_code == 2 and "interval is for a soak" in result.output

"""explore's shrinker (orchestration/explore/shrink.py, steps.py): a step is taken only if the smaller scenario fails
with exactly the same checks (a step that would change them is rejected), it terminates within its run bound, it
does not depend on the number of workers, and what it produces is a valid scenario."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from node.units import parse_duration
from orchestration.explore.case import CaseResult, load_base, run_case, scenario_of, with_faults
from orchestration.explore.shrink import Judge, shrink
from orchestration.explore.steps import candidates, without_member

pytestmark = pytest.mark.sim

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def failing() -> dict[str, Any]:
    """A 4-member scenario with five faults, two workloads and a property table."""
    raw = {
        "name": "shrink-me",
        "seed": 3,
        "timeout": "30s",
        "cluster": {"members": 4, "stack": "unicast3+nakack2", "properties": {"nakack2": {"xmit_interval": "200ms"}}},
        "workload": [
            {"kind": "unicast", "from": "*", "to": "*", "count": 64, "size": 100, "rate": 20},
            {"kind": "multicast", "from": ["A", "C"], "count": 32, "size": 100, "rate": 20},
        ],
    }
    faults = [
        {"at": "0.5s", "kind": "partition", "from": ["A"], "to": ["B"], "one_way": True, "for": "2s"},
        {"at": "1s", "kind": "split", "groups": [["A", "C"], ["B", "D"]], "for": "1.6s"},
        {"at": "1.2s", "kind": "kill", "member": "D"},
        {"at": "2.4s", "kind": "restart", "member": "D"},
        {"at": "2s", "kind": "loss", "from": ["C"], "to": ["A", "D"], "probability": 0.2, "for": "0.8s"},
    ]
    return with_faults(raw, faults, 3)


def fake(verdict: Any) -> Any:
    """An evaluate() that judges each scenario with `verdict(raw) -> violated` instead of running it."""

    def evaluate(raws: list[dict[str, Any]]) -> list[CaseResult]:
        for raw in raws:
            scenario_of(raw)  # every candidate is a valid scenario
        return [CaseResult(tuple(verdict(raw))) for raw in raws]

    return evaluate


def kinds(raw: dict[str, Any]) -> list[str]:
    return [f["kind"] for f in raw.get("faults", [])]


def test_a_step_that_changes_the_violated_checks_is_rejected() -> None:
    """The failure is 'complete' while the split is there; without the loss it would be 'complete, fifo': removing
    the loss is rejected, everything else that keeps the split is taken."""

    def verdict(raw: dict[str, Any]) -> list[str]:
        if "split" not in kinds(raw):
            return []
        return ["complete"] if "loss" in kinds(raw) else ["complete", "fifo"]

    out = shrink(failing(), ("complete",), fake(verdict))
    assert sorted(kinds(out.raw)) == ["loss", "split"], out.trail
    assert out.violated == ("complete",) and out.complete
    assert not any("removed loss" in step for step in out.trail)
    assert out.rejected > 0 and out.runs == len(out.trail) + out.rejected  # no leave here: every candidate ran


def test_shrinking_goes_all_the_way_down_when_everything_fails_and_stays_valid() -> None:
    out = shrink(failing(), ("complete",), fake(lambda raw: ["complete"]), max_runs=10_000)
    assert out.complete and out.raw.get("faults") is None
    assert out.raw["cluster"]["members"] == 2 and "properties" not in out.raw["cluster"]
    assert [w["count"] for w in out.raw["workload"]] == [1] and out.raw["workload"][0]["size"] == 0
    scenario_of(out.raw)


def test_windows_get_shorter_and_later_but_never_below_the_floor() -> None:
    def verdict(raw: dict[str, Any]) -> list[str]:
        split = [f for f in raw.get("faults", []) if f["kind"] == "split"]
        return (
            ["views_converge"]
            if split and parse_duration(split[0]["at"]) + parse_duration(split[0]["for"]) >= 2.5
            else []
        )

    out = shrink(failing(), ("views_converge",), fake(verdict), max_runs=10_000)
    (split,) = out.raw["faults"]
    at, length = parse_duration(split["at"]), parse_duration(split["for"])
    assert at + length >= 2.5 and at > 1.0 and 0.02 <= length < 1.6, split
    assert any(step.startswith("later:") for step in out.trail)


def test_shrinking_terminates_within_its_run_bound() -> None:
    out = shrink(failing(), ("complete",), fake(lambda raw: ["fifo"]), max_runs=7)
    assert out.runs == 7 and not out.complete and out.trail == [] and out.raw == failing()
    out = shrink(failing(), ("complete",), fake(lambda raw: ["fifo"]))
    assert out.complete and out.trail == [] and out.runs == len(list(candidates(failing())))


def test_the_result_does_not_depend_on_the_batch_size() -> None:
    def verdict(raw: dict[str, Any]) -> list[str]:
        return ["complete"] if "kill" in kinds(raw) and raw["cluster"]["members"] != 2 else []

    one = shrink(failing(), ("complete",), fake(verdict), batch=1)
    five = shrink(failing(), ("complete",), fake(verdict), batch=5)
    assert (one.raw, one.trail, one.runs) == (five.raw, five.trail, five.runs)


def test_a_differential_judge_keeps_the_control_passing() -> None:
    """With a control (here: the same scenario with the property table removed), a step is taken only if the control
    still passes: the xmit_interval that makes the difference stays."""

    def verdict(raw: dict[str, Any]) -> list[str]:
        return [] if raw["cluster"].get("properties") else ["complete"]

    def control(raw: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(raw)
        out["cluster"]["properties"] = {"nakack2": {"xmit_interval": "200ms"}}
        return out

    def subject(raw: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(raw)
        out["cluster"].pop("properties", None)
        return out

    out = shrink(failing(), Judge(("complete",), subject=subject, control=control), fake(verdict), max_runs=10_000)
    assert out.complete and out.runs % 2 == 0


def test_removing_a_member_takes_it_out_of_workloads_and_faults() -> None:
    raw = without_member(failing(), "B")
    assert raw["cluster"]["members"] == ["A", "C", "D"]
    assert all(f.get("member") != "B" and "B" not in f.get("from", []) for f in raw["faults"])
    assert [f["kind"] for f in raw["faults"]] == ["split", "kill", "restart", "loss"]  # A -> B went
    assert raw["faults"][0]["groups"] == [["A", "C"], ["D"]]
    assert without_member(failing(), "D")["cluster"]["members"] == 3
    scenario_of(raw)


@pytest.mark.slow
def test_a_real_failure_shrinks_and_still_fails_the_same_way(tmp_path: Path) -> None:
    """unicast3-duplicates-not-reacked, flawed: every ACK from B to A lost for a while; shrunk in the simulator."""
    base = load_base(
        SCENARIOS / "bugs" / "unicast3-duplicates-not-reacked.toml",
        ["cluster.properties.unicast3.ack_duplicates=false"],
    )
    raw = with_faults(base, [
        {"at": "0.1s", "kind": "discard", "match": "UNICAST3.ACK()", "from": ["B"], "to": ["A"], "for": "1s"},
        {"at": "0.3s", "kind": "delay", "from": ["A"], "to": ["B"], "delay": "20ms", "for": "1s"},
    ], 5)  # fmt: skip
    first = run_case(raw, tmp_path / "first")
    assert first.violated == ("control_per_heal", "timeout"), first

    def evaluate(raws: list[dict[str, Any]]) -> list[CaseResult]:
        return [run_case(r, tmp_path / "c") for r in raws]

    out = shrink(raw, first.violated, evaluate)
    assert out.complete and len(out.raw["faults"]) == 1 and out.raw["faults"][0]["kind"] == "discard"
    assert run_case(out.raw, tmp_path / "last").violated == first.violated

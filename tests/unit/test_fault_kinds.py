"""The one declaration of fault kinds (node/fault_kinds.py) and what derives from it: scenario validation, the fault
tables' kinds, the history format's faults.jsonl kinds and fields, the checker's lasting faults."""

from __future__ import annotations

import pytest

from analysis import membership
from node import history_format
from node.fault_kinds import CUTS, JSON_TYPES, KINDS, MEMBER_ACTIONS, NETWORK, SHAPING, Category, ValueType
from orchestration.scenario import NETWORK_FAULTS, ScenarioError, parse


def test_categories() -> None:
    assert NETWORK == ("partition", "split", "loss", "delay", "reorder", "duplicate", "discard")
    assert SHAPING == ("delay", "reorder", "duplicate")
    assert CUTS == ("partition", "split")
    assert MEMBER_ACTIONS == ("kill", "restart", "pause", "resume", "close-connection", "set", "leave")
    assert [k for k, v in KINDS.items() if v.category is Category.HEAL] == ["heal"]
    assert {*NETWORK, "heal"} == NETWORK_FAULTS
    assert {*NETWORK, "link"} == membership.LASTING and set(CUTS) == membership.BLOCKS_VIEWS


def test_every_key_is_a_documented_faults_jsonl_field_of_its_json_type() -> None:
    assert tuple(KINDS) == history_format.FAULT_KINDS
    for kind in KINDS.values():
        for key in kind.keys:
            field = history_format.FAULT_FIELDS[key.name]
            assert field.type == JSON_TYPES[key.type], (kind.name, key.name)
    assert set(JSON_TYPES) == set(ValueType)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_scenario_takes_exactly_the_declared_keys(kind: str) -> None:
    spec = KINDS[kind]
    raw = {"cluster": {"members": 3}, "faults": [{"at": "1s", "kind": kind, "nope": 1}]}
    with pytest.raises(ScenarioError) as e:
        parse(raw)
    assert str(e.value) == f"faults[0].nope: not a key of a {kind} fault; it takes: " + ", ".join(
        sorted({*spec.key_names, "at"})
    )
    for missing in spec.required:
        fault = {"at": "1s", "kind": kind, **{k: "A" for k in spec.required if k != missing}}
        with pytest.raises(ScenarioError, match=rf"faults\[0\]\.{missing}: "):
            parse({"cluster": {"members": 3}, "faults": [fault]})


def test_values_are_validated_by_their_declared_type() -> None:
    def error(fault: dict) -> str:
        with pytest.raises(ScenarioError) as e:
            parse({"cluster": {"members": 3}, "faults": [{"at": "1s", **fault}]})
        return str(e.value)

    assert error({"kind": "pause", "member": "*"}) == "faults[0].member: unknown member '*'; members: A, B, C"
    assert error({"kind": "discard", "match": "UNICAST3.ACK()", "action": "zap"}) == (
        "faults[0].action: drop | delay | duplicate | reorder"
    )
    # several bad values: the first by type (member lists before probabilities before durations ...)
    assert error({"kind": "delay", "from": "Z", "to": "A", "delay": "x"}).startswith("faults[0].from: unknown member")
    assert error({"kind": "loss", "from": "A", "to": "B", "probability": 2, "for": "x"}).startswith("faults[0].for")
    fault = parse(
        {
            "cluster": {"members": 3},
            "faults": [{"at": "1s", "kind": "delay", "from": "A", "to": "*", "delay": "30ms", "jitter": 0.005}],
        }
    ).faults[0]
    assert fault.args == {"from": ["A"], "to": ["A", "B", "C"], "delay": 0.03, "jitter": 0.005}

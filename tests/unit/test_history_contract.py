"""The history contract's validator (node/history_contract.py): each way a line can break it is named by its line and
field; unknown kinds are notes; chaosbed's own writer keeps to it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from node.history_contract import ERROR, NOTE, file_problems, record_problems
from orchestration.runner import run
from orchestration.scenario import parse


def event(what: str, /, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"t": 10, "member": "B", "event": what, "incarnation": 1}
    if what in ("send", "deliver"):
        base.update(kind="unicast", sender="A" if what == "deliver" else "B", dest="B" if what == "deliver" else "A",
                    conn_id="A", seqno=1, msg_id="A>B#1", size=10)  # fmt: skip
    return {**base, **fields}


def problems(*events: dict[str, Any]) -> list[tuple[int, str | None, str, str]]:
    return [(p.line, p.field, p.severity, p.reason) for p in file_problems(list(enumerate(events, 1)), "B")]


def test_a_valid_history_has_no_problem() -> None:
    view = event("view", view_id="A|1", members=["A", "B"], merge=False)
    history = [event("start"), view, event("send"), event("deliver"), event("stop", counters={})]
    assert problems(*history, event("start", incarnation=2), event("deliver", extra="ignored")) == []


@pytest.mark.parametrize(
    ("broken", "field", "words"),
    [
        ({"t": "10"}, "t", "not int"),
        ({"t": -1}, "t", "negative"),
        ({"member": "C"}, "member", "'C' in the history of B"),
        ({"kind": "broadcast"}, "kind", "not unicast or multicast"),
        ({"seqno": None}, "seqno", "null"),
        ({"dest": "C"}, "dest", "not the receiver"),
        ({"kind": "multicast"}, "dest", "a multicast has dest null"),
        ({"conn_id": 1.5}, "conn_id", "not id"),
    ],
)
def test_each_broken_field_is_named(broken: dict[str, Any], field: str, words: str) -> None:
    found = record_problems(event("deliver", **broken), "B")
    assert len(found) == 1 and found[0][0] == field and words in found[0][1], found


def test_a_missing_field() -> None:
    rec = event("deliver")
    del rec["msg_id"]
    assert record_problems(rec, "B") == [("msg_id", "deliver has no field 'msg_id'")]
    assert record_problems({"member": "B", "event": "stop"}, "B") == [
        ("t", "no field 't' (every event has t, member and event)")
    ]


def test_order_start_first_nothing_after_stop_incarnations_count_up() -> None:
    found = problems(event("start"), event("stop"), event("deliver"), event("start", incarnation=1))
    assert [(line, field, sev) for line, field, sev, _ in found] == [(3, "event", ERROR), (4, "incarnation", ERROR)]
    assert "after `stop`" in found[0][3] and "incarnation 1 after incarnation 1" in found[1][3]
    (first,) = problems(event("send"), event("stop"))
    assert first[:2] == (1, "event") and "starts with `start`" in first[3]


def test_an_unknown_kind_is_a_note_and_chaosbed_kinds_are_allowed() -> None:
    found = problems(event("start"), event("gossip", round=3), event("xmit", peer="A", seqno=1))
    assert found == [(2, "event", NOTE, "unknown event kind 'gossip': counted, not checked")]


@pytest.mark.parametrize("stack", ["unicast3", "unicast3+nakack2"])
def test_chaosbed_own_histories_keep_to_the_contract(stack: str, tmp_path: Path) -> None:
    """The writer of chaosbed's members (node/history.py) against the contract, on the simulator: workloads, views,
    a kill and a restart (the killed incarnation has no stop: its successor's start follows)."""
    raw = {
        "name": "contract",
        "seed": 3,
        "cluster": {"members": 3, "stack": stack},
        "workload": [{"kind": "unicast", "from": "*", "to": "*", "count": 20, "rate": 100}],
        "faults": [{"at": "0.1s", "kind": "kill", "member": "C"}, {"at": "0.3s", "kind": "restart", "member": "C"}],
    }
    run(parse(raw), "sim", tmp_path)
    for path in sorted((tmp_path / "history").glob("*.jsonl")):
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        assert lines and file_problems(list(enumerate(lines, 1)), path.stem) == [], path.name

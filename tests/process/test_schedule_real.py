"""The scheduler on real member processes (process backend: no root needed): a member action that cannot start on
time is reported, never silently late; the schedule's clock start and the planned offsets are in faults.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

from orchestration.runner import run
from orchestration.scenario import parse


def test_a_member_action_held_up_by_another_is_marked_late(tmp_path: Path) -> None:
    # a restart waits until the new process answers (~100+ ms); the `set` planned at the same instant comes after it
    sc = parse(
        {
            "name": "late-action",
            "timeout": "30s",
            "cluster": {"members": 3, "stack": "unicast3"},
            "workload": [{"kind": "unicast", "from": "A", "to": "B", "count": 20, "rate": 20}],
            "faults": [
                {"at": "0.2s", "kind": "kill", "member": "C"},
                {"at": "0.5s", "kind": "restart", "member": "C"},
                {"at": "0.5s", "kind": "set", "member": "A", "property": "unicast3.xmit_interval", "value": "300ms"},
            ],
        }
    )
    outcome = run(sc, "process", tmp_path)
    start, *events = [json.loads(line) for line in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert start["event"] == "start" and start["backend"] == "process"
    by_kind = {e["kind"]: e for e in events}
    assert [e["at"] for e in events] == ["0.2s", "0.5s", "0.5s"]
    assert by_kind["kill"]["t"] - start["t"] < 200_000_000 + 20_000_000 and "late" not in by_kind["kill"]
    late = by_kind["set"]
    assert late["late"] is True and late["lag_ms"] > 20 and late["t"] - start["t"] >= 500_000_000
    assert [e["kind"] for e in outcome.late] == ["set"]

"""A member restarted after a kill resumes its share of the workload under its new incarnation (an application keeps
sending after a crash): a paced share sends what falls due from the restart on, an unpaced one what its killed
incarnation had not sent; the checker finds every message owed delivered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.reference import check_path
from orchestration.runner import run
from orchestration.scenario import parse
from orchestration.workloads import Share

pytestmark = pytest.mark.sim


def sends(out: Path, member: str, dest: str) -> dict[int, int]:
    """Sends of the member to dest per incarnation."""
    counts: dict[int, int] = {}
    for line in (out / "history" / f"{member}.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e["event"] == "send" and e.get("dest") == dest:
            counts[e["incarnation"]] = counts.get(e["incarnation"], 0) + 1
    return counts


def scenario(workload: dict[str, object], faults: list[dict[str, object]]) -> dict[str, object]:
    return {
        "name": "resume",
        "seed": 2,
        "timeout": "30s",
        "cluster": {"members": 2, "stack": "unicast3", "properties": {"unicast3": {"xmit_interval": "100ms"}}},
        "workload": [{"kind": "unicast", "from": "A", "to": "B", "size": 50, **workload}],
        "faults": faults,
    }


def test_a_paced_share_resumes_with_what_falls_due_after_the_restart(tmp_path: Path) -> None:
    raw = scenario(
        {"count": 400, "rate": 100},
        [{"at": "1s", "kind": "kill", "member": "A"}, {"at": "2s", "kind": "restart", "member": "A"}],
    )
    outcome = run(parse(raw), "sim", tmp_path)
    assert not outcome.timed_out
    got = sends(tmp_path, "A", "B")
    assert 95 <= got[1] <= 101, got  # due before the kill at 1 s: 100 (paced by the 1 ms sender loop)
    assert got[2] == 200, got  # due from 2 s on: messages 200..399
    (result,) = check_path(tmp_path).values()
    assert result.violations == [], [v.line() for v in result.violations]


def test_an_unpaced_share_resumes_with_what_the_killed_incarnation_had_not_sent(tmp_path: Path) -> None:
    # B does not hear A until 3 s: A's unpaced stream stops at its flow-control window (20,000
    # unacknowledged), then A is killed and restarted
    raw = scenario(
        {"count": 30000},
        [
            {"at": "0s", "kind": "partition", "from": ["A"], "to": ["B"], "one_way": True, "for": "3s"},
            {"at": "1s", "kind": "kill", "member": "A"},
            {"at": "2s", "kind": "restart", "member": "A"},
        ],
    )
    outcome = run(parse(raw), "sim", tmp_path)
    assert not outcome.timed_out
    got = sends(tmp_path, "A", "B")
    assert 0 < got[1] < 30000 and got[1] + got[2] == 30000, got
    (result,) = check_path(tmp_path).values()
    assert result.violations == [], [v.line() for v in result.violations]


@pytest.mark.parametrize(
    ("rate", "start", "at", "sent_before", "left"),
    [
        (100.0, 0.0, 2.0, 0, 200),  # messages 0..199 were due before 2 s
        (100.0, 1.0, 2.0, 0, 300),  # the workload started at 1 s
        (100.0, 0.0, 0.5, 0, 350),  # 0.5 s: messages 0..49 were due
        (100.0, 0.0, 9.0, 0, 0),  # after the workload's end
        (None, 0.0, 2.0, 123, 277),  # unpaced: what the earlier incarnations had not sent
    ],
)
def test_remaining(rate: float | None, start: float, at: float, sent_before: int, left: int) -> None:
    from orchestration.scenario import Workload

    share = Share(Workload("unicast", ["A"], ["B"], 400, 0, rate, start), "A", "B", sent_before=sent_before)
    assert share.remaining(at) == left

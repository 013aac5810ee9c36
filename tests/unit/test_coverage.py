"""orchestration/explore/coverage.py on a hand-written run folder: faults as windows (heals by id and for all,
member actions to their counterparts), wire counts placed against them by role (cut / rest, during / heal), view
changes and retransmissions by when they happened."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestration.explore.case import CaseResult
from orchestration.explore.coverage import HEAL_S, Window, coverage_of, view_change, windows

S = 1_000_000_000
BIN = 100_000_000


def write(path: Path, docs: list[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))


FAULTS = [
    {"event": "start", "t": 0, "seed": 1, "backend": "netns"},
    {"event": "fault", "t": 1 * S, "kind": "partition", "id": "f1", "from": ["A"], "to": ["B"], "one_way": True},
    {"event": "fault", "t": 2 * S, "kind": "split", "id": "f2", "groups": [["A"], ["B", "C"]]},
    {"event": "fault", "t": 3 * S, "kind": "heal", "faults": ["f1"]},
    {"event": "fault", "t": 4 * S, "kind": "kill", "member": "C"},
    {"event": "fault", "t": 5 * S, "kind": "heal"},
    {"event": "fault", "t": 6 * S, "kind": "restart", "member": "C"},
    {"event": "fault", "t": 7 * S, "kind": "leave", "member": "B"},
]


def test_faults_become_windows_with_their_links_and_members() -> None:
    ws = {w.kind: w for w in windows(FAULTS)}
    assert ws["partition"] == Window("partition", 1 * S, 3 * S, frozenset({("A", "B")}))
    cut = {("A", "B"), ("A", "C"), ("B", "A"), ("C", "A")}
    assert ws["split"] == Window("split", 2 * S, 5 * S, frozenset(cut))  # healed by the heal of everything
    assert ws["kill"] == Window("kill", 4 * S, 6 * S, members=frozenset({"C"}))
    assert ws["leave"] == Window("leave", 7 * S, 7 * S + int(HEAL_S * S), members=frozenset({"B"}))
    both_ways = windows([{"event": "fault", "t": 0, "kind": "partition", "id": "f1", "from": ["A"], "to": ["B"]}])
    assert both_ways == [Window("partition", 0, None, frozenset({("A", "B"), ("B", "A")}))]


def test_wire_counts_are_features_by_role_phase_and_magnitude(tmp_path: Path) -> None:
    write(tmp_path / "faults.jsonl", FAULTS[:4])
    wire = [
        {"bin": 15, "src": "A", "dst": "B", "key": "UNICAST3.DATA", "n": 40},  # 1.5 s: partition A->B cut
        {"bin": 15, "src": "B", "dst": "A", "key": "UNICAST3.ACK", "n": 3},  # the way back: not cut
        {"bin": 25, "src": "A", "dst": "*", "key": "GMS.VIEW", "n": 1},  # 2.5 s: A's multicast, cut by both
        {"bin": 35, "src": "B", "dst": "A", "key": "UNICAST3.XMIT_REQ", "n": 200},  # 3.5 s: partition healed 0.5 s ago
        {"bin": 90, "src": "C", "dst": "B", "key": "STABLE.GOSSIP", "n": 1},  # 9 s: the split still in force
        {"event": "end", "frames": 300, "read": 245, "unread": 0, "kernel_drops": 0, "bin_ms": 100},
    ]
    write(tmp_path / "wire.jsonl", wire)
    cov = coverage_of(tmp_path)
    assert cov.tapped and cov.datagrams == 245
    wire_features = {f for f in cov.features if f.startswith("wire ")}
    assert wire_features == {
        "wire partition during cut ucast UNICAST3.DATA 2",
        "wire partition during rest ucast UNICAST3.ACK 1",
        "wire partition during cut mcast GMS.VIEW 1",
        "wire split during cut mcast GMS.VIEW 1",
        "wire partition heal rest ucast UNICAST3.XMIT_REQ 3",
        "wire split during cut ucast UNICAST3.XMIT_REQ 3",
        "wire split during rest ucast STABLE.GOSSIP 1",
    }
    assert cov.targets == (
        ("A", "B", "UNICAST3.DATA"),
        ("B", "A", "UNICAST3.ACK"),
        ("B", "A", "UNICAST3.XMIT_REQ"),
        ("C", "B", "STABLE.GOSSIP"),
    )


def test_views_suspicions_and_retransmissions_are_placed_against_the_faults(tmp_path: Path) -> None:
    write(tmp_path / "faults.jsonl", FAULTS[:4])
    hist = [
        {"t": 0, "member": "A", "event": "start"},
        {"t": S // 2, "member": "A", "event": "view", "members": ["A", "B", "C"], "merge": False},
        {"t": 2 * S + S // 2, "member": "A", "event": "suspect", "peer": "B"},
        {"t": 2 * S + S // 2, "member": "A", "event": "view", "members": ["A"], "merge": False},
        {"t": 2 * S + S // 2, "member": "A", "event": "xmit", "peer": "B", "seqno": 4},
        {"t": 60 * S, "member": "A", "event": "view", "members": ["A", "B", "C"], "merge": True},
    ]
    write(tmp_path / "history" / "A.jsonl", hist)
    cov = coverage_of(tmp_path)
    assert not cov.tapped and cov.targets == ()
    assert cov.features == {
        "view join quiet",
        "suspect partition-during", "suspect split-during",
        "view shrink partition-during", "view shrink split-during",
        "xmit partition-during 1", "xmit split-during 1",
        "view merge split-during",  # the split is never healed here: it is in force to the end
    }  # fmt: skip


def test_view_changes_are_named() -> None:
    assert view_change(None, {"A"}, False) == "join"
    assert view_change({"A", "B"}, {"A"}, False) == "shrink"
    assert view_change({"A"}, {"A", "B"}, False) == "grow"
    assert view_change({"A", "B"}, {"A", "C"}, False) == "replace"
    assert view_change({"A"}, {"A", "B"}, True) == "merge"
    assert view_change({"A"}, {"A"}, False) == "same"


def test_damaged_lines_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "faults.jsonl").write_text('{"event": "start", "t": 0}\n{"event": "fault", "t": 1\n')
    (tmp_path / "wire.jsonl").write_text('{"bin": 1, "src": "A"}\n[1, 2]\nnot json\n')
    cov = coverage_of(tmp_path)
    assert cov.features == frozenset() and cov.tapped and cov.datagrams == 0


def test_after_every_fault_ended_the_last_one_names_the_time() -> None:
    from orchestration.explore.coverage import when

    ws = windows(FAULTS)
    assert when(ws, S // 2) == ["quiet"]
    assert sorted(when(ws, 3 * S + S // 2)) == ["partition-heal", "split-during"]
    assert when(ws, 60 * S) == ["leave-after"]  # the leave's window (to 9 s) ended last


def test_a_burst_that_stops_is_a_tail_and_a_periodic_message_is_not(tmp_path: Path) -> None:
    """A's UNICAST2.DATA to B in bins 10-14, then 1 s later in bins 25-26 (2: too few), then alone in bin 40; B's
    heartbeat every second (one a bin: never TAIL_BURST within TAIL_QUIET_S); a multicast burst of C. The schedule's
    clock reads 0 at 0.5 s."""
    write(tmp_path / "faults.jsonl", [{"event": "start", "t": 5 * BIN, "seed": 1, "backend": "netns"}])
    wire: list[dict[str, object]] = [
        {"bin": b, "src": "A", "dst": "B", "key": "UNICAST2.DATA", "n": 5} for b in range(10, 15)
    ]
    wire += [{"bin": b, "src": "A", "dst": "B", "key": "UNICAST2.DATA", "n": 1} for b in (25, 26)]
    wire += [{"bin": b, "src": "A", "dst": "B", "key": "UNICAST2.DATA", "n": 1} for b in (40,)]  # a lone one: no burst
    wire += [{"bin": b, "src": "B", "dst": "A", "key": "FD_ALL.HEARTBEAT", "n": 1} for b in range(0, 50, 10)]
    wire += [{"bin": 30, "src": "C", "dst": "*", "key": "NAKACK2.MSG", "n": 4}, {"bin": 31, "src": "C", "dst": "B",
             "key": "tcp", "n": 9}]  # fmt: skip
    wire.append({"event": "end", "frames": 1, "read": 1, "unread": 0, "kernel_drops": 0, "bin_ms": 100})
    write(tmp_path / "wire.jsonl", wire)
    cov = coverage_of(tmp_path)
    # bins 14 (after 25 in 10-14), 26 (2 in 25-26 is not a burst: left out), 30 (C's multicast); 40 is alone
    assert cov.tails == (("A", "B", "UNICAST2.DATA", 0.9, 25), ("C", "*", "NAKACK2.MSG", 2.5, 4))


def test_without_a_start_line_or_a_tap_there_are_no_tails(tmp_path: Path) -> None:
    write(tmp_path / "wire.jsonl", [{"bin": b, "src": "A", "dst": "B", "key": "X.Y", "n": 5} for b in range(3)])
    assert coverage_of(tmp_path).tails == ()
    write(tmp_path / "faults.jsonl", [{"event": "start", "t": 0, "seed": 1, "backend": "netns"}])
    assert coverage_of(tmp_path).tails == (("A", "B", "X.Y", 0.2, 15),)
    (tmp_path / "wire.jsonl").unlink()
    assert coverage_of(tmp_path).tails == ()


def test_a_workers_result_carries_its_tails_and_a_bad_one_is_named() -> None:
    res = CaseResult(tails=(("A", "*", "NAKACK2.MSG", 2.5, 40),))
    assert CaseResult.from_json(json.loads(json.dumps(res.as_json()))).tails == res.tails
    assert CaseResult.from_json({k: v for k, v in res.as_json().items() if k != "tails"}).tails == ()
    with pytest.raises(TypeError, match="tails"):
        CaseResult.from_json({**res.as_json(), "tails": [["A", "B", "X", 1.0]]})

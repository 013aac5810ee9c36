"""orchestration/explore/segment.py: a warm cluster's histories cut into one schedule's run folder."""

from __future__ import annotations

import json
from pathlib import Path

from orchestration.explore.segment import SegmentCutter


def line(**e: object) -> str:
    return json.dumps(e, separators=(",", ":")) + "\n"


def start(t: int, member: str, inc: int = 1) -> str:
    return line(t=t, member=member, incarnation=inc, event="start", address=member if inc == 1 else f"{member}/{inc}")


def view(t: int, member: str, vid: str, inc: int = 1) -> str:
    return line(t=t, member=member, incarnation=inc, event="view", view_id=vid, members=["A", "B"], merge=False)


def send(t: int, n: int) -> str:
    return line(t=t, member="A", incarnation=1, event="send", kind="unicast", sender="A", dest="B", conn_id=1,
                seqno=n, msg_id=f"A>B#{n}", size=10)  # fmt: skip


def deliver(t: int, n: int) -> str:
    return line(t=t, member="B", incarnation=1, event="deliver", kind="unicast", sender="A", sender_address="A",
                dest="B", conn_id=1, seqno=n, msg_id=f"A>B#{n}", size=10)  # fmt: skip


def append(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


def events(path: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_a_segment_has_the_members_context_its_own_lines_and_a_stop(tmp_path: Path) -> None:
    src = tmp_path / "history"
    src.mkdir()
    a, b = src / "A.jsonl", src / "B.jsonl"
    append(a, start(1, "A") + view(2, "A", "A|1") + send(3, 1))
    append(b, start(1, "B") + view(2, "B", "A|1") + deliver(4, 1))
    cutter = SegmentCutter(src)
    cutter.begin()
    append(a, send(10, 2) + send(11, 3))
    append(b, deliver(12, 2) + deliver(13, 3))
    cut = cutter.cut(tmp_path / "seg1" / "history", 20, {"A": 1, "B": 1})
    assert cut.lines == 4 and cut.leaked == []
    got = events(tmp_path / "seg1" / "history" / "A.jsonl")
    assert [e["event"] for e in got] == ["start", "view", "send", "send", "stop"]
    assert [e.get("msg_id") for e in got if e["event"] == "send"] == ["A>B#2", "A>B#3"], "not the earlier send"
    assert got[-1] == {"t": 20, "member": "A", "incarnation": 1, "event": "stop", "segment_end": True}
    # the next segment starts where this one ended (a view installed in between is context there)
    append(b, view(21, "B", "A|2"))
    cutter.begin()
    append(a, send(30, 4))
    append(b, deliver(31, 4))
    cutter.cut(tmp_path / "seg2" / "history", 40, {"A": 1})
    got_b = events(tmp_path / "seg2" / "history" / "B.jsonl")
    assert [(e["event"], e.get("view_id"), e.get("msg_id")) for e in got_b] == [
        ("start", None, None), ("view", "A|1", None), ("view", "A|2", None), ("deliver", None, "A>B#4"),
    ], "B is not running at the end: no stop"  # fmt: skip


def test_a_delivery_of_a_message_sent_before_the_segment_is_a_leak(tmp_path: Path) -> None:
    src = tmp_path / "history"
    src.mkdir()
    append(src / "A.jsonl", start(1, "A") + send(3, 1) + send(4, 2))
    append(src / "B.jsonl", start(1, "B") + deliver(5, 1))
    cutter = SegmentCutter(src)
    cutter.begin()
    append(src / "A.jsonl", send(10, 3))
    append(src / "B.jsonl", deliver(11, 3) + deliver(12, 2))
    cut = cutter.cut(tmp_path / "seg" / "history", 20, {"A": 1, "B": 1})
    assert cut.leaked == ["A>B#2"]
    append(src / "B.jsonl", deliver(21, 3))  # a duplicate between two segments
    assert cutter.begin() == 1
    assert cutter.begin() == 0


def test_deliveries_before_the_first_segment_are_not_late(tmp_path: Path) -> None:
    src = tmp_path / "history"
    src.mkdir()
    append(src / "A.jsonl", start(1, "A") + send(3, 1))
    append(src / "B.jsonl", start(1, "B") + deliver(5, 1))
    assert SegmentCutter(src).begin() == 0


def test_a_restart_resets_the_context_and_a_partial_line_waits(tmp_path: Path) -> None:
    src = tmp_path / "history"
    src.mkdir()
    append(src / "A.jsonl", start(1, "A") + view(2, "A", "A|1") + start(5, "A", 2) + view(6, "A", "A|3", 2))
    cutter = SegmentCutter(src)
    cutter.begin()
    half = send(10, 1)
    append(src / "A.jsonl", half[:20])  # a line still being written when the segment is cut
    cutter.cut(tmp_path / "s1" / "history", 11, {"A": 2})
    got = events(tmp_path / "s1" / "history" / "A.jsonl")
    assert [(e["event"], e["incarnation"]) for e in got] == [("start", 2), ("view", 2), ("stop", 2)]
    append(src / "A.jsonl", half[20:])
    cutter.begin()  # the rest of the line arrived before the next segment: it belongs before it
    cutter.cut(tmp_path / "s2" / "history", 12, {"A": 2})
    assert "send" not in (tmp_path / "s2" / "history" / "A.jsonl").read_text()
    assert "A>B#1" in cutter.sent

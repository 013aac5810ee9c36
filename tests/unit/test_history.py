from __future__ import annotations

import json
from pathlib import Path

from node.history import HistoryWriter


def test_events_are_whole_lines_flushed_per_batch(tmp_path: Path) -> None:
    path = tmp_path / "A.jsonl"
    h = HistoryWriter(str(path), "A", clock=iter(range(100)).__next__)
    h.event("send", msg_id="A>B#1")
    assert path.read_text() == ""  # buffered until the batch ends
    h.flush()
    h.event("deliver", msg_id="B>A#1")
    h.flush()
    lines = path.read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["send", "deliver"]
    assert json.loads(lines[0]) == {"t": 0, "member": "A", "incarnation": 1, "event": "send", "msg_id": "A>B#1"}


def test_a_restarted_member_does_not_glue_onto_a_cut_off_line(tmp_path: Path) -> None:
    path = tmp_path / "B.jsonl"
    path.write_text('{"t":1,"member":"B","event":"send"}\n{"t":2,"member":"B","ev')  # killed mid-write
    h = HistoryWriter(str(path), "B", incarnation=2)
    h.event("start")
    h.close()
    lines = path.read_text().splitlines()
    assert lines[1] == '{"t":2,"member":"B","ev'  # the damage stays one line
    assert json.loads(lines[2])["incarnation"] == 2

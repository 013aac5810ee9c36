from __future__ import annotations

import json
from pathlib import Path

import pytest

from node.history import HistoryWriter, encode, lines_of, write_records
from node.payload import make_payload
from node.protocols.base import Deliver, Event


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


def _all_events(h: HistoryWriter) -> None:
    """One of each event shape, through the writer's builders."""
    h.start("B/2", "unicast3+nakack2", "udp")
    h.sent("unicast", "A", 7, 1, "B/2>A#1", 20, dest_address="A/3")
    h.sent("multicast", None, None, 1, "B/2>*#1", 20)
    h.delivered(Deliver("unicast", "A/3", make_payload("A/3>B#1", 20), 9, 1))
    h.delivered(Deliver("multicast", "A/3", make_payload("A/3>*#1", 3), None, 1))
    h.protocol_events(
        [
            Event("view", {"view_id": "A/3:2", "members": ["A/3", "B/2"], "merge": False}),
            Event("conn", {"peer": "A/3", "conn_id": 7, "side": "send", "state": "open"}),
            Event("xmit", {"peer": None, "conn_id": None, "seqno": 4}),
        ]
    )
    h.stop({"stack": {"datagrams_sent": 3}, "unicast3": {"msgs_sent": 1}})


def test_builders_shape_every_event(tmp_path: Path) -> None:
    h = HistoryWriter(None, "B", 2, clock=iter(range(100)).__next__)
    _all_events(h)
    r = h.records
    assert r is not None and h.events_written == len(r) == 9
    assert [list(e) for e in r][:2] == [
        ["t", "member", "incarnation", "event", "address", "stack", "transport"],
        [
            *["t", "member", "incarnation", "event", "kind", "sender", "dest", "dest_address", "conn_id", "seqno"],
            *["msg_id", "size"],
        ],
    ]
    assert r[1]["dest_address"] == "A/3" and r[2]["dest_address"] is None  # the incarnation a unicast went to
    assert r[3] == {
        "t": 3,
        "member": "B",
        "incarnation": 2,
        "event": "deliver",
        "kind": "unicast",
        "sender": "A",
        "sender_address": "A/3",
        "dest": "B",
        "conn_id": 9,
        "seqno": 1,
        "msg_id": "A/3>B#1",
        "size": 20,
    }
    assert (r[4]["dest"], r[4]["msg_id"], r[4]["size"]) == (None, "A/3>*#1", len(make_payload("A/3>*#1")))
    assert r[5]["members"] == ["A/3", "B/2"]  # view members stay addresses
    assert r[6]["peer"] == "A" and r[7]["peer"] is None  # a peer address becomes the peer's name
    assert list(r[8]) == ["t", "member", "incarnation", "event", "counters"]


def test_memory_mode_writes_the_bytes_file_mode_writes(tmp_path: Path) -> None:
    """The simulator's records, written with write_records, are byte for byte the real member's file."""
    live = tmp_path / "live.jsonl"
    f = HistoryWriter(str(live), "B", 2, clock=iter(range(100)).__next__)
    _all_events(f)
    f.close()
    shared: list = []
    m = HistoryWriter(None, "B", 2, clock=iter(range(100)).__next__, records=shared)
    _all_events(m)
    assert m.records is shared
    write_records(tmp_path / "sim.jsonl", shared)
    assert (tmp_path / "sim.jsonl").read_bytes() == live.read_bytes() == lines_of(shared)
    assert all(line == encode(json.loads(line)) for line in live.read_text().splitlines())
    with pytest.raises(ValueError, match="not both"):
        HistoryWriter(str(live), "B", records=[])


def test_non_ascii_is_written_as_utf8(tmp_path: Path) -> None:
    path = tmp_path / "Ä.jsonl"
    h = HistoryWriter(str(path), "Ä", clock=lambda: 5)
    h.event("note", text="naïve")
    h.close()
    assert path.read_bytes() == '{"t":5,"member":"Ä","incarnation":1,"event":"note","text":"naïve"}\n'.encode()


def test_send_and_deliver_lines_are_the_encoders_bytes_for_any_value(tmp_path: Path) -> None:
    """The file mode formats send/deliver lines itself (node/history.py): for names, msg_ids and numbers that JSON
    must escape or that are absent, its bytes are still what `encode` makes of the same record (memory mode)."""
    names = ['A"q', "Ä/2", "B\\n", "C\u2028", "D\x01"]
    msg_ids: list[str | None] = ['x"y>B#1', "naïve>B#2", "tab\t>B#3", None, "\x7f>B#4"]
    conn_ids = [None, 0, 2**32 - 1]

    def events(h: HistoryWriter) -> None:
        for i, (name, msg_id) in enumerate(zip(names, msg_ids, strict=True)):
            conn_id = conn_ids[i % len(conn_ids)]
            h.sent("unicast", name.split("/")[0], conn_id, 2**63 + i, msg_id, i, dest_address=name)
            h.sent("multicast", None, None, i, msg_id, 0)
            h.delivered(Deliver("unicast", name, (msg_id or "").encode() + b"\0pad", conn_id, i))
            h.delivered(Deliver("multicast", name, b"no msg_id", None, i))
            h.sent("unicast", "B", True, i, msg_id, i, dest_address="B")  # not an int: the encoder's path
        h.flush()

    live = tmp_path / "live.jsonl"
    f = HistoryWriter(str(live), 'M"1', 3, clock=iter(range(1000)).__next__)
    events(f)
    f.close()
    m = HistoryWriter(None, 'M"1', 3, clock=iter(range(1000)).__next__)
    events(m)
    assert m.records is not None
    assert live.read_bytes() == lines_of(m.records)
    lines = live.read_text().split("\n")[:-1]  # not splitlines(): U+2028 is a line break to it, not to JSON lines
    assert len(lines) == 25 and all(line == encode(json.loads(line)) for line in lines)


def test_a_bursts_send_lines_are_the_ones_sent_writes(tmp_path: Path) -> None:
    """HistoryWriter.sends (the real member's burst path) writes the bytes `sent` writes for the same messages, in
    file and memory mode, for names and msg_ids JSON must escape and a connection without an id."""
    bursts = [("unicast", 'B"q', 7, "B/2"), ("unicast", "Ä", None, "Ä"), ("multicast", None, None, None)]
    msg_ids = ['x"y>B#1', "naïve>B#2", "tab\t>B#3", "\u2028>B#4"]

    def one_by_one(h: HistoryWriter) -> None:
        for kind, dest, conn_id, address in bursts:
            for i, msg_id in enumerate(msg_ids):
                h.sent(kind, dest, conn_id, 2**40 + i, msg_id, 1000 + i, dest_address=address)
        h.flush()

    def in_bursts(h: HistoryWriter) -> None:
        for kind, dest, conn_id, address in bursts:
            write = h.sends(kind, dest, conn_id, address)
            for i, msg_id in enumerate(msg_ids):
                write(2**40 + i, msg_id, 1000 + i)
        h.flush()

    for mode in ("file", "memory"):
        written = []
        for how in (one_by_one, in_bursts):
            path = str(tmp_path / f"{mode}-{how.__name__}.jsonl") if mode == "file" else None
            h = HistoryWriter(path, "M", 2, clock=iter(range(1000)).__next__)
            how(h)
            h.close()
            written.append(Path(path).read_bytes() if path else lines_of(h.records or []))
        assert written[0] == written[1] and written[0].count(b"\n") == 12, mode

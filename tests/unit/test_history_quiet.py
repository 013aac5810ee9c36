"""orchestration/systems/quiet.py's HistoryQuiet: foreign members are quiet once their histories stopped changing for
`settle`, where a unicast retransmission to an address no running member has, or on a connection no application
message used, does not count (a JGroups 5 sender resends to a departed member every xmit_interval for minutes: found
by the explore hunt on 5.5.6, where every run that killed or removed the workload's receiver timed out)."""

from __future__ import annotations

import json
from pathlib import Path

from orchestration.systems.quiet import HistoryQuiet

S = 1_000_000_000


def add(path: Path, *events: dict[str, object], partial: str = "") -> None:
    with path.open("a") as f:
        f.write("".join(json.dumps(e) + "\n" for e in events) + partial)


def start(member: str, address: str) -> dict[str, object]:
    return {"member": member, "event": "start", "address": address}


def send(member: str, dest: str, address: str, conn_id: int) -> dict[str, object]:
    return {"member": member, "event": "send", "kind": "unicast", "dest": dest, "dest_address": address,
            "conn_id": conn_id}  # fmt: skip


def xmit(member: str, peer: str, conn_id: int) -> dict[str, object]:
    return {"member": member, "event": "xmit", "peer": peer, "conn_id": conn_id, "seqno": 9}


def histories(tmp_path: Path) -> tuple[Path, Path]:
    b, c = tmp_path / "B.jsonl", tmp_path / "C.jsonl"
    add(b, start("B", "B"), send("B", "C", "C", 1))
    add(c, start("C", "C"))
    return b, c


def test_quiet_after_settle_when_nothing_is_added(tmp_path: Path) -> None:
    q = HistoryQuiet(1.0)
    paths = list(histories(tmp_path))
    assert not q.look(paths, 10 * S, ["B", "C"])
    assert not q.look(paths, 10 * S + S // 2, ["B", "C"])
    assert q.look(paths, 11 * S, ["B", "C"])


def test_a_retransmission_to_a_running_member_is_a_change(tmp_path: Path) -> None:
    q = HistoryQuiet(1.0)
    b, c = histories(tmp_path)
    assert not q.look([b, c], 10 * S, ["B", "C"])
    add(b, xmit("B", "C", 1))
    assert not q.look([b, c], 11 * S, ["B", "C"])
    assert not q.look([b, c], 11 * S + S // 2, ["B", "C"])
    assert q.look([b, c], 12 * S, ["B", "C"])


def test_retransmissions_to_a_departed_member_or_a_killed_incarnation_are_not(tmp_path: Path) -> None:
    q = HistoryQuiet(1.0)
    b, c = histories(tmp_path)
    assert not q.look([b, c], 10 * S, ["B"])  # C left
    add(b, xmit("B", "C", 1))
    assert q.look([b, c], 11 * S, ["B"])
    add(c, start("C", "C/2"))  # C's second incarnation: B's connection 1 went to the first
    assert not q.look([b, c], 12 * S, ["B", "C"])
    add(b, xmit("B", "C", 1))
    assert q.look([b, c], 13 * S, ["B", "C"])
    add(b, send("B", "C", "C/2", 2), xmit("B", "C", 2))  # to the new one: a change
    assert not q.look([b, c], 14 * S, ["B", "C"])


def test_a_partial_line_is_read_once_whole_and_a_line_that_is_not_json_is_a_change(tmp_path: Path) -> None:
    q = HistoryQuiet(1.0)
    b, c = histories(tmp_path)
    assert not q.look([b, c], 10 * S, ["B"])
    add(b, partial='{"member": "B", "event": "xmit", "peer": "C", ')
    assert q.look([b, c], 11 * S, ["B"])  # half a line: nothing yet
    add(b, partial='"conn_id": 1}\n')
    assert q.look([b, c], 12 * S, ["B"])  # now whole, and to the departed C
    add(b, partial="not json\n")
    assert not q.look([b, c], 13 * S, ["B"])


def test_retransmissions_on_a_connection_without_application_messages_are_not_a_change(tmp_path: Path) -> None:
    """B resends a protocol message (a VIEW_ACK, say) to the first A on connection 0, which no send line used."""
    q = HistoryQuiet(1.0)
    b, c = histories(tmp_path)
    assert not q.look([b, c], 10 * S, ["B", "C"])
    add(b, xmit("B", "A", 0))
    assert q.look([b, c], 11 * S, ["B", "C"])


def test_a_send_without_dest_address_keeps_its_retransmissions_a_change(tmp_path: Path) -> None:
    q = HistoryQuiet(1.0)
    b = tmp_path / "B.jsonl"
    add(b, start("B", "B"), {"member": "B", "event": "send", "kind": "unicast", "dest": "C", "conn_id": 1})
    assert not q.look([b], 10 * S, ["B"])
    add(b, xmit("B", "C", 1))
    assert not q.look([b], 11 * S, ["B"])


# --- a multicast tail still owed (orchestration/systems/owed.py) ---------------------------------------------------


def view(member: str, t: int, *members: str) -> dict[str, object]:
    return {"t": t, "member": member, "event": "view", "view_id": f"A|{t}", "members": list(members)}


def mcast(member: str, t: int, n: int) -> dict[str, object]:
    return {"t": t, "member": member, "event": "send", "kind": "multicast", "sender": member,
            "msg_id": f"{member}>*#{n}"}  # fmt: skip


def got(member: str, t: int, sender: str, n: int) -> dict[str, object]:
    return {"t": t, "member": member, "event": "deliver", "kind": "multicast", "sender": sender,
            "msg_id": f"{sender}>*#{n}"}  # fmt: skip


def group(tmp_path: Path) -> tuple[Path, Path]:
    """B and C in one view; B multicast #1 and #2, both delivered by B, only #1 by C."""
    b, c = tmp_path / "B.jsonl", tmp_path / "C.jsonl"
    add(b, {"t": 1, **start("B", "B")}, view("B", 3, "B", "C"), mcast("B", 4, 1), got("B", 4, "B", 1))
    add(c, {"t": 2, **start("C", "C")}, view("C", 3, "B", "C"), got("C", 5, "B", 1))
    add(b, mcast("B", 6, 2), got("B", 6, "B", 2))
    return b, c


def test_an_owed_multicast_tail_keeps_the_run_going_for_tail_settle(tmp_path: Path) -> None:
    """C lacks B's #2: quiet only after 10 s of unchanged histories; once C delivers it, after 1 s again."""
    q = HistoryQuiet(1.0, tail_settle=10.0)
    b, c = group(tmp_path)
    assert not q.look([b, c], 10 * S, ["B", "C"])
    assert not q.look([b, c], 12 * S, ["B", "C"]) and q.only_a_tail_owed
    assert not q.look([b, c], 19 * S, ["B", "C"]) and q.only_a_tail_owed
    assert q.look([b, c], 20 * S, ["B", "C"]) and not q.only_a_tail_owed
    q = HistoryQuiet(1.0, tail_settle=10.0)
    add(c, got("C", 7, "B", 2))  # repaired
    assert not q.look([b, c], 10 * S, ["B", "C"])
    assert q.look([b, c], 11 * S, ["B", "C"])


def test_a_tail_is_not_waited_for_once_a_view_parted_them_or_the_receiver_restarted_or_left(tmp_path: Path) -> None:
    b, c = group(tmp_path)
    q = HistoryQuiet(1.0, tail_settle=10.0)
    assert not q.look([b, c], 10 * S, ["B"])
    assert q.look([b, c], 11 * S, ["B"])  # C is not running: nothing owed to it is waited for
    add(b, view("B", 8, "B"))  # B excluded C: #2 is no longer owed, even after a merge
    add(b, view("B", 9, "B", "C"))
    q = HistoryQuiet(1.0, tail_settle=10.0)
    assert not q.look([b, c], 10 * S, ["B", "C"])
    assert q.look([b, c], 11 * S, ["B", "C"])
    (tmp_path / "restart").mkdir()
    b2, c2 = group(tmp_path / "restart")
    add(c2, {"t": 8, **start("C", "C/2")}, view("C", 9, "B", "C"))  # C's next incarnation is owed nothing sent before
    q = HistoryQuiet(1.0, tail_settle=10.0)
    assert not q.look([b2, c2], 10 * S, ["B", "C"])
    assert q.look([b2, c2], 11 * S, ["B", "C"])


def test_a_multicast_sent_before_the_receiver_joined_is_not_owed_and_one_after_is(tmp_path: Path) -> None:
    b, d = tmp_path / "B.jsonl", tmp_path / "D.jsonl"
    add(b, {"t": 1, **start("B", "B")}, view("B", 2, "B"), mcast("B", 3, 1), got("B", 3, "B", 1))
    add(d, {"t": 4, **start("D", "D")}, view("D", 5, "B", "D"))
    q = HistoryQuiet(1.0, tail_settle=10.0)
    assert not q.look([b, d], 10 * S, ["B", "D"])
    assert q.look([b, d], 11 * S, ["B", "D"])  # #1 went out before D started
    add(b, view("B", 5, "B", "D"), mcast("B", 6, 2), got("B", 6, "B", 2))
    assert not q.look([b, d], 12 * S, ["B", "D"])
    assert not q.look([b, d], 13 * S, ["B", "D"]) and q.only_a_tail_owed  # #2 is D's to get


def test_at_the_deadline_a_run_quiet_but_for_an_owed_tail_is_over(tmp_path: Path) -> None:
    from orchestration.schedule import wait_quiet

    class Clock:
        t = 0

        def now_ns(self) -> int:
            return self.t

        def sleep_until(self, t: int) -> None:
            self.t = max(self.t, t)

    class Members:
        clock = Clock()

        def __init__(self, tail_only: bool) -> None:
            self.tail_only = tail_only

        def quiet(self) -> bool:
            return False

        def only_a_tail_owed(self) -> bool:
            return self.tail_only

    assert wait_quiet(Members(True), 5 * S)  # type: ignore[arg-type]
    assert not wait_quiet(Members(False), 5 * S)  # type: ignore[arg-type]

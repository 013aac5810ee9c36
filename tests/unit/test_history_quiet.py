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

"""The UNICAST2/UNICAST3 switches of the known-bug catalogue (scenarios/bugs/unicast*.toml), at protocol level in
the simulator: each flawed switch really misbehaves, each fix recovers with nothing lost and nothing delivered twice.

UNICAST2-6 (reopened connection), JGRP-1563 (first message after a reset), JGRP-1548 (last message), JGRP-1873/1875
(delayed ACK after SEND_FIRST_SEQNO), JGRP-1874 (SEND_FIRST_SEQNO storm) and JGRP-1578 (duplicates not re-acked).
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestration.sim.simulation import MessageRule, Simulation
from tests.sim.util import FAST_U2, FAST_U3, assert_exactly_once_in_order, burst, settle

pytestmark = pytest.mark.sim


def u2(seed: int = 1, **props: Any) -> Simulation:
    return Simulation(2, seed=seed, stack="unicast2", properties={"unicast2": {**FAST_U2["unicast2"], **props}})


def u3(seed: int = 1, **props: Any) -> Simulation:
    return Simulation(2, seed=seed, properties={"unicast3": {**FAST_U3["unicast3"], **props}})


def delivered_after(sim: Simulation, msg_id: str, timeout: float) -> float | None:
    """Virtual seconds until B delivered msg_id from A (None if not within timeout)."""
    start = sim.now
    if sim.run_until(lambda: msg_id in sim.delivered("B", "A"), timeout, check_every=0.01):
        return sim.now - start
    return None


# --- UNICAST2-6: a reopened connection whose first message is lost (unicast2-reopen.toml) ---------------------------


@pytest.mark.parametrize("stack", ["unicast2", "unicast3"])
def test_reopen_while_streaming_first_message_lost(stack: str) -> None:
    """A closes its connection to B in the middle of a stream and the first message of what follows is dropped.
    UNICAST2 reopens a new connection whose #2.. B files under the old one; UNICAST3's close is graceful (the next
    send reverts CLOSING to OPEN with the same conn-id), so there is no new first message to lose."""
    sim = u2() if stack == "unicast2" else u3()
    burst(sim, "A", "B", 20)
    settle(sim)
    first = sim.add_rule(MessageRule(stack.upper(), "DATA", {"first": True}, src="A", dst="B", count=1))
    sim.close_connection("A", "B")
    new = burst(sim, "A", "B", 20)
    if stack == "unicast3":
        assert first.matched == 0  # no new first message: the same connection goes on
        settle(sim)
        assert_exactly_once_in_order(sim, "A", "B")
        return
    assert first.matched == 1  # the reopened connection's #1 was dropped
    sim.run(10.0)
    assert not set(new[:19]) & set(sim.delivered("B", "A"))  # #1-#19 of the new connection never arrive


# --- JGRP-1563: the first message of a connection opened after a reset is lost (unicast2-first-after-reset.toml) -----


def _first_after_reset(resend_first_msg: bool) -> tuple[Simulation, str]:
    sim = u2(resend_first_msg=resend_first_msg)
    burst(sim, "A", "B", 5)
    settle(sim)
    for me, peer in (("A", "B"), ("B", "A")):
        assert sim.protocol(me).remove_connection(peer)
    sim.run(0.5)  # B's last STABLE of the old connection reaches A before A reopens (as in the scenario file)
    sim.add_rule(MessageRule("UNICAST2", "DATA", {"first": True}, src="A", dst="B", count=1))
    (lone,) = burst(sim, "A", "B", 1)
    return sim, lone


def test_first_message_after_reset_without_resend_waits_for_the_next_message() -> None:
    sim, lone = _first_after_reset(resend_first_msg=False)
    assert delivered_after(sim, lone, 5.0) is None  # B has no connection: nothing to ask for
    a = sim.protocol("A")
    assert (
        a.c["first_msg_resends"] == 0 and not a.send_table["B"].established and "A" not in sim.protocol("B").recv_table
    )
    burst(sim, "A", "B", 1)  # only A's next message makes B ask for the first seqno
    settle(sim)
    assert sim.protocol("B").c["send_first_seqno_sent"] == 1
    assert_exactly_once_in_order(sim, "A", "B")


@pytest.mark.parametrize("seed", [1, 2])
def test_first_message_after_reset_is_resent_until_acked(seed: int) -> None:
    sim, lone = _first_after_reset(resend_first_msg=True)
    took = delivered_after(sim, lone, 1.0)
    assert took is not None and took <= 2 * 0.1 + 0.01  # at the second retransmit run at the latest (100 ms)
    settle(sim)
    a = sim.protocol("A")
    assert a.c["first_msg_resends"] == 1 and a.c["first_acks_received"] >= 1 and a.send_table["B"].established
    resends = a.c["xmits"]
    sim.run(10.0)
    assert a.c["xmits"] == resends  # acked: no more resends
    assert_exactly_once_in_order(sim, "A", "B")


def test_first_message_resend_stops_at_the_ack_even_when_acks_are_lost() -> None:
    """Every ACK of the first message is lost: A resends #1 until B shows it has the connection; B takes the copy
    for the same connection (same conn-id), delivers #1 once and acks the duplicate with a STABLE of the connection,
    which establishes it just as well."""
    sim = u2(resend_first_msg=True)
    acks = sim.add_rule(MessageRule("UNICAST2", "ACK", src="B", dst="A"))
    burst(sim, "A", "B", 1)
    settle(sim)
    a = sim.protocol("A")
    assert acks.matched >= 2 and a.c["first_msg_resends"] >= 1 and a.send_table["B"].established
    assert sim.protocol("B").c["duplicates_received"] == a.c["first_msg_resends"]
    assert_exactly_once_in_order(sim, "A", "B")


# --- JGRP-1548: the last message is lost (unicast2-last-message.toml) ------------------------------------------------


def _last_lost(resend_last_seqno: bool) -> tuple[Simulation, list[str]]:
    sim = u2(resend_last_seqno=resend_last_seqno)
    sim.add_rule(MessageRule("UNICAST2", "DATA", {"seqno": 10}, src="A", dst="B", count=1))
    return sim, burst(sim, "A", "B", 10)


def test_last_message_without_resend_waits_for_the_next_message() -> None:
    sim, sent = _last_lost(resend_last_seqno=False)
    assert delivered_after(sim, sent[-1], 5.0) is None  # STABLE rounds purge #1-#9; #10 stays unseen
    a = sim.protocol("A")
    assert a.send_table["B"].table.hd == 9 and a.c["xmits"] == 0
    burst(sim, "A", "B", 1)  # #11 opens a gap that B asks for
    settle(sim)
    assert sim.protocol("B").c["xmit_reqs_sent"] >= 1
    assert_exactly_once_in_order(sim, "A", "B")


@pytest.mark.parametrize("seed", [1, 2])
def test_last_message_is_resent_when_the_sender_falls_silent(seed: int) -> None:
    sim, sent = _last_lost(resend_last_seqno=True)
    took = delivered_after(sim, sent[-1], 2.0)
    assert took is not None and took <= 3 * 0.1 + 0.01  # two runs see the same watermark, the second resends
    settle(sim)
    a = sim.protocol("A")
    assert a.c["last_msg_resends"] >= 1
    xmits = a.c["xmits"]
    sim.run(10.0)
    assert a.c["xmits"] == xmits  # purged (B's STABLE): silence
    assert_exactly_once_in_order(sim, "A", "B")


def test_last_message_resend_does_not_resend_a_stream_in_progress() -> None:
    """While the highest-sent seqno moves (a stream at 100/s, retransmit runs every 100 ms), nothing is resent."""
    sim = u2(resend_last_seqno=True, stable_interval="60s")
    sim.stream("A", "B", 200, rate=100)
    sim.run(1.95)
    assert sim.protocol("A").c["last_msg_resends"] == 0
    sim.run(0.5)  # the stream ended at ~2 s: now the last message is resent (and acked as a duplicate)
    assert sim.protocol("A").c["last_msg_resends"] >= 1
    assert sim.run_until(lambda: sim.protocol("A").send_table["B"].table.hd == 200, 2.0)
    assert_exactly_once_in_order(sim, "A", "B")


# --- JGRP-1873/1875: a delayed ACK of a closed window purges what the new one never got (delayed-ack-purge.toml) -----


def _delayed_ack_after_close(sync_timestamps: bool) -> tuple[Simulation, list[str]]:
    """The scenario file's sequence with the simulator's own controls: B's ACKs are held; A->B is cut and B closes
    its connection to A (gone after conn_close_timeout); after the heal, once B's SEND_FIRST_SEQNO has reached A
    (which restarts B's window at its lowest unacked message), A's non-first DATA and B's XMIT_REQs are held back,
    and only then the old ACKs arrive."""
    sim = u3(sync_timestamps=sync_timestamps, conn_close_timeout="300ms", conn_expiry_timeout="0s")
    b = sim.protocol("B")
    burst(sim, "A", "B", 1)
    settle(sim)  # #1 acked: A's lowest unacked will be #2
    old_acks = sim.add_rule(MessageRule("UNICAST3", "ACK", src="B", dst="A", action="hold"))
    first = burst(sim, "A", "B", 9)
    assert sim.run_until(lambda: set(first) <= set(sim.delivered("B", "A")), 1.0)
    sim.cut("A", "B")
    sim.close_connection("B", "A")
    assert sim.run_until(lambda: "A" not in b.recv_table, 2.0)
    sim.rules.remove(old_acks)
    sim.heal(keep_rules=True)
    a = sim.protocol("A")
    reqs = sim.add_rule(MessageRule("UNICAST3", "XMIT_REQ", src="B", dst="A", action="hold"))
    assert sim.run_until(lambda: a.c["send_first_seqno_received"] >= 1, 2.0, check_every=0.001)
    later = sim.add_rule(MessageRule("UNICAST3", "DATA", {"first": False}, src="A", dst="B", action="hold"))
    assert sim.run_until(lambda: "A" in b.recv_table, 0.1, check_every=0.001)
    sim.run(0.3)
    window = b.recv_table["A"].table
    # B's new window started at A's lowest unacked, #2; A also resent its highest, #10 (UNICAST3-sync.txt), so B
    # asked at once for #3-#9 (held in the network until the old ACK has arrived)
    assert (window.hd, window.hr, window.num_missing()) == (2, 10, 7)
    assert sim.release(old_acks) >= 1  # ACK(10) of the closed window, older than the SEND_FIRST_SEQNO
    sim.run(0.1)
    sim.rules.remove(later)
    sim.release(later)
    sim.rules.remove(reqs)
    sim.release(reqs)  # B's requests for #3-#9 reach A only after the old ACK
    return sim, burst(sim, "A", "B", 5)  # sent after everything: they must arrive


def test_delayed_ack_without_timestamps_purges_what_the_new_window_lacks() -> None:
    sim, new = _delayed_ack_after_close(sync_timestamps=False)
    a, b = sim.protocol("A"), sim.protocol("B")
    sim.run(10.0)
    assert not set(new) & set(sim.delivered("B", "A"))  # B stalls behind the gap ...
    assert b.recv_table["A"].table.missing()[0][0] == 3  # ... at #3, which A purged on the old ACK(10)
    assert a.send_table["B"].table.get(3) is None and a.c["stale_acks_dropped"] == 0
    assert b.c["xmit_reqs_sent"] >= 40 and not sim.quiet()


@pytest.mark.parametrize("seed", [1, 2])
def test_delayed_ack_with_timestamps_is_dropped_and_nothing_is_lost(seed: int) -> None:
    sim, new = _delayed_ack_after_close(sync_timestamps=True)
    settle(sim, timeout=30)
    assert sim.protocol("A").c["stale_acks_dropped"] >= 1
    got = sim.delivered("B", "A")
    assert [m for m in got if m in new] == new
    # what B's closed window had delivered it gets again in its new window (#2-#10: A never saw those acks),
    # once each there and in order; everything was delivered at least once
    assert set(sim.sent("A", "B")) <= set(got)
    again = got[10:]
    assert again[: len(again) - len(new)] == sim.sent("A", "B")[1:10]


# --- JGRP-1874: SEND_FIRST_SEQNO storms, counted by their `sync` history events (unicast3-sync-storm.toml) -----------


@pytest.mark.parametrize(("sync_min_interval", "most"), [("0s", 60), ("2s", 4)])
def test_every_send_first_seqno_is_a_sync_event(sync_min_interval: str, most: int) -> None:
    """B has no window for A, hears A's stream and cannot reach A for 6 s (retransmit runs every 100 ms): one sync
    event per SEND_FIRST_SEQNO, with A's name and the conn-id B did not know; 0s means one per run."""
    sim = u3(sync_min_interval=sync_min_interval)
    burst(sim, "A", "B", 1)
    settle(sim)
    b = sim.protocol("B")
    b.remove_receive_connection("A")
    sim.cut("B", "A")
    sim.stream("A", "B", 1200, rate=200)
    sim.run(6.0)
    syncs = [e for e in sim.history["B"] if e["event"] == "sync"]
    assert len(syncs) == b.c["send_first_seqno_sent"]
    assert {(e["peer"], e["conn_id"]) for e in syncs} == {("A", sim.protocol("A").send_table["B"].conn_id)}
    assert most - 4 <= len(syncs) <= most  # 0s: 57-60 runs saw dropped messages; 2s: 3-4
    sim.heal()
    settle(sim, timeout=30)
    assert_exactly_once_in_order(sim, "A", "B")


# --- JGRP-1578: duplicates not re-acked (unicast3-duplicates-not-reacked.toml) ----------------------------------------


def _acks_lost(ack_duplicates: bool) -> Simulation:
    sim = u3(ack_duplicates=ack_duplicates)
    acks = sim.add_rule(MessageRule("UNICAST3", "ACK", src="B", dst="A"))
    burst(sim, "A", "B", 10)
    sim.run(1.0)
    assert acks.matched >= 1 and sim.delivered("B", "A") == sim.sent("A", "B")
    sim.rules.remove(acks)  # the network is fine again
    return sim


def test_duplicates_not_reacked_mean_endless_retransmission() -> None:
    sim = _acks_lost(ack_duplicates=False)
    a, b = sim.protocol("A"), sim.protocol("B")
    xmits = a.c["xmits"]
    sim.run(10.0)
    assert a.c["xmits"] - xmits >= 90  # A resends #10 on every run (100 ms) ...
    assert b.c["acks_withheld"] >= 90 and b.c["duplicates_received"] >= 90  # ... and B never acks it
    assert a.send_table["B"].table.hd == 0 and not sim.quiet()
    assert_exactly_once_in_order(sim, "A", "B")  # nothing lost or delivered twice: just endless traffic


def test_duplicates_reacked_stop_the_retransmission() -> None:
    sim = _acks_lost(ack_duplicates=True)
    settle(sim, timeout=2.0)
    a = sim.protocol("A")
    xmits = a.c["xmits"]
    sim.run(10.0)
    assert a.c["xmits"] == xmits and a.send_table["B"].table.hd == 10
    assert_exactly_once_in_order(sim, "A", "B")

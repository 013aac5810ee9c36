"""One history writer and one workload generator for the simulator and the real member (node/history.py,
node/workload.py, node/payload.py): the same event shapes, msg_ids per sender incarnation, workload tasks on the
virtual clock, and SIGSTOP-like pause/resume."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

from node.control import ControlServer
from node.history import encode
from node.runtime import RECV_BUFFER, Member, MemberConfig
from node.stack import build_stack
from node.workload import MAX_UNACKED
from orchestration.sim.simulation import Simulation
from tests.sim.util import FAST_U3, burst, settle

pytestmark = pytest.mark.sim

MEMBERSHIP = {
    "unicast3": {"xmit_interval": "100ms"},
    "nakack2": {"xmit_interval": "100ms"},
    "gms": {"discovery_timeout": "0.3s", "join_timeout": "0.5s"},
}
COUNT = 5


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def shapes(events: list[dict[str, Any]]) -> dict[str, list[str]]:
    """event type (send/deliver split by kind) -> its keys in order; every event of a type must have the same."""
    out: dict[str, list[str]] = {}
    for e in events:
        key = f"{e['event']}:{e['kind']}" if e["event"] in ("send", "deliver") else e["event"]
        assert out.setdefault(key, list(e)) == list(e), f"two shapes of {key}: {out[key]} and {list(e)}"
    return out


# --- the real member's events ---------------------------------------------------------------------------------------


async def _real_run(tmp_path: Path) -> dict[str, Path]:
    """Two real members (node/runtime.py) in this process on loopback: they form a view, A sends COUNT unicasts to
    B and B multicasts COUNT, both through the control endpoint's workload commands; then both stop."""
    rnd = random.Random()
    subnet = rnd.randrange(1, 250)
    ips = {"A": f"127.78.{subnet}.10", "B": f"127.78.{subnet}.11"}
    port = rnd.randrange(20_000, 50_000)
    group = f"239.78.{subnet}.{rnd.randrange(1, 250)}"
    cluster = f"shapes-{rnd.getrandbits(32):08x}"  # datagrams of another test that drew the same group are ignored
    tmp_path.mkdir(parents=True)
    paths = {n: tmp_path / f"{n}.jsonl" for n in ips}
    members: dict[str, Member] = {}
    for n, ip in ips.items():
        cfg = MemberConfig(
            name=n,
            ip=ip,
            port=port,
            peers={k: (v, port) for k, v in ips.items()},
            history=str(paths[n]),
            cluster=cluster,
            stack="unicast3+nakack2",
            properties=MEMBERSHIP,
            mcast_group=group,
            mcast_loop=True,
            token="t",
        )
        members[n] = Member(cfg)
    try:
        for m in members.values():
            await m.start()
        control = {n: ControlServer(m, ips[n], 0, "t") for n, m in members.items()}

        async def until(cond: Any, what: str, timeout: float = 20.0) -> None:
            deadline = time.monotonic() + timeout
            while not cond():
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                await asyncio.sleep(0.02)

        def one_view() -> bool:
            views = [m.stack.view for m in members.values()]
            return all(v is not None and len(v.members) == 2 for v in views) and views[0].view_id == views[1].view_id

        await until(one_view, "one view of A and B")
        for n, req in (("A", {"cmd": "send", "to": "B"}), ("B", {"cmd": "multicast"})):
            reply = await control[n].handle_line(json.dumps({"token": "t", "count": COUNT, "size": 40, **req}).encode())
            assert reply == {"ok": True, "task": 1}, reply
        await until(
            lambda: (
                all(t["done"] for c in control.values() for t in c.tasks.values())
                and members["B"].stack.counters()["unicast3"]["msgs_delivered"] == COUNT
                and members["A"].stack.counters()["nakack2"]["msgs_delivered"] >= COUNT
            ),
            "the workload to be delivered",
        )
        assert control["A"].tasks == {1: {"kind": "unicast", "dest": "B", "count": COUNT, "sent": COUNT, "done": True}}
    finally:
        for m in members.values():
            if m.loop is not None:
                await m.stop()
    return paths


def test_the_simulator_and_the_real_member_write_the_same_event_shapes(tmp_path: Path) -> None:
    real = {n: read(p) for n, p in asyncio.run(_real_run(tmp_path / "real")).items()}
    sim = Simulation(["A", "B"], seed=1, stack="unicast3+nakack2", properties=MEMBERSHIP)
    assert sim.run_until(sim.views_agree, 10.0)
    sim.start_workload("A", "unicast", "B", COUNT, size=40)
    sim.start_workload("B", "multicast", None, COUNT, size=40)
    settle(sim)
    sim.finish()
    out = sim.write_run(tmp_path / "sim")
    simulated = {n: read(out / "history" / f"{n}.jsonl") for n in "AB"}

    real_shapes = shapes(real["A"] + real["B"])
    sim_shapes = shapes(simulated["A"] + simulated["B"])
    required = {"start", "send:unicast", "send:multicast", "deliver:unicast", "deliver:multicast", "view", "conn"}
    assert required | {"stop"} <= real_shapes.keys() & sim_shapes.keys()
    for key in sorted(real_shapes.keys() & sim_shapes.keys()):
        assert real_shapes[key] == sim_shapes[key], f"{key}: real {real_shapes[key]} vs sim {sim_shapes[key]}"
    # the same msg_ids (incarnation 1: "A>B#1"), the same payload sizes, the same start event but for the transport
    for hist in (real, simulated):
        assert [e["msg_id"] for e in hist["B"] if e["event"] == "deliver" and e["kind"] == "unicast"] == [
            f"A>B#{i}" for i in range(1, COUNT + 1)
        ]
        assert {e["size"] for h in hist.values() for e in h if e["event"] in ("send", "deliver")} == {40}
        assert hist["B"][0]["event"] == "start" and hist["B"][0]["address"] == "B"
        assert hist["B"][0]["stack"] == "unicast3+nakack2"
    # stop: the stack's counters; the real member adds its runtime sections
    real_stop, sim_stop = real["A"][-1]["counters"], simulated["A"][-1]["counters"]
    assert set(real_stop) - set(sim_stop) == {"runtime", *build_stack("A", "unicast3").progress()}
    assert set(sim_stop) <= set(real_stop)
    assert all(list(real_stop[k]) == list(sim_stop[k]) for k in sim_stop)
    # both files are lines of the one encoder
    for path in [*(tmp_path / "real").glob("*.jsonl"), *(out / "history").glob("*.jsonl")]:
        assert all(line == encode(json.loads(line)) for line in path.read_text().splitlines())


# --- the simulator's histories and msg_ids --------------------------------------------------------------------------


def test_msg_ids_count_per_sender_incarnation() -> None:
    sim = Simulation(2, seed=3, properties=FAST_U3)
    assert burst(sim, "A", "B", 2) == ["A>B#1", "A>B#2"]
    assert sim.multicast_sent("A") == []
    settle(sim)
    sim.crash("A")
    sim.restart("A")
    sim.member("B").stack.unicast.set_members({"A/2", "B"})
    assert burst(sim, "A", "B", 2) == ["A/2>B#1", "A/2>B#2"]  # the new incarnation starts again at #1
    assert burst(sim, "B", "A", 1) == ["B>A#1"]
    settle(sim)
    assert sim.sent("A", "B") == ["A>B#1", "A>B#2", "A/2>B#1", "A/2>B#2"]  # every incarnation, in send order
    assert sim.delivered("B", "A") == sim.sent("A", "B")
    starts = [e for e in sim.history["A"] if e["event"] == "start"]
    assert [(e["incarnation"], e["address"], e["transport"]) for e in starts] == [(1, "A", "sim"), (2, "A/2", "sim")]
    delivers = [e for e in sim.history["B"] if e["event"] == "deliver"]
    assert [(e["sender"], e["sender_address"]) for e in delivers] == [("A", "A")] * 2 + [("A", "A/2")] * 2


def test_the_stop_event_is_written_once_with_the_stack_counters() -> None:
    sim = Simulation(2, seed=1)
    sim.finish()
    sim.finish()
    stops = [e for e in sim.history["A"] if e["event"] == "stop"]
    assert len(stops) == 1 and stops[0]["counters"] == sim.member("A").stack.counters()


# --- workload tasks in the simulator --------------------------------------------------------------------------------


def test_paced_workload_progress_and_pacing() -> None:
    sim = Simulation(2, seed=1, properties=FAST_U3)
    progress = sim.start_workload("A", "unicast", "B", 100, size=10, rate=200.0, start=0.5)
    assert progress == {"kind": "unicast", "dest": "B", "count": 100, "sent": 0, "done": False}
    sim.run(0.5 + 49.5 / 200)  # messages 0..49 are due by then
    assert progress["sent"] == 50 and not progress["done"]
    settle(sim)
    assert progress == {"kind": "unicast", "dest": "B", "count": 100, "sent": 100, "done": True}
    sends = [e["t"] for e in sim.history["A"] if e["event"] == "send"]
    assert sends == [round((0.5 + i / 200) * 1e9) for i in range(100)]
    assert sim.delivered("B") == sim.sent("A", "B")


def test_workload_without_a_rate_goes_as_fast_as_flow_control_allows() -> None:
    """No rate: bursts while at most MAX_UNACKED are unacked (the real member's rule), all delivered in order."""
    sim = Simulation(2, seed=2, properties=FAST_U3)
    count = 3 * MAX_UNACKED
    progress = sim.start_workload("A", "unicast", "B", count)
    peak = 0

    def watch() -> bool:
        nonlocal peak
        entry = sim.protocol("A").send_table.get("B")
        peak = max(peak, len(entry.table) if entry is not None else 0)
        return progress["done"]

    assert sim.run_until(watch, 30.0, check_every=0.0005)
    assert MAX_UNACKED < peak <= MAX_UNACKED + 200  # it did fill the window, and never went past one burst more
    settle(sim)
    assert sim.delivered("B") == sim.sent("A", "B") and len(sim.sent("A", "B")) == count
    mc = Simulation(3, seed=2, stack="unicast3+mcast", properties={"mcast": {"capacity": 64}})
    assert mc.run_until(mc.views_agree, 10.0)
    progress = mc.start_workload("A", "multicast", None, 2000, size=10)
    held = 0

    def watch_mcast() -> bool:
        nonlocal held
        held = max(held, mc.member("A").stack.multicast_protocol.pending())
        return progress["done"]

    assert mc.run_until(watch_mcast, 60.0, check_every=0.0005)
    assert 0 < held <= 200  # a burst fills the window; the next waits until MCAST holds nothing (not `blocked`)
    assert mc.run_until(mc.quiet, 60.0)
    for r in "BC":
        assert mc.delivered(r, "A", kind="multicast") == mc.multicast_sent("A")


def test_a_task_ends_with_its_member_and_does_not_follow_it_into_a_new_incarnation() -> None:
    sim = Simulation(2, seed=1, properties=FAST_U3)
    progress = sim.stream("A", "B", 100, rate=100.0)
    sim.run(0.305)
    sim.crash("A")
    assert progress["done"] and progress["sent"] == 31
    sim.restart("A")
    sim.run(1.0)
    assert progress["sent"] == 31 and sim.sent("A", "B") == [f"A>B#{i}" for i in range(1, 32)]
    with pytest.raises(ValueError, match="unknown destination"):
        sim.start_workload("A", "unicast", "Z", 1)
    with pytest.raises(ValueError, match="no multicast protocol"):
        sim.start_workload("A", "multicast", None, 1)


# --- pause and resume -----------------------------------------------------------------------------------------------


def test_messages_to_a_paused_member_arrive_after_resume_in_order_and_none_is_lost() -> None:
    sim = Simulation(2, seed=4, properties=FAST_U3)
    first = burst(sim, "A", "B", 5)
    settle(sim)
    b = sim.member("B")
    sent_before = b.stack.counters()["stack"]["datagrams_sent"]
    sim.pause("B")
    paused_at = sim.now
    later = burst(sim, "A", "B", 50, size=100)
    sim.run(2.0)  # A retransmits all the while (nothing is acked): the copies wait in B's buffer too
    assert sim.delivered("B") == first
    assert b.inbox and not sim.quiet()
    assert b.stack.counters()["stack"]["datagrams_sent"] == sent_before  # a paused member sends nothing
    sim.resume("B")
    resumed_at = sim.now
    settle(sim)
    assert sim.delivered("B", "A") == first + later  # in order, exactly once, nothing lost
    assert b.buffer_drops == 0 and not b.inbox
    late = [e["t"] for e in sim.history["B"] if e["event"] == "deliver" and e["msg_id"] in set(later)]
    assert min(late) >= round(resumed_at * 1e9) > round(paused_at * 1e9)
    assert sim.faults == []  # the orchestrator records pause and resume, not the simulator


def test_a_paused_member_runs_no_timers_or_workload_and_catches_up_on_resume() -> None:
    sim = Simulation(2, seed=5, properties=FAST_U3)
    progress = sim.stream("B", "A", 100, rate=100.0)  # one every 10 ms
    sim.run(0.2)
    sim.pause("B")
    sim.set_property("B", "unicast3", "xmit_interval", "50ms")  # waits for the resume, as a control command would
    assert sim.protocol("B").props.xmit_interval == 0.1
    sent = progress["sent"]
    sim.run(0.5)
    assert progress["sent"] == sent and not progress["done"]
    sim.resume("B")
    assert sim.protocol("B").props.xmit_interval == 0.05
    sim.run(0.0)
    assert progress["sent"] >= 70  # the backlog at once, then on pace again
    settle(sim)
    assert progress["done"] and sim.delivered("A", "B") == sim.sent("B", "A")
    times = [e["t"] for e in sim.history["B"] if e["event"] == "send"]
    assert max(b - a for a, b in itertools.pairwise(times)) >= 0.5e9  # the pause shows in the history
    sim.pause("B")
    with pytest.raises(ValueError, match="paused"):
        sim.send("B", "A")  # a paused member sends nothing, not even when told to
    sim.crash("B")  # SIGKILL of a paused member
    with pytest.raises(ValueError, match="not running"):
        sim.resume("B")


def test_what_does_not_fit_a_paused_members_receive_buffer_is_lost_and_recovered() -> None:
    sim = Simulation(2, seed=6, properties=FAST_U3)
    sim.pause("B")
    size = 50_000
    ids = burst(sim, "A", "B", 2 * RECV_BUFFER // size, size=size)  # twice what B's buffer holds
    sim.run(1.0)
    b = sim.member("B")
    assert b.buffer_drops > 0 and b.inbox_bytes <= RECV_BUFFER
    sim.resume("B")
    settle(sim)
    assert sim.delivered("B") == ids  # the protocol retransmits what the full buffer lost

"""The member control commands (node/commands.py): every command against a fake member that implements the
ControlledMember protocol, and against the simulator's member adapter; the real endpoint (node/control.py) and the
simulator's control answer the same commands with the same reply shapes."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Collection
from pathlib import Path

import pytest

from node import commands
from node.commands import COMMANDS, ControlledMember, Usage
from node.control import ControlServer, RuntimeMember
from node.runtime import Member, MemberConfig
from node.stack import Stack, build_stack
from node.wire import View, ViewId
from node.workload import Progress, Workload
from orchestration.cluster import ClusterError, ClusterSpec
from orchestration.sim.cluster import SimCluster
from orchestration.sim.control import SimControlledMember
from orchestration.sim.simulation import Simulation

EXPECTED = [
    "close",
    "flush",
    "incarnation",
    "leave",
    "multicast",
    "ping",
    "send",
    "set",
    "shutdown",
    "stats",
    "tasks",
    "view",
]


class FakeMember:
    """A ControlledMember that records what the commands asked of it."""

    def __init__(self, stack: str = "unicast3+nakack2") -> None:
        self.name = "A"
        self.address = "A/2"
        self.incarnation = 2
        self.pid: int | None = 4242
        self.stack_name = stack
        self.stack: Stack = build_stack("A/2", stack)
        self.peers: Collection[str] = {"A", "B", "C"}
        self.tasks: dict[int, Progress] = {}
        self.calls: list[tuple[object, ...]] = []
        self.events = 17

    def counters(self) -> dict[str, object]:
        return {"stack": {"datagrams_sent": 3}}

    def usage(self) -> Usage:
        return Usage(1234, 0.5)

    def start_workload(self, kind: str, dest: str | None, count: int, size: int, rate: float | None) -> Progress:
        self.calls.append(("start_workload", kind, dest, count, size, rate))
        return Workload(kind, dest, count, size=size, rate=rate).progress

    def close_connection(self, peer: str) -> None:
        self.calls.append(("close_connection", peer))

    def set_property(self, protocol: str, name: str, value: object) -> None:
        self.calls.append(("set_property", protocol, name, value))
        self.stack.set_property(protocol, name, value)

    def announce_incarnation(self, peer: str, incarnation: int) -> None:
        self.calls.append(("announce_incarnation", peer, incarnation))

    def flush_history(self) -> int:
        self.calls.append(("flush_history",))
        return self.events

    def leave(self) -> None:
        self.calls.append(("leave",))

    def shutdown(self) -> None:
        self.calls.append(("shutdown",))


def ask(member: ControlledMember, cmd: object, **fields: object) -> dict[str, object]:
    return commands.handle(member, {"cmd": cmd, **fields})


def error(member: ControlledMember, cmd: object, **fields: object) -> str:
    reply = ask(member, cmd, **fields)
    assert reply["ok"] is False, reply
    assert set(reply) == {"ok", "error"}
    return str(reply["error"])


# --- against a fake member -----------------------------------------------------------------------------------------


def test_the_command_set() -> None:
    assert COMMANDS == EXPECTED
    m = FakeMember()
    assert error(m, "explode") == f"unknown command 'explode'; commands: {', '.join(EXPECTED)}"
    assert error(m, None).startswith("unknown command None; commands: close, ")
    assert error(m, ["ping"]).startswith("unknown command ['ping']; ")
    assert m.calls == []


def test_ping_and_stats() -> None:
    m = FakeMember()
    assert ask(m, "ping") == {"ok": True, "member": "A", "address": "A/2", "pid": 4242, "incarnation": 2}
    m.pid = None
    assert ask(m, "ping")["pid"] is None
    assert ask(m, "stats") == {
        "ok": True,
        "counters": {"stack": {"datagrams_sent": 3}},
        "max_rss_kib": 1234,
        "cpu_s": 0.5,
    }


def test_view_is_null_before_joining_and_without_membership() -> None:
    assert ask(FakeMember(), "view") == {"ok": True, "view": None}
    assert ask(FakeMember("unicast3"), "view") == {"ok": True, "view": None}
    m = FakeMember()
    gms = m.stack.gms
    assert gms is not None
    merged = View(ViewId("B", 7), ("B", "A/2"), (ViewId("B", 5), ViewId("A/2", 6)))
    gms.views.install(merged, 0.0, m.stack.out)  # type: ignore[attr-defined]
    assert ask(m, "view") == {"ok": True, "view": {"view_id": "B|7", "members": ["B", "A/2"], "merge": True}}


def test_send_starts_numbered_tasks_with_converted_fields() -> None:
    m = FakeMember()
    assert ask(m, "send", to="B") == {"ok": True, "task": 1}
    assert ask(m, "send", to="C", count="5", size=10.0, rate="250") == {"ok": True, "task": 2}
    assert m.calls == [("start_workload", "unicast", "B", 1, 0, None), ("start_workload", "unicast", "C", 5, 10, 250.0)]
    assert ask(m, "tasks") == {
        "ok": True,
        "tasks": {
            1: {"kind": "unicast", "dest": "B", "count": 1, "sent": 0, "done": False},
            2: {"kind": "unicast", "dest": "C", "count": 5, "sent": 0, "done": False},
        },
    }


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"to": "D"}, "send: unknown destination 'D'; peers: A, B, C"),
        ({"to": "A"}, "send: unknown destination 'A'; peers: A, B, C"),  # itself
        ({"to": 3}, "send: unknown destination 3; peers: A, B, C"),
        ({}, "send: 'to'"),
        ({"to": "B", "count": -1}, "send: count and size must be >= 0, rate > 0"),
        ({"to": "B", "size": -1}, "send: count and size must be >= 0, rate > 0"),
        ({"to": "B", "rate": 0}, "send: count and size must be >= 0, rate > 0"),
        ({"to": "B", "count": "many"}, "send: invalid literal for int() with base 10: 'many'"),
        ({"to": "B", "count": None}, "send: int() argument must be a string, a bytes-like object or a real number"),
    ],
)
def test_send_refuses_bad_fields(fields: dict[str, object], message: str) -> None:
    m = FakeMember()
    assert error(m, "send", **fields).startswith(message)
    assert m.calls == [] and m.tasks == {}


def test_multicast_needs_a_multicast_protocol() -> None:
    m = FakeMember()
    assert ask(m, "multicast", count=3, size=8, rate=100) == {"ok": True, "task": 1}
    assert m.calls == [("start_workload", "multicast", None, 3, 8, 100.0)]
    u = FakeMember("unicast3+gms")
    assert error(u, "multicast") == "multicast: stack unicast3+gms has no multicast protocol"
    assert u.calls == []


def test_close_set_and_incarnation() -> None:
    m = FakeMember()
    assert ask(m, "close", peer="B") == {"ok": True}
    assert error(m, "close", peer="D") == "close: unknown peer 'D'; peers: A, B, C"
    assert error(m, "close") == "close: 'peer'"
    assert ask(m, "set", protocol="unicast3", property="xmit_interval", value="100ms") == {"ok": True}
    assert m.stack.by_name["unicast3"].props.xmit_interval == pytest.approx(0.1)  # type: ignore[attr-defined]
    assert error(m, "set", protocol="mcast", property="capacity", value=1).startswith(
        "set: no protocol 'mcast' in this stack; it has: unicast3, nakack2"
    )
    assert error(m, "set", protocol="unicast3", property="xmit_interval") == "set: 'value'"
    assert ask(m, "incarnation", peer="B", incarnation="3") == {"ok": True}
    assert error(m, "incarnation", peer="B", incarnation=0) == "incarnation: unknown peer 'B' or bad incarnation 0"
    assert error(m, "incarnation", peer="Z", incarnation=2) == "incarnation: unknown peer 'Z' or bad incarnation 2"
    assert m.calls == [
        ("close_connection", "B"),
        ("set_property", "unicast3", "xmit_interval", "100ms"),
        ("set_property", "mcast", "capacity", 1),
        ("announce_incarnation", "B", 3),
    ]


def test_flush_leave_and_shutdown() -> None:
    m = FakeMember()
    assert ask(m, "flush") == {"ok": True, "events_written": 17}
    assert ask(m, "leave") == {"ok": True}
    assert ask(m, "shutdown") == {"ok": True, "bye": True}
    assert m.calls == [("flush_history",), ("leave",), ("shutdown",)]
    u = FakeMember("unicast3")
    assert error(u, "leave") == "leave: stack unicast3 has no membership"
    assert u.calls == []


# --- against the simulator's member adapter -----------------------------------------------------------------------


def sim_members(stack: str = "unicast3+nakack2") -> tuple[Simulation, dict[str, SimControlledMember]]:
    sim = Simulation(["A", "B", "C"], seed=5, stack=stack, properties={"gms": {"discovery_timeout": "0.2s"}})
    if "gms" in sim.member("A").stack.by_name:
        assert sim.run_until(lambda: sim.views_agree() and len(sim.view("A").members) == 3, 20)  # type: ignore[union-attr]
    return sim, {n: SimControlledMember(sim, n, list(sim.members), {}) for n in sim.members}


@pytest.mark.sim
def test_sim_adapter_ping_stats_view_and_tasks() -> None:
    sim, m = sim_members()
    assert ask(m["B"], "ping") == {"ok": True, "member": "B", "address": "B", "pid": None, "incarnation": 1}
    stats = ask(m["A"], "stats")
    assert stats["ok"] and isinstance(stats["max_rss_kib"], int) and isinstance(stats["cpu_s"], float)
    counters = stats["counters"]
    assert isinstance(counters, dict)
    assert {"stack", "unicast3", "nakack2", "gms", "missing_from", "awaiting_ack", "unicast_sent"} <= set(counters)
    view = ask(m["C"], "view")["view"]
    assert isinstance(view, dict) and view["members"] == ["A", "B", "C"] and view["merge"] is False
    assert ask(m["A"], "send", to="B", count=20, size=30) == {"ok": True, "task": 1}
    assert ask(m["A"], "multicast", count=10, rate=1000) == {"ok": True, "task": 2}
    assert sim.run_until(sim.quiet, 10)
    tasks = ask(m["A"], "tasks")["tasks"]
    assert tasks == {
        1: {"kind": "unicast", "dest": "B", "count": 20, "sent": 20, "done": True},
        2: {"kind": "multicast", "dest": None, "count": 10, "sent": 10, "done": True},
    }
    assert len(sim.delivered("B", "A")) == 20 and len(sim.delivered("C", "A", kind="multicast")) == 10


@pytest.mark.sim
def test_sim_adapter_close_set_incarnation_and_flush() -> None:
    sim, m = sim_members("unicast3")
    assert ask(m["A"], "send", to="B", count=5) == {"ok": True, "task": 1}
    sim.run(1.0)
    assert ask(m["A"], "close", peer="B") == {"ok": True}
    assert sim.protocol("A").send_table["B"].state.value == "closing"  # type: ignore[attr-defined]
    assert error(m["A"], "close", peer="D") == "close: unknown peer 'D'; peers: A, B, C"
    assert ask(m["B"], "set", protocol="unicast3", property="ack_threshold", value=7) == {"ok": True}
    assert sim.protocol("B").props.ack_threshold == 7  # type: ignore[attr-defined]
    assert error(m["B"], "set", protocol="nakack2", property="xmit_interval", value=1) == (
        "set: no protocol 'nakack2' in this stack; it has: unicast3"
    )
    assert ask(m["A"], "incarnation", peer="C", incarnation=2) == {"ok": True}
    assert sim.member("A").announced == {"C": 2}
    assert sim.member("A").stack.peer_address("C", sim.member("A").announced) == "C/2"
    assert ask(m["C"], "flush") == {"ok": True, "events_written": len(sim.history["C"])}
    assert error(m["A"], "leave") == "leave: stack unicast3 has no membership"
    assert error(m["A"], "multicast") == "multicast: stack unicast3 has no multicast protocol"


@pytest.mark.sim
def test_sim_adapter_leave_and_shutdown() -> None:
    sim, m = sim_members()
    assert ask(m["C"], "leave") == {"ok": True}
    assert sim.run_until(lambda: not sim.member("C").alive, 10)
    assert sim.view_names("A") == ["A", "B"]
    assert ask(m["B"], "shutdown") == {"ok": True, "bye": True}
    assert not sim.member("B").alive and "B" not in sim.live()
    stop = [e for e in sim.history["B"] if e["event"] == "stop"]
    assert len(stop) == 1 and "nakack2" in stop[0]["counters"]  # type: ignore[operator]


# --- the real endpoint and the simulator's control ------------------------------------------------------------------

REQUESTS: list[dict[str, object]] = [
    {"cmd": "explode"},
    {"cmd": "ping"},
    {"cmd": "stats"},
    {"cmd": "view"},
    {"cmd": "send", "to": "B", "count": 2, "size": 10},
    {"cmd": "send", "to": "Q"},
    {"cmd": "send"},
    {"cmd": "multicast", "count": 2, "rate": 100},
    {"cmd": "multicast", "count": -2},
    {"cmd": "tasks"},
    {"cmd": "close", "peer": "B"},
    {"cmd": "close", "peer": "Q"},
    {"cmd": "set", "protocol": "unicast3", "property": "xmit_interval", "value": "1s"},
    {"cmd": "set", "protocol": "mcast", "property": "capacity", "value": 1},
    {"cmd": "incarnation", "peer": "B", "incarnation": 2},
    {"cmd": "incarnation", "peer": "B", "incarnation": 0},
    {"cmd": "flush"},
    {"cmd": "shutdown"},
]


async def real_replies(tmp_path: Path, requests: list[dict[str, object]]) -> list[dict[str, object]]:
    """The replies of a real member's endpoint (started, over TCP on loopback; its peer B does not exist)."""
    tmp_path.mkdir()
    cfg = MemberConfig(
        name="A",
        ip="127.0.0.1",
        port=0,
        peers={"A": ("127.0.0.1", 0), "B": ("127.0.0.1", 9)},
        history=str(tmp_path / "A.jsonl"),
        stack="unicast3+nakack2",
        transport="tcp",
        token="t",
    )
    member = Member(cfg)
    await member.start()
    server = ControlServer(member, "127.0.0.1", 0, "t")
    try:
        replies = [await server.handle_line(json.dumps({"token": "t", **req}).encode()) for req in requests]
        assert isinstance(server.controlled, RuntimeMember)
        await asyncio.wait_for(member.stopped.wait(), 5)  # after a shutdown or a leave, the member stops
        return replies
    finally:
        await member.stop()


def sim_replies(tmp_path: Path, requests: list[dict[str, object]]) -> list[dict[str, object]]:
    """The same requests to the simulator's control (a failed one raises ClusterError: its error text is kept)."""
    cluster = SimCluster(ClusterSpec(["A", "B"], stack="unicast3+nakack2", backend="sim", seed=1), workdir=tmp_path)
    cluster.start()
    replies: list[dict[str, object]] = []
    try:
        for req in requests:
            fields = {k: v for k, v in req.items() if k != "cmd"}
            try:
                replies.append(cluster.control("A", str(req["cmd"]), **fields))
            except ClusterError as e:
                replies.append({"ok": False, "error": str(e).removeprefix("member A: ")})
    finally:
        cluster.down()
    return replies


def test_the_real_endpoint_and_the_simulator_answer_alike(tmp_path: Path) -> None:
    """The same commands, reply fields and error texts: node/control.py and the simulator's control both answer
    with node/commands.py."""
    answered: set[object] = set()
    errors: dict[str, object] = {}
    for i, requests in enumerate((REQUESTS, [{"cmd": "leave"}])):  # each ends the member: a fresh one for the next
        real = asyncio.run(real_replies(tmp_path / f"real{i}", requests))
        sim = sim_replies(tmp_path / f"sim{i}", requests)
        for req, r, s in zip(requests, real, sim, strict=True):
            assert set(r) == set(s) and r["ok"] == s["ok"], (req, r, s)
            if not r["ok"]:
                assert r["error"] == s["error"], req
                errors[str(req["cmd"])] = r["error"]
            if "unknown command" not in str(r):
                answered.add(req["cmd"])
    assert answered == set(COMMANDS)
    listed = re.fullmatch(r"unknown command 'explode'; commands: (.*)", str(errors["explode"]))
    assert listed is not None and listed.group(1).split(", ") == COMMANDS
    assert errors["send"] == "send: 'to'" and errors["close"] == "close: unknown peer 'Q'; peers: A, B"


@pytest.mark.sim
@pytest.mark.parametrize("cmd", ["ping", "stats", "view", "send", "multicast", "tasks", "flush", "leave", "shutdown"])
def test_the_fake_and_the_simulator_give_the_same_reply_shapes(cmd: str) -> None:
    fields: dict[str, object] = {"to": "B"} if cmd == "send" else {}
    _, m = sim_members()
    fake = FakeMember()
    assert set(ask(fake, cmd, **fields)) == set(ask(m["A"], cmd, **fields))

"""`chaosbed conform`: the checklist a system's author runs before anything else (docs/foreign.md). Two members, A and
B, of the system on a real backend; each item passes or fails with the reason, or is skipped with why:

    starts       both start and answer `ping` (member, address, pid, incarnation); without control: write `start`
    start-first  each history's first line is `start` of incarnation 1
    clock        every `t` is CLOCK_MONOTONIC ns: within the orchestrator's own readings around the event
    control      `view`, `stats`, `tasks`, `flush` answer as the control contract says; an unknown command gets
                 ok: false and the member goes on
    unicast      A sends B one unicast: A logs the send, B the delivery, same msg_id (A>B#n)
    multicast    A multicasts one message: A logs the send, A and B the delivery (a sender delivers its own)
    sigterm      SIGTERM: B writes `stop`, exits, and nothing follows `stop`
    restart      B starts again as incarnation 2, appending to its history (the earlier lines unchanged)
    leave        (a system with `leave = "control"`) B/2 gets the control command `leave`: it leaves the group, writes
                 `left` and `stop` and exits, and A installs a view without it (where the system has views)
    histories    every line of both histories keeps to the history contract (node/history_contract.py)
"""

from __future__ import annotations

import functools
import json
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from chaos.faults import JsonObject
from node.history_contract import ERROR, file_problems
from orchestration.cluster import Cluster, ClusterError
from orchestration.host.processes import alive
from orchestration.systems import System
from orchestration.systems.clusters import forms_group, new_cluster, spec_of

ITEMS = ("starts", "start-first", "clock", "control", "unicast", "multicast", "sigterm", "restart", "leave",
         "histories")  # fmt: skip
NEEDS_CONTROL = ("control", "unicast", "multicast")
WAIT = 10.0  # seconds for each awaited line or exit
READY = 20.0  # seconds for a member to start
FIRST_LINE = 2.0  # seconds after it is ready for a member's first line
T = TypeVar("T")


@dataclass
class Item:
    key: str
    ok: bool | None  # None: not run (skipped)
    reason: str


class Failed(Exception):
    """An item failed: the message is the reason."""


class Skipped(Exception):
    """An item does not apply to the system: the message says why."""


def read_events(path: Path) -> list[JsonObject]:
    """A history's whole lines that are JSON objects (others are the `histories` item's business)."""
    try:
        return read_events_from(path.read_bytes())
    except OSError:
        return []


def wait_for(what: str, found: Callable[[], T | None], timeout: float = WAIT) -> T:
    """The first truthy result of `found`, polled until the deadline (Failed naming `what` then)."""
    deadline = time.monotonic() + timeout
    while True:
        result = found()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise Failed(f"no {what} within {timeout:g}s")
        time.sleep(0.02)  # polling a condition with a deadline


class Checklist:
    """One conform run: a cluster of two members and the items' results."""

    def __init__(self, system: System, backend: str, workdir: Path, *, ready: float = READY) -> None:
        self.system = system
        self.ready = ready
        stack = "unicast3+nakack2" if system.native else system.stack
        self.cluster: Cluster = new_cluster(spec_of(system, ["A", "B"], backend, stack=stack), workdir=workdir)
        self.items: dict[str, Item] = {}
        self.windows: list[tuple[str, int, int]] = []  # (what, orchestrator's clock before, after)

    def history(self, name: str) -> Path:
        return Path(self.cluster.workdir) / "history" / f"{name}.jsonl"

    def events(self, name: str) -> list[JsonObject]:
        return read_events(self.history(name))

    def record(self, key: str, step: Callable[[], str]) -> bool:
        """Runs one item: passes with the step's note, or fails with the reason."""
        if not self.system.control and key in NEEDS_CONTROL:
            self.items[key] = Item(key, None, "skipped: the system has no control (control = false)")
            return True
        try:
            self.items[key] = Item(key, True, step())
        except Skipped as e:
            self.items[key] = Item(key, None, f"skipped: {e}")
        except (Failed, ClusterError, OSError) as e:
            self.items[key] = Item(key, False, str(e))
        return bool(self.items[key].ok)

    def run(self) -> list[Item]:
        try:
            if self.record("starts", self.starts):
                self.record("start-first", self.start_first)
                self.record("control", self.control)
                self.record("unicast", self.unicast)
                self.record("multicast", self.multicast)
                self.record("sigterm", self.sigterm)
                if self._stopped("B"):
                    self.record("restart", self.restart)
                self.record("clock", self.clock)  # the windows of the start, unicast, multicast and restart
                if self.items.get("restart") and self.items["restart"].ok:
                    self.record("leave", self.leave)
                self.cluster.stop_members()
                self.record("histories", self.histories)
        finally:
            self.cluster.down()
        reason = "not run: " + (
            "the members did not start" if not self.items["starts"].ok
            else "B did not exit" if "restart" not in self.items else "B did not restart"
        )  # fmt: skip
        return [self.items.get(k) or Item(k, None, reason) for k in ITEMS]

    # --- the items --------------------------------------------------------------------------------------------------

    def starts(self) -> str:
        before = time.monotonic_ns()
        self.cluster.start(timeout=self.ready)
        if forms_group(self.cluster):
            self.cluster.wait_for_view(timeout=30.0)
        self.windows.append(("start", before, time.monotonic_ns()))
        if not self.system.control:
            return "both started and wrote `start` (no control: no ping)"
        for name in ("A", "B"):
            reply = self.cluster.control(name, "ping")
            missing = [k for k in ("member", "address", "pid", "incarnation") if k not in reply]
            if missing or reply.get("member") != name or reply.get("incarnation") != 1:
                raise Failed(f"{name}'s ping reply {reply} must have member={name!r}, address, pid, incarnation=1")
        return "both answer ping (member, address, pid, incarnation)"

    def _first_line(self, name: str) -> list[JsonObject]:
        return self.events(name)[:1]

    def start_first(self) -> str:
        for name in ("A", "B"):
            what = f"line in {name}'s history (its first must be `start`)"
            first = wait_for(what, functools.partial(self._first_line, name), timeout=FIRST_LINE)[0]
            if first.get("event") != "start" or first.get("incarnation") != 1:
                raise Failed(f"{name}'s first line is {json.dumps(first)[:160]}, not a `start` of incarnation 1")
        return "both histories begin with `start` of incarnation 1"

    def control(self) -> str:
        c = self.cluster
        shapes: dict[str, tuple[str | None, Callable[[object], bool]]] = {
            "view": ("view", lambda v: v is None or isinstance(v, dict)),
            "stats": ("counters", lambda v: isinstance(v, dict)),
            "tasks": ("tasks", lambda v: isinstance(v, dict)),
            "flush": (None, lambda v: True),
        }
        for cmd, (key, valid) in shapes.items():
            reply: dict[str, object] = dict(c.control("A", cmd))
            if key is not None and (key not in reply or not valid(reply[key])):
                raise Failed(f"the reply to {cmd!r} is {json.dumps(reply)[:160]}: it needs {key!r} (control contract)")
        try:
            c.control("A", "no-such-command")
        except ClusterError:
            pass
        else:
            raise Failed("an unknown command was answered with ok: true (it must get ok: false)")
        c.control("A", "ping")  # and it goes on
        return "view, stats, tasks, flush answer; an unknown command gets ok: false and the member goes on"

    def unicast(self) -> str:
        before = time.monotonic_ns()
        self.cluster.control("A", "send", to="B", count=1, size=32)
        sent = wait_for("`send` of a unicast to B in A's history", lambda: self._find("A", "send", "unicast", "B"))
        msg_id = self._check_msg_id(sent, r"A>B#\d+")
        got = wait_for(f"`deliver` of {msg_id} in B's history", lambda: self._find("B", "deliver", msg_id=msg_id))
        self.windows.append(("unicast", before, time.monotonic_ns()))
        if got.get("sender") != "A" or got.get("kind") != "unicast":
            raise Failed(f"B's delivery of {msg_id} says sender={got.get('sender')!r}, kind={got.get('kind')!r}")
        return f"{msg_id}: sent by A, delivered by B"

    def multicast(self) -> str:
        before = time.monotonic_ns()
        self.cluster.control("A", "multicast", count=1, size=32)
        sent = wait_for("`send` of a multicast in A's history", lambda: self._find("A", "send", "multicast"))
        msg_id = self._check_msg_id(sent, r"A>\*#\d+")
        for name in ("B", "A"):
            wait_for(
                f"`deliver` of {msg_id} in {name}'s history"
                + (" (a sender delivers its own multicasts too)" if name == "A" else ""),
                functools.partial(self._find, name, "deliver", msg_id=msg_id),
            )
        self.windows.append(("multicast", before, time.monotonic_ns()))
        return f"{msg_id}: sent by A, delivered by A and B"

    def clock(self) -> str:
        for what, lo, hi in self.windows:
            for name in ("A", "B"):
                for e in self._window_events(name, what):
                    t = e.get("t")
                    if not isinstance(t, int) or not lo <= t <= hi:
                        raise Failed(_clock_reason(name, e, lo, hi))
        return "every `t` checked lies within the orchestrator's CLOCK_MONOTONIC readings around it"

    def sigterm(self) -> str:
        pid = self.cluster.members["B"].pid
        terminate(self.cluster, "B")
        wait_for("exit of B after SIGTERM", lambda: pid is None or not alive(pid, self.cluster.label))
        events = self.events("B")
        if not events or events[-1].get("event") != "stop":
            last = json.dumps(events[-1])[:160] if events else "nothing"
            raise Failed(f"B's last line after SIGTERM is {last}, not `stop`")
        stops = [i for i, e in enumerate(events) if e.get("event") == "stop"]
        if len(stops) != 1:
            raise Failed(f"B wrote {len(stops)} `stop` lines")
        return "B wrote `stop` last and exited"

    def restart(self) -> str:
        before_bytes = self.history("B").read_bytes()
        before = time.monotonic_ns()
        self.cluster.restart("B", timeout=self.ready)
        self.windows.append(("restart", before, time.monotonic_ns()))
        now = self.history("B").read_bytes()
        if not now.startswith(before_bytes):
            raise Failed("B's history was rewritten, not appended to (its earlier lines changed)")
        new = read_events_from(now[len(before_bytes) :])
        if not new or new[0].get("event") != "start" or new[0].get("incarnation") != 2:
            raise Failed(f"after the restart B appended {json.dumps(new[:1])[:160]}: not a `start` of incarnation 2")
        return "B appended `start` of incarnation 2 to the same history"

    def leave(self) -> str:
        if self.system.native:
            raise Skipped("chaosbed's own member: its leave is the group's leave protocol, tested with node/")
        if self.system.leave != "control":
            raise Skipped('the system has no graceful leave (leave = "sigterm": the `leave` fault sends SIGTERM)')
        if self.system.views:  # B/2 is in A's view before it leaves, so that the view without it is the leave's
            wait_for("view of A with B/2 after the restart", lambda: self._a_view_has_b(-1), timeout=15.0)
        before, t0 = len(self._a_views()), time.monotonic_ns()
        pid = self.cluster.members["B"].pid
        self.cluster.leave("B")
        wait_for("exit of B/2 after `leave`", lambda: pid is None or not alive(pid, self.cluster.label))
        kinds = [e.get("event") for e in self.events("B") if e.get("incarnation") == 2]
        if kinds[-2:] != ["left", "stop"]:
            raise Failed(f"B/2's last lines after `leave` are {kinds[-2:]}, not `left` then `stop`")
        if not self.system.views:
            return "B/2 wrote `left` and `stop` and exited"
        view = wait_for(
            "view of A without B after B/2 left",
            lambda: next((v for i, v in enumerate(self._a_views()) if i >= before and not self._a_view_has_b(i)), None),
        )
        suspected = [e for e in self.events("A") if e.get("event") == "suspect" and e.get("peer") == "B"
                     and e.get("peer_address", "B/2") == "B/2"]  # not an older B still in A's view  # fmt: skip
        # a suspicion before the view without B/2 is how a crash ends; one after it is the failure detector's late
        # word on a member already gone (JGroups 5 over TCP, measured: 219 ms after the leave's view), and harmless
        vt = view.get("t")
        until = vt if isinstance(vt, int) else None
        late = [e for e in suspected if isinstance(t := e.get("t"), int) and t >= t0 and (until is None or t < until)]
        if late:
            raise Failed(f"A suspected B around its leave ({json.dumps(late[0])[:120]}): a crash, not a leave")
        return f"B/2 wrote `left` and `stop` and exited; A installed {view.get('view_id')} without it, no suspicion"

    def _a_view_has_b(self, i: int) -> bool:
        """Whether A's i-th view (of incarnation 1; -1: the last) has B/2 in it (by its address where the view lists
        addresses: an older B may still be in A's view)."""
        views = self._a_views()
        view = views[i] if -len(views) <= i < len(views) else {}
        addresses, members = view.get("addresses"), view.get("members")
        if isinstance(addresses, list):
            return "B/2" in addresses
        return isinstance(members, list) and "B" in members

    def _a_views(self) -> list[JsonObject]:
        return [e for e in self.events("A") if e.get("event") == "view" and e.get("incarnation", 1) == 1]

    def histories(self) -> str:
        bad = []
        for name in ("A", "B"):
            lines = _numbered(self.history(name))
            records = [(i, e) for i, e in enumerate(lines, 1) if e is not None]
            bad += [f"{name} line {i}: not a JSON object" for i, e in enumerate(lines, 1) if e is None]
            found = [p for p in file_problems(records, name) if p.severity == ERROR]
            bad += [
                f"{name} line {p.line}" + (f", field {p.field}" if p.field else "") + f": {p.reason}" for p in found
            ]
        if bad:
            raise Failed("; ".join(bad[:5]) + (f" (+{len(bad) - 5} more)" if len(bad) > 5 else ""))
        return "every line keeps to the history contract v1"

    # --- helpers ------------------------------------------------------------------------------------------------------

    def _find(
        self, name: str, event: str, kind: str | None = None, dest: str | None = None, msg_id: str | None = None
    ) -> JsonObject | None:
        for e in self.events(name):
            if e.get("event") != event or (kind and e.get("kind") != kind) or (dest and e.get("dest") != dest):
                continue
            if msg_id is None or e.get("msg_id") == msg_id:
                return e
        return None

    @staticmethod
    def _check_msg_id(sent: JsonObject, pattern: str) -> str:
        """The send's msg_id, which must match `pattern`."""
        msg_id = sent.get("msg_id")
        if not isinstance(msg_id, str) or not re.fullmatch(pattern, msg_id):
            want = pattern.replace("\\d+", "<n>").replace("\\", "")
            raise Failed(f"the send's msg_id is {msg_id!r}, not {want} (the payload's first bytes)")
        return msg_id

    def _stopped(self, name: str) -> bool:
        m = self.cluster.members[name]
        return m.pid is None or not alive(m.pid, self.cluster.label)

    def _window_events(self, name: str, what: str) -> list[JsonObject]:
        if what == "restart":
            return [e for e in self.events(name) if e.get("event") == "start" and e.get("incarnation") == 2]
        events = [e for e in self.events(name) if e.get("incarnation", 1) == 1]
        if what == "start":
            return [e for e in events if e.get("event") == "start"][:1]
        kind = "unicast" if what == "unicast" else "multicast"
        return [e for e in events if e.get("event") in ("send", "deliver") and e.get("kind") == kind]


def read_events_from(data: bytes) -> list[JsonObject]:
    out: list[JsonObject] = []
    for raw in data.split(b"\n")[:-1]:
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def _numbered(path: Path) -> list[JsonObject | None]:
    """Each non-empty line of a history: its object, or None where it is not one."""
    out: list[JsonObject | None] = []
    for raw in path.read_bytes().split(b"\n"):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except ValueError:
            rec = None
        out.append(rec if isinstance(rec, dict) else None)
    return out


def terminate(cluster: Cluster, name: str) -> None:
    """SIGTERM to one member, which then counts as leaving (a foreign member's `leave` may be the control command:
    not this)."""
    if hasattr(cluster, "has_views"):  # a cluster of foreign members (backends/foreign.py)
        cluster.sigterm(name)  # type: ignore[attr-defined]
        return
    m = cluster.members[name]
    container = getattr(cluster, "_member_container", None)
    if container is not None:
        container(m).kill("SIGTERM")
    elif m.pid is None or not cluster._signal(m.pid, signal.SIGTERM):  # type: ignore[attr-defined]
        raise ClusterError(f"member {name} is not running")
    cluster._leaving.add(name)  # type: ignore[attr-defined]


def _clock_reason(name: str, e: JsonObject, lo: int, hi: int) -> str:
    t = e.get("t")
    off = (t - lo if isinstance(t, int) and t < lo else t - hi) if isinstance(t, int) else None
    hint = ""
    if off is not None and abs(off) > 10**15:
        hint = " (CLOCK_REALTIME? t must be CLOCK_MONOTONIC, e.g. time.monotonic_ns(), System.nanoTime())"
    elif off is not None and isinstance(t, int) and t < lo / 100:
        hint = " (not nanoseconds?)"
    return (
        f"{name}'s {e.get('event')} has t={t}, but the orchestrator's CLOCK_MONOTONIC read {lo}..{hi} around it"
        + (f": off by {off / 1e9:+.3f} s" if off is not None else "")
        + hint
    )

"""When a run of foreign members is over (orchestration/schedule.py's wait_quiet asks the cluster).

chaosbed's own members say what they still wait for (`waiting_on`), a foreign member need not: its `stats` is free.
So a foreign cluster is quiet when
- with control: every member's workload tasks are done (`tasks`), and
  - if its `stats` counters report `waiting_on` ({peer address: messages it still waits for}), chaosbed's rule
    decides (orchestration/schedule.py: nothing waited for between running members, no multicast tail unheard; with
    the finer counters chaosbed's own members report, Stack.progress, every message delivered and no retransmission);
  - else its members' histories have not changed for the system's `settle` (default 1 s; [cluster.member] settle):
    nothing sent, delivered or retransmitted-and-logged meanwhile. A unicast retransmission is a change only on a
    connection whose application messages went to an address a running member has: not to a member that left or a
    killed incarnation (nothing is owed there; the checker says so), and not on a connection that carried no
    application message (a protocol's own, e.g. a JOIN_RSP or VIEW_ACK, which no check waits for). A JGroups 5 sender
    resends its highest unacked message to a departed member every xmit_interval until the connection expires,
    minutes later, and such a run would otherwise never end. While the histories show a multicast owed between
    running members and not delivered yet (orchestration/systems/owed.py: the checker's rule, on what is written so
    far), they must stay unchanged for TAIL_SETTLE instead (10 s, at least `settle`): JGroups repairs a lost tail at
    its next STABLE round, with nothing written meanwhile. A tail that never comes costs those seconds, not a
    `timeout`: at the deadline a run quiet but for an owed tail is over (`only_a_tail_owed`; the checker reports it);
- without control: the histories have not changed for `settle`. Such a member runs its own workload; one that never
  goes quiet runs until the scenario's timeout, which then ends the run (not a violation: the runner cannot know
  when a self-driven workload is done).
Views (where the system has them) agree when every running member reports the same view_id with the running members'
names (a foreign view may list names or addresses).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Protocol

from node.addresses import name_of
from orchestration.cluster import Clock, ClusterError, ControlReply
from orchestration.systems import System
from orchestration.systems.owed import OwedMulticasts

# seconds of unchanged histories that end a run while a multicast is still owed between running members: JGroups
# repairs a lost tail at its next STABLE round (about 2 s apart, randomised, on the fast stacks), not before
TAIL_SETTLE = 10.0


class _Foreign(Protocol):
    @property
    def system(self) -> System: ...

    @property
    def clock(self) -> Clock: ...

    def control(self, name: str, cmd: str, *, timeout: float = 10.0, **args: object) -> ControlReply: ...


class HistoryQuiet:
    """The members' histories over time: quiet once nothing but retransmissions to departed addresses was added to
    them for `settle` seconds, or for `tail_settle` (at least `settle`) while the histories show a multicast still
    owed between running members (see the module docstring)."""

    def __init__(self, settle: float, tail_settle: float = TAIL_SETTLE) -> None:
        self.settle_ns = round(settle * 1e9)
        self.tail_settle_ns = max(self.settle_ns, round(tail_settle * 1e9))
        self.since = 0
        self.owed = OwedMulticasts()
        self.only_a_tail_owed = False  # the last look was quiet for `settle` but for a multicast tail still owed
        self._tails: dict[Path, _Tail] = {}
        self._address: dict[str, str] = {}  # member -> the address of its newest incarnation's `start`
        self._dest: dict[tuple[str, object, object], str | None] = {}  # (member, peer, conn_id) -> its dest_address

    def look(self, histories: list[Path], now_ns: int, running: Collection[str] = ()) -> bool:
        changed = False
        events = [e for path in histories for e in self._tails.setdefault(path, _Tail(path)).new_events()]
        events.sort(key=_instant)  # the owed multicasts follow starts, views and sends across members in time order
        for event in events:
            changed |= self._changes(event, running)
            self.owed.add(event)
        self.only_a_tail_owed = False
        if changed or not self.since:
            self.since = now_ns
            return False
        still = now_ns - self.since
        if still < self.settle_ns:
            return False
        if still < self.tail_settle_ns and self.owed.pending(running):
            self.only_a_tail_owed = True
            return False
        return True

    def _changes(self, e: dict[str, object], running: Collection[str]) -> bool:
        """Whether the event is a change that counts: anything but a retransmission to a departed address or on a
        connection that carried no application message."""
        member, kind = str(e.get("member")), e.get("event")
        started = e.get("address")
        if kind == "start" and isinstance(started, str):
            self._address[member] = started
        elif kind == "send" and e.get("kind") == "unicast":
            address = e.get("dest_address")
            self._dest[(member, e.get("dest"), e.get("conn_id"))] = address if isinstance(address, str) else None
        elif kind == "xmit" and e.get("conn_id") is not None:
            key = (member, e.get("peer"), e.get("conn_id"))
            if key not in self._dest:
                return False  # a connection that carried no application message: no retry the checks wait for
            dest = self._dest[key]
            return dest is None or dest in {self._address.get(n) for n in running}
        return True


def _instant(e: dict[str, object]) -> int:
    t = e.get("t")
    return t if isinstance(t, int) and not isinstance(t, bool) else 0


class _Tail:
    """The whole lines added to one history since the last look (a history only grows; a shorter one restarts)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def new_events(self) -> list[dict[str, object]]:
        try:
            with self.path.open("rb") as f:
                if f.seek(0, 2) < self.offset:
                    self.offset = 0
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        events = []
        for line in data[:end].splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                event = {}  # a line that is not JSON still changed the history
            events.append(event if isinstance(event, dict) else {})
        return events


def tasks_done(cluster: _Foreign, name: str) -> bool:
    """Every workload task of the member is done (a `tasks` reply that breaks the contract is an error)."""
    tasks = cluster.control(name, "tasks").get("tasks")
    if not isinstance(tasks, dict) or not all(isinstance(t, dict) and "done" in t for t in tasks.values()):
        raise ClusterError(
            f"member {name}: its `tasks` reply breaks the control contract: it must be "
            f'{{"ok": true, "tasks": {{"1": {{"done": true|false, ...}}, ...}}}}, not {tasks!r:.200}'
        )
    return all(t["done"] for t in tasks.values())


def quiet_verdict(
    cluster: _Foreign, running: list[str], histories: list[Path], tracker: HistoryQuiet, up: list[str] | None = None
) -> bool | None:
    """One look (see the module docstring); None: the members report `waiting_on`, chaosbed's rule decides. `running`
    excludes paused members, `up` (default: `running`) has them: a retransmission to a paused member still counts."""
    settled = tracker.look(histories, cluster.clock.now_ns(), running if up is None else up)
    if not cluster.system.control:
        return settled
    if not all([tasks_done(cluster, n) for n in running]):
        tracker.only_a_tail_owed = False
        return False
    if running:
        counters = cluster.control(running[0], "stats").get("counters")
        if isinstance(counters, dict) and isinstance(counters.get("waiting_on"), dict):
            return None
    return settled


def same_views(views: Mapping[str, Mapping[str, object] | None], running: list[str]) -> bool:
    """Every member that has a view has the same one, made of the running members (by name); True without views."""
    if all(v is None for v in views.values()):
        return True
    ids = {v.get("view_id") if v else None for v in views.values()}
    if len(ids) != 1 or None in ids:
        return False
    names = set(running)
    listed = [v.get("members") if v else None for v in views.values()]
    members = [{name_of(str(x)) for x in m} if isinstance(m, list) else set() for m in listed]
    return all(m == names for m in members)


def history_start(path: Path, offset: int, incarnation: int) -> bool:
    """Whether the history has, after `offset`, a whole `start` line of this incarnation (or one without an
    incarnation field)."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return False
    for line in data.split(b"\n")[:-1]:  # whole lines only
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(event, dict)
            and event.get("event") == "start"
            and event.get("incarnation", incarnation) == (incarnation)
        ):
            return True
    return False

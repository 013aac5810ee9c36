"""When a run of foreign members is over (orchestration/schedule.py's wait_quiet asks the cluster).

chaosbed's own members say what they still wait for (`waiting_on`), a foreign member need not: its `stats` is free.
So a foreign cluster is quiet when
- with control: every member's workload tasks are done (`tasks`), and
  - if its `stats` counters report `waiting_on` ({peer address: messages it still waits for}), chaosbed's rule
    decides (orchestration/schedule.py: nothing waited for between running members, no multicast tail unheard; with
    the finer counters chaosbed's own members report, Stack.progress, every message delivered and no retransmission);
  - else its members' histories have not changed for the system's `settle` (default 1 s; [cluster.member] settle):
    nothing sent, delivered or retransmitted-and-logged meanwhile;
- without control: the histories have not changed for `settle`. Such a member runs its own workload; one that never
  goes quiet runs until the scenario's timeout, which then ends the run (not a violation: the runner cannot know
  when a self-driven workload is done).
Views (where the system has them) agree when every running member reports the same view_id with the running members'
names (a foreign view may list names or addresses).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from node.addresses import name_of
from orchestration.cluster import Clock, ClusterError, ControlReply
from orchestration.systems import System


class _Foreign(Protocol):
    @property
    def system(self) -> System: ...

    @property
    def clock(self) -> Clock: ...

    def control(self, name: str, cmd: str, *, timeout: float = 10.0, **args: object) -> ControlReply: ...


class HistoryQuiet:
    """The members' history sizes over time: quiet once they stayed the same for `settle` seconds."""

    def __init__(self, settle: float) -> None:
        self.settle_ns = round(settle * 1e9)
        self.sizes: list[int] | None = None
        self.since = 0

    def look(self, histories: list[Path], now_ns: int) -> bool:
        sizes = [p.stat().st_size if p.exists() else -1 for p in histories]
        if sizes != self.sizes:
            self.sizes, self.since = sizes, now_ns
            return False
        return now_ns - self.since >= self.settle_ns


def tasks_done(cluster: _Foreign, name: str) -> bool:
    """Every workload task of the member is done (a `tasks` reply that breaks the contract is an error)."""
    tasks = cluster.control(name, "tasks").get("tasks")
    if not isinstance(tasks, dict) or not all(isinstance(t, dict) and "done" in t for t in tasks.values()):
        raise ClusterError(
            f"member {name}: its `tasks` reply breaks the control contract: it must be "
            f'{{"ok": true, "tasks": {{"1": {{"done": true|false, ...}}, ...}}}}, not {tasks!r:.200}'
        )
    return all(t["done"] for t in tasks.values())


def quiet_verdict(cluster: _Foreign, running: list[str], histories: list[Path], tracker: HistoryQuiet) -> bool | None:
    """One look (see the module docstring); None: the members report `waiting_on`, chaosbed's rule decides."""
    settled = tracker.look(histories, cluster.clock.now_ns())
    if not cluster.system.control:
        return settled
    if not all([tasks_done(cluster, n) for n in running]):
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

"""The one scheduler: a scenario's workloads and faults, on time, on any backend.

A scenario's schedule is compiled once (`compile_schedule`): every network fault gets an id and a window
[start, end) in seconds after t0 (end = its `for` running out or the first later `heal`, whichever comes first), and
the instants of the schedule list what happens at each: network faults switched on and off, workloads started,
member actions (kill, restart, pause, resume, leave, close-connection, set).

`run_schedule` then drives a Cluster through it on the cluster's own clock (virtual in the simulator, CLOCK_MONOTONIC
on real backends). Before t0 it hands every network fault with its window to the cluster's fault table
(`cluster.chaos.plan`), which installs them ahead of time and lets the clock switch them: on netns the kernel's
`meta time` and the NFQUEUE handler's rule windows, in the simulator the event queue. No network operation happens
at a planned instant, so faults with the same `at` take effect together, exactly when the scenario says, and
before any member action of that instant (which the scheduler performs right after it). faults.jsonl gets the
`start` line, then each fault and heal with its planned `at` and its `t`; a member action that starts more than
LATE_MS after its planned time is marked `late` and reported.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.config import DEFAULT_VIEWS_BOUND
from chaos.engine import ChaosError, fault_event, heal_event, normalize
from node.wire import make_address
from orchestration.cluster import Cluster, ClusterError
from orchestration.scenario import NETWORK_FAULTS, Fault, Scenario, Workload

LATE_MS = 20.0  # a member action later than this behind its planned time is reported
ARM_LEAD_S = 0.25  # how far ahead of t0 the real backends install the plan (doubled on each retry)
ARM_TRIES = 3
QUIET_POLL_S = 0.1
CLOCK_DRIFT_MS = 1.0  # more wall-clock drift than this during a schedule is reported
ACTION_AFTER_NS = 1_000  # member actions start at least 1 µs after their instant (see run_schedule)


@dataclass
class PlannedFault:
    """A network fault of the scenario with its id, normalized record and window (seconds after t0)."""

    id: str
    fault: Fault
    record: dict[str, Any]
    start: float
    end: float | None  # None: until the run ends
    ended_by_heal: bool = False


@dataclass
class Instant:
    at: float
    on: list[PlannedFault] = field(default_factory=list)
    off: list[PlannedFault] = field(default_factory=list)  # `for` ran out
    heals: list[Fault] = field(default_factory=list)  # each ends every network fault in force
    workloads: list[Workload] = field(default_factory=list)
    actions: list[Fault] = field(default_factory=list)


@dataclass
class Schedule:
    planned: list[PlannedFault]
    instants: list[Instant]

    @property
    def end(self) -> float:
        return max([i.at for i in self.instants], default=0.0)


def compile_schedule(sc: Scenario) -> Schedule:
    """The scenario's schedule; faults at equal `at` keep file order (a heal ends what is listed before it)."""
    ordered = sorted(enumerate(sc.faults), key=lambda p: (p[1].at, p[0]))
    instants: dict[float, Instant] = {}

    def instant(at: float) -> Instant:
        return instants.setdefault(at, Instant(at))

    planned: list[PlannedFault] = []
    in_force: list[PlannedFault] = []
    for _, f in ordered:
        if f.kind == "heal":
            ended = [p for p in in_force if p.end is None or p.end > f.at]
            for p in ended:
                p.end, p.ended_by_heal = f.at, True
            in_force = []
            instant(f.at).heals.append(f)
        elif f.kind in NETWORK_FAULTS:
            try:
                record = normalize(f.kind, f.args, sc.members, sc.transport)
            except ChaosError as e:
                raise ClusterError(f"faults: {e}") from None
            p = PlannedFault(f"f{len(planned) + 1}", f, record, f.at, None if f.duration is None else f.at + f.duration)
            planned.append(p)
            in_force.append(p)
            instant(f.at).on.append(p)
        else:
            instant(f.at).actions.append(f)
    for p in planned:
        if p.end is not None and not p.ended_by_heal:
            instant(p.end).off.append(p)
    for w in sc.workloads:
        instant(w.start).workloads.append(w)
    return Schedule(planned, [instants[a] for a in sorted(instants)])


@dataclass
class ScheduleResult:
    t0: int
    settled: bool
    late: list[dict[str, Any]] = field(default_factory=list)  # member actions later than LATE_MS
    planned: int = 0  # network faults handed to the cluster's fault table
    warnings: list[str] = field(default_factory=list)  # what could not be done on time, said loudly


def run_schedule(
    cluster: Cluster, sc: Scenario, log_path: Path, *, on_event: Callable[[dict[str, Any]], None] | None = None
) -> ScheduleResult:
    """Runs the scenario's schedule on a started cluster, then waits until it is quiet (or the scenario's timeout,
    counted from t0). Writes faults.jsonl as it goes."""
    schedule = compile_schedule(sc)
    clock = cluster.clock
    seed = sc.seed

    def log(event: dict[str, Any]) -> None:
        with open(log_path, "a") as f:
            f.write(json.dumps(event, separators=(",", ":")) + "\n")
        if on_event is not None:
            on_event(event)

    t0 = _arm(cluster, schedule, seed)
    log({"event": "start", "t": t0, "seed": seed, "backend": cluster.backend_name})
    deadline = t0 + round(sc.timeout * 1e9)
    late: list[dict[str, Any]] = []
    for inst in schedule.instants:
        planned_t = t0 + round(inst.at * 1e9)
        if planned_t > deadline:
            break
        clock.sleep_until(planned_t)
        # Network changes took effect at planned_t by themselves (installed ahead, switched by the clock): log them.
        for p in inst.off:
            log({**heal_event([p.id], seed), "t": planned_t, "at": _at(inst.at)})
        for _ in inst.heals:
            log({**heal_event(None, seed), "t": planned_t, "at": _at(inst.at)})
        for p in inst.on:
            record = {"id": p.id, **p.record, "seed": seed}
            log({**fault_event(record, p.fault.duration), "t": planned_t, "at": _at(inst.at)})
        for w in inst.workloads:
            _start_workload(cluster, w)
        if inst.actions:
            # right after the instant, never at it: what the members do at planned_t (a send the workload paced
            # for that instant) comes first, in the simulator's virtual time as on a real clock
            clock.sleep_until(planned_t + ACTION_AFTER_NS)
        for f in inst.actions:
            started = clock.now_ns()
            _member_action(cluster, f)
            event = {"t": started, "event": "fault", "seed": seed, "kind": f.kind, **f.args, "at": _at(inst.at)}
            lag_ms = (started - planned_t) / 1e6
            if lag_ms > LATE_MS:
                event.update(late=True, lag_ms=round(lag_ms, 1))
                late.append(event)
            log(event)
    warnings = _clock_check(cluster) if schedule.planned else []
    settled = wait_quiet(cluster, deadline, views_wait_until(sc, schedule, t0))
    return ScheduleResult(t0, settled, late, len(schedule.planned), warnings)


def views_wait_until(sc: Scenario, schedule: Schedule, t0: int) -> int | None:
    """Until when (ns) a quiet run also waits for the members' views to agree: the last heal plus the scenario's
    views_converge bound, the window in which the checker requires them to. Without it a run whose messages had
    all arrived ended right after a heal, before the merge, and views_converge failed although its bound had not
    run out (tests/sim/test_runner.py). None: views_converge is off, or a network fault is never healed (the views
    are not expected to agree, and the checker does not check them then)."""
    bound = sc.checks.get("views_converge", DEFAULT_VIEWS_BOUND)
    if bound is False or any(p.end is None for p in schedule.planned):
        return None
    ends = [p.end for p in schedule.planned if p.end is not None] + [f.at for f in sc.faults]
    return t0 + round((max(ends, default=0.0) + float(bound)) * 1e9)


def _clock_check(cluster: Cluster) -> list[str]:
    """The kernel gates planned faults by CLOCK_REALTIME, the histories use CLOCK_MONOTONIC: if the wall clock was
    stepped during the schedule (NTP, an admin), the faults moved with it. Say so rather than be silently off."""
    offset = cluster.chaos.clock_offset()
    if offset is None:
        return []
    drift_ms = abs(time.time_ns() - time.monotonic_ns() - offset) / 1e6
    if drift_ms <= CLOCK_DRIFT_MS:
        return []
    return [
        f"the wall clock moved {drift_ms:.1f} ms against the monotonic clock during the schedule: network faults "
        "(switched by the kernel on the wall clock) took effect up to that much off their planned times"
    ]


def _at(seconds: float) -> str:
    return f"{seconds:g}s"


def _arm(cluster: Cluster, schedule: Schedule, seed: int) -> int:
    """Installs the network faults ahead of time and returns t0. A fault table that is slow to set up (netns:
    handler processes) gets the plan twice: first with every window far in the future, then with the real t0 (only
    rules change). If that ends too close to t0, it is done again with a longer lead: a fault is never installed
    late. The simulator's table plans in virtual time, at once."""
    if not schedule.planned:
        return cluster.clock.now_ns()
    chaos = cluster.chaos
    records = [
        {"id": p.id, **p.record, "seed": seed, "start": p.start, "end": p.end} for p in schedule.planned if _live(p)
    ]
    clock = cluster.clock
    if not chaos.PLAN_AHEAD:
        t0 = clock.now_ns()
        chaos.plan(records, t0)
        return t0
    lead = ARM_LEAD_S
    chaos.plan(records, clock.now_ns() + 10**15)  # dormant: ~11 days ahead
    for _ in range(ARM_TRIES):
        t0 = clock.now_ns() + round(lead * 1e9)
        chaos.plan(records, t0)
        if clock.now_ns() < t0:
            return t0
        lead *= 2
    raise ChaosError(
        f"could not install the schedule's {len(records)} network faults before its start within {ARM_TRIES} tries "
        f"(last lead {lead / 2:g}s): the machine is too busy to put faults on time"
    )


def _live(p: PlannedFault) -> bool:
    """A fault healed at the instant it starts never acts (it is still logged)."""
    return p.end is None or p.end > p.start


def _start_workload(cluster: Cluster, w: Workload) -> None:
    for s in w.senders:
        if s not in cluster.running():
            continue
        if w.kind == "multicast":
            cluster.control(s, "multicast", count=w.count, size=w.size, rate=w.rate)
        for d in w.dests:
            if d != s:
                cluster.control(s, "send", to=d, count=w.count, size=w.size, rate=w.rate)


def _member_action(cluster: Cluster, f: Fault) -> None:
    a = f.args
    if f.kind == "kill":
        cluster.kill(a["member"])
    elif f.kind == "restart":
        cluster.restart(a["member"])
    elif f.kind == "pause":
        cluster.pause(a["member"])
    elif f.kind == "resume":
        cluster.resume(a["member"])
    elif f.kind == "leave":
        cluster.leave(a["member"])
    elif f.kind == "close-connection":
        cluster.control(a["member"], "close", peer=a["peer"])
    elif f.kind == "set":
        proto, prop = a["property"].split(".")
        cluster.control(a["member"], "set", protocol=proto, property=prop, value=a["value"])
    else:
        raise ClusterError(f"faults: {f.kind} is not a member action")


def wait_quiet(cluster: Cluster, deadline: int, views_until: int | None = None) -> bool:
    """Every workload task done on the running members, and none of them waiting for a message with another running
    member (unacknowledged, or missing: Stack.waiting_on), seen twice in a row QUIET_POLL_S apart on the cluster's
    clock, before the deadline. Messages to or from a killed incarnation are not waited for (they never complete);
    the checker reports them. With `views_until`, a quiet cluster also waits, until then at most, for its members'
    views to agree (`views_agree`); views that still disagree are the checker's to report, not a timeout: the
    result says whether the messages settled."""
    clock = cluster.clock
    streak = 0
    while clock.now_ns() < deadline:
        streak = streak + 1 if _quiet(cluster) else 0
        if streak >= 2 and (views_until is None or clock.now_ns() >= views_until or views_agree(cluster)):
            return True
        clock.sleep_until(min(deadline, clock.now_ns() + round(QUIET_POLL_S * 1e9)))
    return streak >= 2


def views_agree(cluster: Cluster) -> bool:
    """Every running member has installed the same view, whose members are exactly their current addresses (what
    the checker's views_converge asks at the end); True for stacks without membership (no views)."""
    own = getattr(cluster, "views_agree", None)  # members of a foreign system: orchestration/systems/quiet.py
    if own is not None:
        return bool(own())
    views = cluster.views()
    if all(v is None for v in views.values()):
        return True
    current = {make_address(n, cluster.members[n].incarnation) for n in views}
    ids = {(v or {}).get("view_id") for v in views.values()}
    return len(ids) == 1 and None not in ids and all(set(v["members"]) == current for v in views.values() if v)


def _quiet(cluster: Cluster) -> bool:
    own = getattr(cluster, "quiet", None)  # members of a foreign system: orchestration/systems/quiet.py
    verdict = own() if own is not None else None
    if verdict is not None:  # None: they report what they wait for, as chaosbed's members do
        return bool(verdict)
    running = [n for n in cluster.running() if not cluster.members[n].paused]
    current = {make_address(n, cluster.members[n].incarnation) for n in running}
    heard: dict[str, dict[str, int]] = {}
    for name in running:
        tasks = cluster.control(name, "tasks")["tasks"]
        if not all(t["done"] for t in tasks.values()):
            return False
        counters = cluster.control(name, "stats")["counters"]
        if any(n and peer in current for peer, n in counters["waiting_on"].items()):
            return False
        heard[name] = counters.get("multicast_heard", {})
    return not _multicast_tail_unheard(cluster, running, heard)


def _multicast_tail_unheard(cluster: Cluster, running: list[str], heard: dict[str, dict[str, int]]) -> bool:
    """True while a member has not received a sender's highest multicast although each is in the other's view: a
    lost tail that no later message reveals (the receiver does not know it misses it; NAKACK2's HIGHEST_SEQNO or
    the next STABLE round repairs it). Without waiting for that, a run would end before the protocol could."""
    if not any(heard.values()):
        return False
    views = {n: set((v or {}).get("members") or ()) for n, v in cluster.views().items()}
    address = {n: make_address(n, cluster.members[n].incarnation) for n in running}
    for s in running:
        sent = heard[s].get(address[s], 0)
        for r in running:
            in_views = address[s] in views.get(r, ()) and address[r] in views.get(s, ())
            if r != s and in_views and heard[r].get(address[s], 0) < sent:
                return True
    return False

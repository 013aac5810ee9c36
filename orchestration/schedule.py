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

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from analysis.config import DEFAULT_VIEWS_BOUND
from chaos.faults import ChaosError, FaultRecord, FaultWindow, JsonObject, TimedFault
from chaos.faults import Fault as NetworkFault
from chaos.normalize import normalize
from node.addresses import make_address, name_of
from orchestration.cluster import Cluster, ClusterError, Counters
from orchestration.fault_log import FaultLog
from orchestration.scenario import NETWORK_FAULTS, Fault, Scenario, Workload
from orchestration.workloads import WorkloadTracker

if TYPE_CHECKING:
    from orchestration.onset_probes import LinkProbes, Onset

LATE_MS = 20.0  # a member action later than this behind its planned time is reported
ARM_LEAD_S = 0.25  # how far ahead of t0 the real backends install the plan (doubled on each retry)
ARM_TRIES = 5  # leads of 0.25, 0.5, 1, 2 and 4 s: a machine busy enough to need the last still gets its faults on time
QUIET_POLL_S = 0.1
CLOCK_DRIFT_MS = 1.0  # more wall-clock drift than this during a schedule is reported
CLOCK_MOVED = "the wall clock moved"  # how that warning starts (tests/netns/test_onset.py reads it)
ACTION_AFTER_NS = 1_000  # member actions start at least 1 µs after their instant (see run_schedule)


@dataclass
class PlannedFault:
    """A network fault of the scenario with its id, normalized form and window (seconds after t0)."""

    id: str
    fault: Fault
    record: NetworkFault
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
                record = normalize(f.kind, f.args, sc.members, sc.transport, sc.system.wire)
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
    late: list[JsonObject] = field(default_factory=list)  # member actions later than LATE_MS (their log lines)
    planned: int = 0  # network faults handed to the cluster's fault table
    warnings: list[str] = field(default_factory=list)  # what could not be done on time, said loudly
    onsets: dict[str, Onset] = field(default_factory=dict)  # a probe run's observed onsets, by fault id


def run_schedule(
    cluster: Cluster,
    sc: Scenario,
    log_path: Path,
    *,
    on_event: Callable[[JsonObject], None] | None = None,
    probes: LinkProbes | None = None,
) -> ScheduleResult:
    """Runs the scenario's schedule on a started cluster, then waits until it is quiet (or the scenario's timeout,
    counted from t0). Writes faults.jsonl as it goes. With `probes` (a probe run, orchestration/onset_probes.py),
    each network fault that the probes saw take effect gets its observed onset in faults.jsonl (`observed_t`)."""
    schedule = compile_schedule(sc)
    clock = cluster.clock
    seed = sc.seed

    log = FaultLog(log_path, on_event=on_event)
    workloads = WorkloadTracker(cluster)
    t0 = _arm(cluster, schedule, seed)
    log.start(t=t0, seed=seed, backend=cluster.backend_name, clocks=cluster.host_clocks())
    deadline = t0 + round(sc.timeout * 1e9)
    late: list[JsonObject] = []
    for inst in schedule.instants:
        planned_t = t0 + round(inst.at * 1e9)
        if planned_t > deadline:
            break
        clock.sleep_until(planned_t)
        # Network changes took effect at planned_t by themselves (installed ahead, switched by the clock): log them.
        for p in inst.off:
            log.heal([p.id], t=planned_t, seed=seed, at=inst.at)
        for _ in inst.heals:
            log.heal(None, t=planned_t, seed=seed, at=inst.at)
        for p in inst.on:
            record = FaultRecord(p.id, p.record, seed)
            log.fault(record, t=planned_t, duration=p.fault.duration, at=inst.at, nemesis=p.fault.nemesis)
        for w in inst.workloads:
            workloads.start(w)
        if inst.actions:
            # right after the instant, never at it: what the members do at planned_t (a send the workload paced
            # for that instant) comes first, in the simulator's virtual time as on a real clock
            clock.sleep_until(planned_t + ACTION_AFTER_NS)
        for f in inst.actions:
            if f.kind == "kill":
                workloads.before_kill(f.member)
            started = clock.now_ns()
            _member_action(cluster, f)
            if f.kind == "kill":
                workloads.after_kill(f.member)
            elif f.kind == "restart":
                workloads.after_restart(f.member, inst.at)  # an application keeps sending after a crash
            lag_ms = (started - planned_t) / 1e6
            late_ms = lag_ms if lag_ms > LATE_MS else None
            event = log.action(f.kind, f.args, t=started, seed=seed, at=inst.at, lag_ms=late_ms, nemesis=f.nemesis)
            if "late" in event:
                late.append(event)
    warnings = _clock_check(cluster) if schedule.planned else []
    settled = wait_quiet(cluster, deadline, views_wait_until(sc, schedule, t0))
    onsets: dict[str, Onset] = {}
    if probes is not None:  # judged against the schedule's own instants, not the windows the fault table was given
        onsets = probes.observe([_planned_record(p, t0, seed) for p in schedule.planned if _live(p)], clock)
        log.observed({fault_id: o.observed for fault_id, o in onsets.items()})
    return ScheduleResult(t0, settled, late, len(schedule.planned), warnings, onsets)


def views_wait_until(sc: Scenario, schedule: Schedule, t0: int) -> int | None:
    """Until when (ns) a quiet run also waits for the members' views to agree: the last heal plus the scenario's
    views_converge bound, the window in which the checker requires them to. Without it a run whose messages had
    all arrived ended right after a heal, before the merge, and views_converge failed although its bound had not
    run out (tests/sim/test_runner.py). None: views_converge is off, or a network fault is never healed (the views
    are not expected to agree, and the checker does not check them then)."""
    bound = sc.checks.get("views_converge", DEFAULT_VIEWS_BOUND)  # seconds, or False (off)
    if not isinstance(bound, int | float) or isinstance(bound, bool) or any(p.end is None for p in schedule.planned):
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
        f"{CLOCK_MOVED} {drift_ms:.1f} ms against the monotonic clock during the schedule: network faults "
        "(switched by the kernel on the wall clock) took effect up to that much off their planned times"
    ]


def _arm(cluster: Cluster, schedule: Schedule, seed: int) -> int:
    """Installs the network faults ahead of time and returns t0. A fault table that is slow to set up (netns:
    handler processes) gets the plan twice: first with every window far in the future, then with the real t0 (only
    rules change). If that ends too close to t0, it is done again with a longer lead: a fault is never installed
    late. The simulator's table plans in virtual time, at once."""
    if not schedule.planned:
        return cluster.clock.now_ns()
    chaos = cluster.chaos
    records = [TimedFault(p.id, p.record, seed, p.start, p.end) for p in schedule.planned if _live(p)]
    clock = cluster.clock
    if not chaos.plan_ahead:
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


def _planned_record(p: PlannedFault, t0: int, seed: int) -> FaultRecord:
    until = None if p.end is None else t0 + round(p.end * 1e9)
    return FaultRecord(p.id, p.record, seed, window=FaultWindow(t0 + round(p.start * 1e9), until))


def _live(p: PlannedFault) -> bool:
    """A fault healed at the instant it starts never acts (it is still logged)."""
    return p.end is None or p.end > p.start


def _member_action(cluster: Cluster, f: Fault) -> None:
    a, member = f.args, f.member
    if f.kind == "kill":
        cluster.kill(member)
    elif f.kind == "restart":
        cluster.restart(member)
    elif f.kind == "pause":
        cluster.pause(member)
    elif f.kind == "resume":
        cluster.resume(member)
    elif f.kind == "leave":
        cluster.leave(member)
    elif f.kind == "close-connection":
        cluster.control(member, "close", peer=a["peer"])
    elif f.kind == "set":
        proto, prop = str(a["property"]).split(".")
        cluster.control(member, "set", protocol=proto, property=prop, value=a["value"])
    else:
        raise ClusterError(f"faults: {f.kind} is not a member action")


def wait_quiet(cluster: Cluster, deadline: int, views_until: int | None = None) -> bool:
    """Quiet is what the checks need, not a protocol's bookkeeping: every workload task done on the running members,
    every message one of them sent to another delivered there, nothing missing anywhere and no sender retransmitting
    for an acknowledgement (Stack.progress; a UNICAST2 message delivered long ago but not yet purged by the next
    STABLE round does not count), seen twice in a row QUIET_POLL_S apart on the cluster's clock, before the
    deadline. Messages to or from a killed incarnation are not waited for (they never complete); the checker reports
    them. With `views_until`, a quiet cluster also waits, until then at most, for its members' views to agree
    (`views_agree`); views that still disagree are the checker's to report, not a timeout: the result says whether
    the messages settled."""
    clock = cluster.clock
    streak = 0
    while clock.now_ns() < deadline:
        streak = streak + 1 if _quiet(cluster) else 0
        if streak >= 2 and (views_until is None or clock.now_ns() >= views_until or views_agree(cluster)):
            return True
        clock.sleep_until(min(deadline, clock.now_ns() + round(QUIET_POLL_S * 1e9)))
    return streak >= 2 or _only_a_tail_owed(cluster)


def _only_a_tail_owed(cluster: Cluster) -> bool:
    """Foreign members wait a while longer for a multicast tail the histories show owed (systems/quiet.py); at the
    deadline that wait is over, not a run that never finished."""
    own = getattr(cluster, "only_a_tail_owed", None)
    return bool(own()) if own is not None else False


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
    ids = {v["view_id"] if v else None for v in views.values()}
    return len(ids) == 1 and None not in ids and all(set(v["members"]) == current for v in views.values() if v)


def _quiet(cluster: Cluster) -> bool:
    own = getattr(cluster, "quiet", None)  # members of a foreign system: orchestration/systems/quiet.py
    verdict = own() if own is not None else None
    if verdict is not None:  # None: they report what they wait for, as chaosbed's members do
        return bool(verdict)
    running = [n for n in cluster.running() if not cluster.members[n].paused]
    current = {make_address(n, cluster.members[n].incarnation) for n in running}
    heard: dict[str, dict[str, float]] = {}
    sent: dict[str, dict[str, tuple[int, int]]] = {}
    delivered: dict[str, dict[str, tuple[int, int]]] = {}
    for name in running:
        tasks = cluster.control(name, "tasks")["tasks"]
        if not all(t["done"] for t in tasks.values()):
            return False
        counters = cluster.control(name, "stats")["counters"]
        waiting = _waiting(counters)
        if any(n and peer in current for section in waiting for peer, n in section.items()):
            return False
        heard[name] = counters.get("multicast_heard", {})
        sent[name] = _connections(counters.get("unicast_sent"))
        delivered[name] = _connections(counters.get("unicast_delivered"))
    address = {n: make_address(n, cluster.members[n].incarnation) for n in running}
    return not _unicast_owed(address, sent, delivered) and not _multicast_tail_unheard(cluster, running, heard)


def _waiting(counters: Counters) -> tuple[dict[str, float], ...]:
    """What a member still waits for, by peer address: chaosbed's members report what is missing and what awaits an
    ACK apart (Stack.progress); a foreign member may report just `waiting_on` (docs/contracts/control.md)."""
    if "missing_from" in counters:
        return counters["missing_from"], counters.get("awaiting_ack", {})
    return (counters.get("waiting_on", {}),)


def _connections(section: object) -> dict[str, tuple[int, int]]:
    """A `unicast_sent` or `unicast_delivered` counter section: peer address -> (conn-id, highest seqno)."""
    if not isinstance(section, dict):
        return {}
    return {str(peer): (int(v[0]), int(v[1])) for peer, v in section.items() if isinstance(v, list) and len(v) == 2}


def _unicast_owed(
    address: dict[str, str],
    sent: dict[str, dict[str, tuple[int, int]]],
    delivered: dict[str, dict[str, tuple[int, int]]],
) -> bool:
    """True while a running member has not delivered the last unicast a running sender sent it on their current
    connection: a lost tail no later message reveals, or a connection the receiver has not opened yet."""
    for s, connections in sent.items():
        for peer, (conn_id, highest) in connections.items():
            r = name_of(peer)
            if highest <= 0 or r not in address or address[r] != peer:
                continue
            got = delivered[r].get(address[s])
            if got is None or got[0] != conn_id or got[1] < highest:
                return True
    return False


def _multicast_tail_unheard(cluster: Cluster, running: list[str], heard: dict[str, dict[str, float]]) -> bool:
    """True while a member has not received a sender's highest multicast although each is in the other's view: a
    lost tail that no later message reveals (the receiver does not know it misses it; NAKACK2's HIGHEST_SEQNO or
    the next STABLE round repairs it). Without waiting for that, a run would end before the protocol could."""
    if not any(heard.values()):
        return False
    views = {n: set(v["members"]) if v else set() for n, v in cluster.views().items()}
    address = {n: make_address(n, cluster.members[n].incarnation) for n in running}
    for s in running:
        sent = heard[s].get(address[s], 0)
        for r in running:
            in_views = address[s] in views.get(r, ()) and address[r] in views.get(s, ())
            if r != s and in_views and heard[r].get(address[s], 0) < sent:
                return True
    return False

"""What a base scenario offers a random schedule: its members and stack, when its workload sends, and the bounds
its checks set. The generator (generator.py) reads only this, so it never needs the scenario file itself.

Timing is relative to the workload: faults start while messages flow (between the first workload's start and the
last one's estimated end) and every fault is over by `horizon`, early enough that the scenario's timeout leaves the
views their `views_converge` bound (plus a margin) to agree after the last heal.
"""

from __future__ import annotations

from dataclasses import dataclass

from analysis.config import DEFAULT_VIEWS_BOUND
from node.protocols.fd import FdProps
from node.stack import STACKS, has_membership
from orchestration.scenario import Scenario

UNPACED_RATE = 1000.0  # messages/s assumed for a workload without a rate (as fast as flow control allows)
END_SLACK = 1.0  # faults may outlast the workload by this much (a fault at the very end, then its heal)
CONVERGE_MARGIN = 3.0  # seconds the timeout must leave after the views' bound (the run's own drain and stop)
MIN_SPAN = 1.0  # the least window a schedule gets, however short the workload


@dataclass(frozen=True)
class Context:
    """A base scenario as the generator sees it."""

    members: tuple[str, ...]
    stack: str
    transport: str
    protocols: tuple[str, ...]  # the wire names of the stack's protocols (UNICAST3, NAKACK2, GMS, ...)
    start: float  # when the first workload starts (s after the schedule's t0)
    end: float  # when the last workload is expected to have sent everything (at least MIN_SPAN after `start`)
    horizon: float  # every fault is over by then
    unicast_links: frozenset[tuple[str, str]] = frozenset()  # (sender, receiver) pairs a unicast workload uses
    senders: frozenset[str] = frozenset()
    workload_starts: tuple[tuple[float, frozenset[str]], ...] = ()  # (start, senders): a pause must not cover it
    seqnos: tuple[int, ...] = (1,)  # seqnos worth matching: first, last and middle messages of the workloads
    delivery_bound: float | None = None  # delivered_within (s)
    views_bound: float | None = None  # views_converge (s); None: off, or no membership
    detect: float = 0.0  # how long failure detection takes to exclude a crashed member (fd timeout + check)
    sends_until: float = 0.0  # when the last message is expected to be sent (`end` without the MIN_SPAN padding)
    wire: str = "chaosbed"  # the wire profile discards are drawn from ("none": no discards)
    native: bool = True  # chaosbed's own member (close-connection and companion discards need it)
    real: bool = False  # schedules run on real members (over tcp, the kernel's TCP repairs what faults drop)

    @property
    def membership(self) -> bool:
        return "GMS" in self.protocols

    @property
    def discards(self) -> bool:
        """Whether discard rules can be drawn: datagrams (udp) and a wire profile that decodes them."""
        return self.udp and self.wire != "none"

    @property
    def udp(self) -> bool:
        return self.transport == "udp"

    @property
    def crashes_converge(self) -> bool:
        """Whether a crashed member is excluded (and its new incarnation let in) well within the views' bound: else
        a kill alone makes views_converge fail, and kills are left out of schedules."""
        return self.views_bound is None or self.detect + 1.0 <= self.views_bound

    def max_delay(self) -> float:
        """The largest added latency a schedule uses: a quarter of delivered_within, at most 0.5 s."""
        return min(0.5, self.delivery_bound / 4) if self.delivery_bound else 0.5


def last_send(sc: Scenario) -> float:
    """When the last workload is expected to have sent its last message (0 without workloads)."""
    return max((w.start + w.count / (w.rate or UNPACED_RATE) for w in sc.workloads), default=0.0)


def workload_span(sc: Scenario) -> tuple[float, float]:
    """The window schedules are drawn in: (first start, last expected end) of the scenario's workloads, at least
    MIN_SPAN long; (0, MIN_SPAN) without any."""
    if not sc.workloads:
        return 0.0, MIN_SPAN
    start = min(w.start for w in sc.workloads)
    return start, max(last_send(sc), start + MIN_SPAN)


def seqno_hints(sc: Scenario) -> tuple[int, ...]:
    """Seqnos of interesting messages: the first, the middle and the last of each workload, and the last of each
    sender's workloads one after another (seqnos of one stream go on across workloads)."""
    hints = {1}
    totals: dict[tuple[str, str, tuple[str, ...]], int] = {}
    for w in sc.workloads:
        for s in w.senders:
            key = (w.kind, s, tuple(w.dests))
            totals[key] = totals.get(key, 0) + w.count
            hints |= {max(1, w.count // 2), max(1, w.count), totals[key]}
    return tuple(sorted(hints))


def context_of(sc: Scenario, *, real: bool = False) -> Context:
    """The context of a parsed scenario of chaosbed's own member (its own faults play no part); `real`: its schedules
    run on real members. A foreign system's context is foreign_context.py's (`context_for` picks)."""
    start, end = workload_span(sc)
    views: float | None = None
    if has_membership(sc.stack):
        bound = sc.checks.get("views_converge", DEFAULT_VIEWS_BOUND)
        views = _bound(bound)
    horizon = end + END_SLACK
    if views is not None:
        horizon = min(horizon, sc.timeout - views - CONVERGE_MARGIN)
    else:
        horizon = min(horizon, sc.timeout - CONVERGE_MARGIN)
    horizon = max(horizon, start + 0.2)
    unicast = frozenset(
        (s, d) for w in sc.workloads if w.kind == "unicast" for s in w.senders for d in w.dests if s != d
    )
    delivery = sc.checks.get("delivered_within")
    fd = FdProps()
    fd.update(sc.properties.get("fd", {}))
    return Context(
        members=tuple(sc.members),
        stack=sc.stack,
        transport=sc.transport,
        protocols=tuple(p.upper() for p in STACKS[sc.stack]),
        start=start,
        end=end,
        horizon=horizon,
        unicast_links=unicast,
        senders=frozenset(s for w in sc.workloads for s in w.senders),
        workload_starts=tuple((w.start, frozenset(w.senders)) for w in sc.workloads),
        seqnos=seqno_hints(sc),
        delivery_bound=_bound(delivery),
        views_bound=views,
        detect=fd.timeout + fd.timeout_check_interval if has_membership(sc.stack) else 0.0,
        sends_until=last_send(sc),
        real=real,
    )


def short_window(ctx: Context, timeout: float) -> str | None:
    """What to say when the scenario's timeout cuts the window faults are drawn in short of its workload's end (the
    views' bound and the run's drain come first): most of the workload then runs under no fault, and a search over
    it finds little. None when the window covers at least half of the workload."""
    if ctx.horizon >= (ctx.start + ctx.end) / 2:
        return None
    views = f" - {ctx.views_bound:g} s (views_converge)" if ctx.views_bound else ""
    need = ctx.end + END_SLACK + (ctx.views_bound or 0.0) + CONVERGE_MARGIN
    return (
        f"faults are drawn in {ctx.start:g}-{ctx.horizon:g} s only, and the workload runs until {ctx.end:g} s: the "
        f'timeout ({timeout:g} s){views} - {CONVERGE_MARGIN:g} s leaves no more; timeout = "{need:g}s"'
        + (" (or a smaller views_converge bound)" if ctx.views_bound else "")
        + " lets faults cover the workload"
    )


def bound(value: object) -> float | None:
    """A [checks] bound in seconds, None when it is off."""
    return _bound(value)


def _bound(value: object) -> float | None:
    """A [checks] bound in seconds (the parsed scenario holds numbers), None when it is off (false or absent)."""
    if value is None or isinstance(value, bool):
        return None
    if not isinstance(value, int | float):
        raise TypeError(f"a check's bound must be a number of seconds, not {value!r}")
    return float(value)

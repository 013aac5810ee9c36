"""FD: failure detection by heartbeats (like JGroups' FD_ALL / FD_ALL3).

Every member of a view multicasts HEARTBEAT every `interval`. Any message of this protocol from a member counts as
a sign of life. Every `timeout_check_interval` a member suspects each view member it has not heard from for
`timeout` and tells its GMS (which excludes the member if it coordinates, or takes over if every member before it
is suspected); a non-coordinator also sends SUSPECT(member) to the coordinator. A later heartbeat un-suspects.

A coordinator that receives SUSPECT(m) verifies it locally (JGroups runs VERIFY_SUSPECT for this): it accepts the
suspicion only if it has not heard from m for `timeout / 2` itself, so a member that one reporter cannot hear (a
one-way cut) is not excluded while the coordinator still hears it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from node.protocols.base import NEVER, Outbox, Properties
from node.wire import View, header_class

HEARTBEAT = header_class("FD", "HEARTBEAT")
SUSPECT = header_class("FD", "SUSPECT")


class SuspectListener(Protocol):
    """What FD needs from GMS."""

    @property
    def is_coord(self) -> bool: ...

    @property
    def coordinator(self) -> str | None: ...

    def suspect(self, member: str, now: float, out: Outbox) -> None: ...

    def unsuspect(self, member: str, now: float, out: Outbox) -> None: ...


@dataclass
class FdProps(Properties):
    """Properties with JGroups' FD_ALL names and defaults; durations in seconds."""

    DURATIONS: ClassVar[frozenset[str]] = frozenset({"interval", "timeout", "timeout_check_interval"})

    interval: float = 8.0  # heartbeat interval
    timeout: float = 40.0  # a member not heard from for this long is suspected
    timeout_check_interval: float = 2.0  # how often members are checked against timeout

    def validate(self) -> None:
        for name in ("interval", "timeout", "timeout_check_interval"):
            if getattr(self, name) <= 0:
                raise ValueError(f"fd.{name} must be > 0")


COUNTERS = (
    "heartbeats_sent",
    "heartbeats_received",
    "suspects_sent",
    "suspects_received",
    "suspect_reports_accepted",
    "suspect_reports_refuted",
    "suspicions",
    "unsuspicions",
    "checks",
)


class Fd:
    """The FD state machine of one member."""

    NAME = "fd"
    PROTOCOL = "FD"

    def __init__(self, local: str, props: FdProps | None = None) -> None:
        self.local = local
        self.props = props or FdProps()
        self.props.validate()
        self.gms: SuspectListener | None = None
        self.members: tuple[str, ...] = ()
        self.last_heard: dict[str, float] = {}  # any sender (members or not): used by MERGE for reachability
        self.suspected: set[str] = set()
        self.active = False
        self._next_heartbeat = NEVER
        self._next_check = NEVER
        self.c = dict.fromkeys(COUNTERS, 0)

    # --- membership -----------------------------------------------------------------------------------------------

    def install_view(self, view: View, now: float, out: Outbox) -> None:
        """Starts (or keeps) the tasks; members new to this view get a full timeout from now."""
        previous = set(self.members)
        self.members = view.members
        for m in view.members:
            if m not in previous:
                self.last_heard[m] = max(self.last_heard.get(m, now), now)
        self.suspected &= set(view.members)
        if not self.active:
            self.active = True
            self._next_heartbeat = now
            self._next_check = now + self.props.timeout_check_interval

    def stop(self) -> None:
        """The member left: no more heartbeats or suspicions."""
        self.active = False
        self._next_heartbeat = self._next_check = NEVER

    def heard_within(self, member: str, now: float, period: float) -> bool:
        t = self.last_heard.get(member)
        return t is not None and now - t <= period

    # --- network side ---------------------------------------------------------------------------------------------

    def handle(self, src: str, msgs: list[Any], now: float, out: Outbox) -> None:
        if src == self.local:
            return
        self.last_heard[src] = now
        for m in msgs:
            if type(m) is HEARTBEAT:
                self.c["heartbeats_received"] += 1
            elif type(m) is SUSPECT:
                self.c["suspects_received"] += 1
                self._handle_suspect_report(m.member, now, out)
        if src in self.suspected:
            self.suspected.discard(src)
            self.c["unsuspicions"] += 1
            if self.gms is not None:
                self.gms.unsuspect(src, now, out)

    def _handle_suspect_report(self, member: str, now: float, out: Outbox) -> None:
        gms = self.gms
        if gms is None or not gms.is_coord or member == self.local or member not in self.members:
            return
        if self.heard_within(member, now, self.props.timeout / 2):
            self.c["suspect_reports_refuted"] += 1
            return
        self.c["suspect_reports_accepted"] += 1
        self._suspect(member, now, out, report=False)

    # --- timers ---------------------------------------------------------------------------------------------------

    def next_wakeup(self) -> float:
        return min(self._next_heartbeat, self._next_check) if self.active else NEVER

    def tick(self, now: float, out: Outbox) -> None:
        if not self.active:
            return
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + self.props.interval
            out.sends.append((None, HEARTBEAT()))
            self.c["heartbeats_sent"] += 1
        if now >= self._next_check:
            self._next_check = now + self.props.timeout_check_interval
            self._check(now, out)

    def _check(self, now: float, out: Outbox) -> None:
        self.c["checks"] += 1
        timeout = self.props.timeout
        for m in self.members:
            if m != self.local and m not in self.suspected and now - self.last_heard.get(m, now) >= timeout:
                self._suspect(m, now, out, report=True)
        # forget non-members not heard from for long: the table stays bounded by the senders actually alive
        for m in [m for m, t in self.last_heard.items() if m not in self.members and now - t > 2 * timeout]:
            del self.last_heard[m]

    def _suspect(self, member: str, now: float, out: Outbox, *, report: bool) -> None:
        self.suspected.add(member)
        self.c["suspicions"] += 1
        out.events.append({"event": "suspect", "peer": member})
        gms = self.gms
        if gms is None:
            return
        coord = gms.coordinator
        if report and coord is not None and coord != self.local and coord != member:
            out.sends.append((coord, SUSPECT(member)))
            self.c["suspects_sent"] += 1
        gms.suspect(member, now, out)

    # --- introspection --------------------------------------------------------------------------------------------

    def set_property(self, name: str, value: Any) -> None:
        self.props.set(name, value)
        if self.active:
            self._next_heartbeat = self._next_check = -NEVER  # apply at the next tick

    def counters(self) -> dict[str, int]:
        stats = dict(self.c)
        stats["suspected"] = len(self.suspected)
        stats["members"] = len(self.members)
        return stats

    def is_idle(self) -> bool:
        return True

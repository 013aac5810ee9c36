"""MERGE: finds subgroups that can hear each other again after a partition (like JGroups' MERGE3).

Every member of a view multicasts INFO(view_id) at intervals drawn between `min_interval` and `max_interval` (from a
seeded generator: runs replay exactly). Every `check_interval` a member looks at the view ids it heard in the last
`check_interval`, its own included. More than one view id means the group is split (other coordinators, or members
of our own view that installed another view: the asymmetric case). Each view id gets a representative: its
coordinator if that member reports it (for our own view: our coordinator if FD still hears it), otherwise the
smallest member reporting it. The smallest representative is the merge leader; if that is this member, it asks its
GMS to run the merge handshake with the other representatives. Members computing different leaders (they heard
different things) at worst start competing merges; GMS lets only one win (merge ids, rejections, timeouts).

After a heal the first INFO that crosses is evidence enough (`other_view_check_delay`, not in MERGE3): a member that
hears a view id other than its own (or one its view merged) sends its own INFO at once, so the other side learns
its view too, and runs the check `other_view_check_delay` later instead of up to check_interval later; each at most
once per min_interval, so a split that cannot merge costs no more than MERGE3's schedule plus that.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from node.protocols.base import NEVER, SECONDS, BuildContext, Effects, Layer, Properties, prop
from node.wire import Message, View, ViewId
from node.wire_headers import MERGE_INFO as INFO


class MergeStarter(Protocol):
    """What MERGE needs from GMS."""

    def note_view_id(self, view_id: ViewId) -> None: ...

    def start_merge(self, reps: dict[ViewId, str], reported: dict[str, ViewId], now: float, out: Effects) -> None: ...


class Liveness(Protocol):
    """What MERGE needs from FD."""

    def heard_within(self, member: str, now: float, period: float) -> bool: ...


@dataclass
class Merge3Props(Properties):
    """Properties with JGroups' MERGE3 names and defaults; durations in seconds."""

    min_interval: float = prop(1.0, "INFO is sent at intervals drawn from [min_interval, max_interval]", SECONDS)
    max_interval: float = prop(10.0, "the longest interval between two INFOs (see min_interval)", SECONDS)
    check_interval: float = prop(
        0.0, "how often view ids are compared; 0 = max_interval * 1.6 (as MERGE3 computes it)", SECONDS
    )
    max_participants_in_merge: int = prop(100, "representatives (subgroups) in one merge, the leader's included")
    other_view_check_delay: float = prop(
        0.1,
        "an INFO of another view id sends this member's INFO at once and checks this much later (each at most once "
        "per min_interval); 0 = off: checks only every check_interval, as MERGE3",
        SECONDS,
    )

    def validate(self) -> None:
        if self.min_interval <= 0 or self.max_interval < self.min_interval:
            raise ValueError("merge: need 0 < min_interval <= max_interval")
        if self.check_interval < 0:
            raise ValueError("merge.check_interval must be >= 0 (0: max_interval * 1.6)")
        if self.max_participants_in_merge < 2:
            raise ValueError("merge.max_participants_in_merge must be >= 2")
        if self.other_view_check_delay < 0:
            raise ValueError("merge.other_view_check_delay must be >= 0 (0: off)")

    def effective_check_interval(self) -> float:
        return self.check_interval or self.max_interval * 1.6


class Merge(Layer[Merge3Props]):
    """The MERGE state machine of one member."""

    NAME = "merge"
    PROTOCOL = "MERGE"
    PROPS = Merge3Props
    COUNTERS = (
        "infos_sent",
        "infos_received",
        "infos_other_view",
        "early_checks",
        "checks",
        "inconsistencies",
        "merges_triggered",
    )

    def __init__(
        self,
        local: str,
        props: Merge3Props | None = None,
        *,
        seed: int | None = None,
        membership: MergeStarter | None = None,
        liveness: Liveness | None = None,
    ) -> None:
        super().__init__(local, props)
        # deterministic jitter: the same seed and address give the same INFO schedule
        self.rng = random.Random(
            zlib.crc32(local.encode()) if seed is None else (seed << 32) ^ zlib.crc32(local.encode())
        )
        self.membership = membership  # starts the merges this member leads (GMS, below MERGE in the stack)
        self.liveness = liveness  # who is heard from (FD)
        self.view: View | None = None
        self.infos: dict[str, tuple[ViewId, float]] = {}  # sender -> (its view id, when heard)
        self.active = False
        self._next_info = NEVER
        self._next_check = NEVER
        self._last_early_info = self._last_early_check = -NEVER  # other_view_check_delay's rate limits

    @classmethod
    def create(cls, local: str, props: Mapping[str, object], ctx: BuildContext) -> Merge:
        return cls(local, cls.make_props(props), seed=ctx.seed, membership=ctx.membership, liveness=ctx.liveness)

    # --- membership -----------------------------------------------------------------------------------------------

    def install_view(self, view: View, now: float, out: Effects) -> None:
        """Forgets reports made stale by this view: members of it that reported our previous view id or one of the
        views it merged are with us now, and members it removed were heard before we gave up on them (an INFO they
        send now brings them back; without this, a member cut off by a partition still "reports" our previous view
        id for a check_interval, and a merge with it is tried, and times out, before the heal). Other reports of
        members of this view stay (a member listed in our view may not have installed it: an overlapping
        partition). Our next INFO goes out soon, so that others learn the new id."""
        stale = set(view.merged_from)
        if self.view is not None:
            stale.add(self.view.view_id)
            for m in set(self.view.members) - set(view.members):
                self.infos.pop(m, None)
        for m in view.members:
            entry = self.infos.get(m)
            if entry is not None and entry[0] in stale:
                del self.infos[m]
        self.view = view
        if not self.active:
            self.active = True
            self._next_check = now + self.props.effective_check_interval()
        self._next_info = min(self._next_info, now + self.rng.uniform(0, self.props.min_interval))

    def reported(self) -> dict[str, ViewId]:
        """The view id each member last reported (within check_interval)."""
        return {m: vid for m, (vid, _) in self.infos.items()}

    def stop(self) -> None:
        self.active = False
        self._next_info = self._next_check = NEVER

    def _info_delay(self) -> float:
        p = self.props
        return self.rng.uniform(p.min_interval, p.max_interval)

    # --- network side ---------------------------------------------------------------------------------------------

    def handle(self, src: str, msgs: list[Message], now: float, out: Effects) -> None:
        if src == self.local:
            return
        for m in msgs:
            if not isinstance(m, INFO):
                continue
            self.c["infos_received"] += 1
            self.infos[src] = (m.view_id, now)
            if self.view is not None and m.view_id != self.view.view_id:
                self.c["infos_other_view"] += 1
                if m.view_id not in self.view.merged_from:
                    self._react_to_other_view(now)
            if self.membership is not None:
                self.membership.note_view_id(m.view_id)

    def _react_to_other_view(self, now: float) -> None:
        """Brings the next INFO and the next check forward (see the module docstring), each at most once per
        min_interval."""
        delay = self.props.other_view_check_delay
        if not self.active or delay <= 0:
            return
        if now - self._last_early_info >= self.props.min_interval:
            self._last_early_info = now
            self._next_info = min(self._next_info, now)
        if now - self._last_early_check >= self.props.min_interval and now + delay < self._next_check:
            self._last_early_check = now
            self._next_check = now + delay
            self.c["early_checks"] += 1

    # --- timers ---------------------------------------------------------------------------------------------------

    def next_wakeup(self) -> float:
        return min(self._next_info, self._next_check) if self.active else NEVER

    def tick(self, now: float, out: Effects) -> None:
        if not self.active or self.view is None:
            return
        if now >= self._next_info:
            self._next_info = now + self._info_delay()
            out.send(None, INFO(self.view.view_id))
            self.c["infos_sent"] += 1
        if now >= self._next_check:
            self._next_check = now + self.props.effective_check_interval()
            self._check(now, out)

    def _check(self, now: float, out: Effects) -> None:
        """Compares the view ids heard recently; starts a merge if this member is the merge leader."""
        self.c["checks"] += 1
        view = self.view
        assert view is not None
        window = self.props.effective_check_interval()
        for m in [m for m, (_, t) in self.infos.items() if now - t > window]:
            del self.infos[m]
        reported = {m: vid for m, (vid, _) in self.infos.items()}
        reported[self.local] = view.view_id
        senders: dict[ViewId, list[str]] = {}
        for m in sorted(reported):
            senders.setdefault(reported[m], []).append(m)
        if len(senders) < 2:
            return
        self.c["inconsistencies"] += 1
        reps = {vid: self._representative(vid, members, reported, now) for vid, members in senders.items()}
        chosen = sorted(reps.items(), key=lambda item: item[1])[: self.props.max_participants_in_merge]
        if chosen[0][1] != self.local or self.membership is None:
            return
        self.c["merges_triggered"] += 1
        self.membership.start_merge(dict(chosen), reported, now, out)

    def _representative(self, vid: ViewId, members: list[str], reported: dict[str, ViewId], now: float) -> str:
        """The coordinator of the view with this id if it still has that view (for our own view: if it has not
        reported another one and FD hears it), else the smallest member reporting the view id."""
        view = self.view
        assert view is not None
        if vid == view.view_id:
            coord = view.coordinator
            if coord == self.local or reported.get(coord) == vid:
                return coord
            fd = self.liveness
            if coord not in reported and fd is not None and fd.heard_within(coord, now, self._liveness_window()):
                return coord
            return members[0]
        return vid.creator if vid.creator in members else members[0]

    def _liveness_window(self) -> float:
        return self.props.effective_check_interval()

    # --- introspection --------------------------------------------------------------------------------------------

    def property_changed(self, name: str) -> None:
        if self.active:
            self._next_info = self._next_check = -NEVER  # apply at the next tick

    def gauges(self) -> dict[str, int]:
        return {"infos_known": len(self.infos)}

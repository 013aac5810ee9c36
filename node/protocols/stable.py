"""STABLE: decentralised gossip of delivered seqnos, so NAKACK2 can purge what every member has (JGroups STABLE).

Every `desired_avg_gossip` (a fixed interval: runs must replay exactly), and as soon as `max_bytes` of multicast
payload were delivered since the previous gossip, a member multicasts STABLE(view_id, digest): its source's digest
(highest delivered, highest received per sender) restricted to the view's members. Every member keeps the latest
digest of each view member for the current view id. Once it has one from every member it hands the source the
per-sender minimum of highest delivered (and maximum of highest received, which lets NAKACK2 find a lost tail), and
starts a new round. A member's own entry in its digest is (purged, highest sent): it counts as (highest sent, highest
sent), since a member delivers its own multicasts at once. A view change starts a new round; STABLEs of another view
id are ignored.

During a merge handshake (the stack sets `holds_own_purges` to GMS's holds_multicasts) a completed round purges
nothing of our own multicasts: the merge digest we answered gives our purged point, and receivers restart their
windows for us there and ask for what lies above it; a purge past it before the merge view would leave them asking
for messages we no longer hold. The next round after the merge purges them.

Digests only grow, so using an older digest of a member (one sent before the previous round ended) is safe: the
minimum can only be lower than it could have been, never above what a member delivered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from node.protocols.base import NEVER, SECONDS, BuildContext, Effects, Properties, StabilityLayer, prop
from node.wire import Digest, Message, View, ViewId
from node.wire_headers import STABLE_STABLE as STABLE


@runtime_checkable
class DigestSource(Protocol):
    """What STABLE needs from the multicast protocol (Nakack2)."""

    def digest(self) -> Digest: ...

    def stable(self, digest: Digest) -> None: ...


@dataclass
class StableProps(Properties):
    """Properties with JGroups' names and defaults; durations in seconds."""

    desired_avg_gossip: float = prop(
        20.0, "gossip interval (fixed here, JGroups randomises it); 0 disables the task", SECONDS
    )
    max_bytes: int = prop(2_000_000, "delivered multicast payload bytes that trigger a gossip at once; 0 disables")

    def validate(self) -> None:
        if self.desired_avg_gossip < 0 or self.max_bytes < 0:
            raise ValueError("stable.desired_avg_gossip and stable.max_bytes must be >= 0")


class Stable(StabilityLayer[StableProps]):
    """The STABLE state machine of one member."""

    NAME = "stable"
    PROTOCOL = "STABLE"
    PROPS = StableProps
    COUNTERS = (
        "stable_sent",
        "stable_received",
        "stable_other_view_id",
        "stable_from_non_members",
        "stable_rounds",
        "stable_own_purges_deferred",
        "gossips_max_bytes",
    )

    def __init__(self, local: str, source: DigestSource, props: StableProps | None = None) -> None:
        super().__init__(local, props)
        self.source = source
        self.view_id: ViewId | None = None
        self.members: tuple[str, ...] = ()
        self.digests: dict[str, Digest] = {}  # this round's latest digest of each view member (current view id)
        self.bytes_delivered = 0  # since the last gossip
        self._gossip_due = False  # max_bytes reached: gossip at the next tick
        self._next_gossip = -NEVER  # the first tick starts the gossip task
        self.holds_own_purges: Callable[[], bool] = lambda: False  # a merge handshake is under way (set by the stack)

    @classmethod
    def create(cls, local: str, props: Mapping[str, object], ctx: BuildContext) -> Stable:
        source = ctx.multicast
        if not isinstance(source, DigestSource):
            raise ValueError("stable needs a multicast protocol below it that takes stability digests (nakack2)")
        return cls(local, source, cls.make_props(props))

    # --- input ----------------------------------------------------------------------------------------------------

    def note_delivered(self, nbytes: int) -> None:
        """The stack reports delivered multicast payload bytes; max_bytes of them make the next tick gossip."""
        self.bytes_delivered += nbytes
        if 0 < self.props.max_bytes <= self.bytes_delivered:
            self._gossip_due = True

    def handle(self, src: str, msgs: list[Message], now: float, out: Effects) -> None:
        c = self.c
        for m in msgs:
            if not isinstance(m, STABLE):
                continue
            c["stable_received"] += 1
            if m.view_id != self.view_id:
                c["stable_other_view_id"] += 1
            elif src not in self.members:
                c["stable_from_non_members"] += 1
            else:
                self.digests[src] = self._restrict(m.digest)
        self._maybe_complete()

    def install_view(self, view: View, now: float, out: Effects) -> None:
        """A new view id starts a new round: digests collected for the previous one are dropped."""
        if view.view_id != self.view_id:
            self.digests.clear()
        self.view_id = view.view_id
        self.members = view.members

    # --- rounds ---------------------------------------------------------------------------------------------------

    def _restrict(self, digest: Digest) -> Digest:
        members = self.members
        return {m: seqnos for m, seqnos in digest.items() if m in members}

    def _gossip(self, out: Effects) -> None:
        self.bytes_delivered = 0
        self._gossip_due = False
        if self.view_id is None or self.local not in self.members:
            return
        digest = self._restrict(self.source.digest())
        out.send(None, STABLE(self.view_id, digest))
        self.c["stable_sent"] += 1
        self.digests[self.local] = digest  # our own STABLE may not come back from the network
        self._maybe_complete()

    def _maybe_complete(self) -> None:
        digests = self.digests
        if not self.members or any(m not in digests for m in self.members):
            return
        stable: Digest = {}
        for sender in self.members:  # only senders every member reports on
            # the sender's own entry is (purged, highest sent): it delivered everything it sent
            entries = [
                (d[sender][1], d[sender][1]) if m == sender else d[sender] for m, d in digests.items() if sender in d
            ]
            if len(entries) == len(digests):
                stable[sender] = (min(hd for hd, _ in entries), max(hr for _, hr in entries))
        digests.clear()
        self.c["stable_rounds"] += 1
        if self.local in stable and self.holds_own_purges():
            del stable[self.local]
            self.c["stable_own_purges_deferred"] += 1
        self.source.stable(stable)

    # --- timers ---------------------------------------------------------------------------------------------------

    def next_wakeup(self) -> float:
        if self._gossip_due:
            return -NEVER
        return self._next_gossip if self.props.desired_avg_gossip > 0 else NEVER

    def tick(self, now: float, out: Effects) -> None:
        interval = self.props.desired_avg_gossip
        if interval > 0 and now >= self._next_gossip:
            self._next_gossip = now + interval
            self._gossip(out)
        elif self._gossip_due:
            self.c["gossips_max_bytes"] += 1
            self._gossip(out)

    # --- introspection --------------------------------------------------------------------------------------------

    def property_changed(self, name: str) -> None:
        if name == "desired_avg_gossip":
            self._next_gossip = -NEVER  # apply at the next tick
        elif name == "max_bytes":
            self.note_delivered(0)

    def gauges(self) -> dict[str, int]:
        return {"digests_collected": len(self.digests)}

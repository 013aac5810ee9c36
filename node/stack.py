"""A member's protocol stack: composes sans-IO protocols from a config and moves bytes in and out of them.

The stack owns the only I/O-shaped edges a protocol has: datagrams in (decoded, checked, split into one batch per
protocol), and datagrams out (a protocol's sends bundled per destination, several messages per datagram, under
`max_datagram_size`). Whoever drives it (the simulator, node/runtime.py) calls `receive`, `send`, `tick`, then
`drain()` and does the I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from node import wire
from node.addresses import make_address, name_of
from node.protocols.base import (
    BuildContext,
    Deliver,
    Effects,
    Event,
    EventlessEffects,
    FailureDetector,
    Layer,
    MembershipLayer,
    MulticastLayer,
    Properties,
    Send,
    StabilityLayer,
    UnicastLayer,
)
from node.protocols.fd import Fd
from node.protocols.gms import Gms
from node.protocols.mcast import Mcast
from node.protocols.merge import Merge
from node.protocols.nakack2 import Nakack2
from node.protocols.stable import Stable
from node.protocols.unicast2 import Unicast2
from node.protocols.unicast3 import Unicast3
from node.wire import Message, View

_PROTO_ID_OF = wire.PROTO_ID_OF
MAX_DATAGRAM_SIZE = 60_000  # below the 65,507-byte UDP limit, leaving room for headers

STACK_COUNTERS = (
    "datagrams_sent",
    "datagrams_received",
    "bytes_sent",
    "bytes_received",
    "malformed_datagrams",
    "wrong_cluster",
    "wrong_dest",
    "unknown_protocol_msgs",
    "multicasts_held",
)

# protocol name -> its layer class (each builds itself from its properties and a BuildContext: Layer.create)
PROTOCOLS: dict[str, type[Layer[Properties]]] = {
    cls.NAME: cls for cls in (Unicast3, Unicast2, Nakack2, Mcast, Stable, Gms, Fd, Merge)
}

MEMBERSHIP = ("gms", "fd", "merge")

# stack name -> its protocols, bottom first (like a JGroups stack config)
STACKS: dict[str, tuple[str, ...]] = {
    "unicast3": ("unicast3",),
    "unicast2": ("unicast2",),
    "unicast3+gms": ("unicast3", *MEMBERSHIP),
    "unicast3+nakack2": ("unicast3", "nakack2", "stable", *MEMBERSHIP),
    "unicast2+nakack2": ("unicast2", "nakack2", "stable", *MEMBERSHIP),
    "unicast3+mcast": ("unicast3", "mcast", *MEMBERSHIP),
}


def has_membership(stack: str) -> bool:
    return "gms" in STACKS.get(stack, ())


class Output(NamedTuple):
    """What `Stack.drain` hands its driver."""

    datagrams: list[tuple[str | None, bytes]]  # (dest address or None for multicast, bytes)
    delivers: list[Deliver]
    events: list[Event]


class LayerRoutes:
    """The stack's routes for its membership layer (base.StackRoutes): a view goes to every other layer, bottom
    first; liveness comes from the failure detector; leaving stops every other layer."""

    __slots__ = ("liveness", "others")

    def __init__(self) -> None:
        self.others: list[Layer[Properties]] = []
        self.liveness: FailureDetector[Properties] | None = None

    def wire(self, layers: list[Layer[Properties]]) -> None:
        """The stack's layers, once built (GMS is built before the layers above it)."""
        self.others = [p for p in layers if not isinstance(p, MembershipLayer)]
        self.liveness = next((p for p in layers if isinstance(p, FailureDetector)), None)

    def install_view(self, view: View, now: float, out: Effects) -> None:
        for layer in self.others:
            layer.install_view(view, now, out)

    def alive(self, member: str, now: float) -> bool:
        return self.liveness is None or self.liveness.alive(member, now)

    def member_left(self) -> None:
        for layer in self.others:
            layer.stop()


class Stack:
    """One member's stack. Not thread-safe: one driver calls it.

    `protocols` are the stack's layers, bottom first. The stack knows them by the roles they declare (their base
    classes in node/protocols/base.py): exactly one UnicastLayer, at most one MulticastLayer, at most one
    MembershipLayer (GMS) and one StabilityLayer (STABLE). Layers that need each other were given their
    collaborators when the stack was built (`build_stack`); GMS reaches the others through the stack's routes
    (`LayerRoutes`). Every layer appends to the one shared Effects, so their sends, deliveries and history events
    come out of `drain()` together, each kind in the order it happened.
    """

    def __init__(
        self,
        local: str,
        protocols: list[Layer[Properties]],
        *,
        cluster: str = "chaosbed",
        max_datagram_size: int = MAX_DATAGRAM_SIZE,
    ) -> None:
        self.local = local
        self.cluster = cluster
        self.protocols: dict[int, Layer[Properties]] = {}  # wire protocol id -> its layer (incoming batches)
        self.by_name: dict[str, Layer[Properties]] = {}
        for proto in protocols:
            proto_id = wire.PROTOCOL_IDS[proto.PROTOCOL]
            if proto_id in self.protocols:
                raise ValueError(f"protocol {proto.PROTOCOL} twice in one stack")
            self.protocols[proto_id] = proto
            self.by_name[proto.NAME] = proto
        unicast = [p for p in protocols if isinstance(p, UnicastLayer)]
        if len(unicast) != 1:
            raise ValueError(f"a stack has exactly one unicast protocol ({' | '.join(_names(UnicastLayer))})")
        self.unicast: UnicastLayer[Properties] = unicast[0]
        multicast = [p for p in protocols if isinstance(p, MulticastLayer)]
        if len(multicast) > 1:
            raise ValueError(f"a stack has at most one multicast protocol ({' | '.join(_names(MulticastLayer))})")
        self.multicast_protocol: MulticastLayer[Properties] | None = multicast[0] if multicast else None
        self.gms: MembershipLayer[Properties] | None = next(
            (p for p in protocols if isinstance(p, MembershipLayer)), None
        )
        self.stable: StabilityLayer[Properties] | None = next(
            (p for p in protocols if isinstance(p, StabilityLayer)), None
        )
        if self.stable is not None and self.gms is not None:
            gms = self.gms
            self.stable.holds_own_purges = lambda: gms.holds_multicasts  # see node/protocols/stable.py
        self._left = False
        self._held: list[bytes] = []  # multicasts held back before joining and during a merge handshake
        self._next_seqno = 1  # the seqno the multicast protocol gives the next multicast
        self.max_datagram_size = max_datagram_size
        # False: the protocols' history events are dropped as they are made (a driver that records no history, such
        # as the simulator with record=False); everything else the protocols do is the same
        self.record_events = True
        self.out = Effects()
        self._layers = tuple(self.protocols.values())
        self._overhead: dict[str | None, int] = {}  # dest -> datagram_overhead (cluster and local do not change)
        self.c = dict.fromkeys(STACK_COUNTERS, 0)

    # --- driving --------------------------------------------------------------------------------------------------

    def send(self, dest: str, payload: bytes, now: float) -> int:
        """Sends a unicast application message; returns its seqno on the connection."""
        return self.unicast.send(dest, payload, now, self.out)

    def multicast(self, payload: bytes, now: float) -> int:
        """Multicasts an application message to the group; returns its seqno (MCAST with a full window holds the
        message and sends it, in order, once acks free space). Before the member has joined and during a merge
        handshake (GMS.holds_multicasts) the stack holds it back and passes it on, in order and with the seqno
        returned here, once it has joined and the merge is over."""
        if self.multicast_protocol is None:
            raise ValueError("this stack has no multicast protocol")
        if self._held or (self.gms is not None and self.gms.holds_multicasts):
            self._held.append(payload)
            self.c["multicasts_held"] += 1
            return self._next_seqno + len(self._held) - 1
        return self._multicast_now(payload, now)

    def _multicast_now(self, payload: bytes, now: float) -> int:
        mark = len(self.out.delivers)
        assert self.multicast_protocol is not None
        seqno = self.multicast_protocol.multicast(payload, now, self.out)
        self._next_seqno = seqno + 1
        self._note_delivered(mark)
        return seqno

    def _release_held(self, now: float) -> None:
        if not self._held or (self.gms is not None and self.gms.holds_multicasts):
            return
        held, self._held = self._held, []
        for payload in held:
            self._multicast_now(payload, now)

    def _note_delivered(self, mark: int) -> None:
        """Tells STABLE how many multicast payload bytes were delivered since `mark` (its max_bytes trigger)."""
        if self.stable is None:
            return
        delivers = self.out.delivers
        n = sum(len(d.payload) for d in delivers[mark:] if d.kind == "multicast")
        if n:
            self.stable.note_delivered(n)

    # --- membership -----------------------------------------------------------------------------------------------

    @property
    def view(self) -> View | None:
        """The installed view, or None without membership or before joining."""
        return self.gms.view if self.gms is not None else None

    def leave(self, now: float) -> None:
        """Leaves the group gracefully (see `has_left`); without membership the member just stops."""
        if self.gms is not None:
            self.gms.leave(now, self.out)
        else:
            self._left = True

    @property
    def has_left(self) -> bool:
        return self.gms.has_left if self.gms is not None else self._left

    def receive(self, data: bytes | memoryview, now: float) -> bool:
        """Handles one datagram. Malformed or misaddressed ones are counted and dropped; returns False for those."""
        try:
            dgram = wire.decode_datagram(data)
        except wire.WireError:
            self.c["malformed_datagrams"] += 1
            return False
        self.c["datagrams_received"] += 1
        self.c["bytes_received"] += len(data)
        if dgram.cluster != self.cluster:
            self.c["wrong_cluster"] += 1
            return False
        if dgram.dest and dgram.dest != self.local:
            self.c["wrong_dest"] += 1  # e.g. addressed to an earlier incarnation of this member
            return False
        msgs = dgram.messages
        batches: dict[int, list[Message]]
        if len(msgs) == 1:
            batches = {_PROTO_ID_OF[type(msgs[0])]: msgs}
        else:
            batches = {}
            for m in msgs:
                batches.setdefault(_PROTO_ID_OF[type(m)], []).append(m)
        mark = len(self.out.delivers)
        for proto_id, msgs in batches.items():
            proto = self.protocols.get(proto_id)
            if proto is None:
                self.c["unknown_protocol_msgs"] += len(msgs)
                continue
            proto.handle(dgram.src, msgs, now, self.out)
        self._note_delivered(mark)
        self._release_held(now)
        return True

    def tick(self, now: float) -> None:
        mark = len(self.out.delivers)
        for proto in self.protocols.values():
            if proto.next_wakeup() <= now:
                proto.tick(now, self.out)
        self._note_delivered(mark)
        self._release_held(now)

    def next_wakeup(self) -> float:
        layers = self._layers
        if len(layers) == 1:
            return layers[0].next_wakeup()
        return min([p.next_wakeup() for p in layers])

    def drain(self) -> Output:
        """Everything the protocols asked for since the last drain, with sends bundled into datagrams."""
        out = self.out
        datagrams = self._bundle(out.sends) if out.sends else []
        result = Output(datagrams, out.delivers, out.events)
        self.out = Effects() if self.record_events else EventlessEffects()
        return result

    def _bundle(self, sends: list[Send]) -> list[tuple[str | None, bytes]]:
        c = self.c
        if len(sends) == 1:  # the common case: one message, one datagram
            dest, msg = sends[0]
            data = wire.encode_datagram(self.cluster, self.local, dest, [msg])
            c["datagrams_sent"] += 1
            c["bytes_sent"] += len(data)
            return [(dest, data)]
        # Group by destination, keeping each destination's order (FIFO on the wire as the protocol sent them).
        per_dest: dict[str | None, list[Message]] = {}
        for dest, msg in sends:
            msgs = per_dest.get(dest)
            if msgs is None:
                per_dest[dest] = [msg]
            else:
                msgs.append(msg)
        datagrams: list[tuple[str | None, bytes]] = []
        overheads = self._overhead
        for dest, msgs in per_dest.items():
            overhead = overheads.get(dest)
            if overhead is None:
                overhead = overheads[dest] = wire.datagram_overhead(self.cluster, self.local, dest)
            budget = self.max_datagram_size - overhead
            batch: list[Message] = []
            size = 0
            for m in msgs:
                n = wire.message_size(m)
                if batch and (size + n > budget or len(batch) == 0xFFFF):
                    datagrams.append((dest, wire.encode_datagram(self.cluster, self.local, dest, batch)))
                    batch, size = [], 0
                batch.append(m)
                size += n
            datagrams.append((dest, wire.encode_datagram(self.cluster, self.local, dest, batch)))
        c["datagrams_sent"] += len(datagrams)
        c["bytes_sent"] += sum(len(d) for _, d in datagrams)
        return datagrams

    # --- management -----------------------------------------------------------------------------------------------

    def set_property(self, protocol: str, name: str, value: object) -> None:
        proto = self.by_name.get(protocol)
        if proto is None:
            raise ValueError(f"no protocol {protocol!r} in this stack; it has: {', '.join(self.by_name)}")
        proto.set_property(name, value)

    def counters(self) -> dict[str, dict[str, int]]:
        stats = {"stack": dict(self.c)}
        for name, proto in self.by_name.items():
            stats[name] = proto.counters()
        return stats

    def peer_address(self, name: str, announced: Mapping[str, int] | None = None) -> str:
        """The address this member sends to for peer `name`: the incarnation in its installed view; without
        membership (or a view without that peer), the incarnation the orchestrator announced (1 if never). The
        real runtime and the simulator both resolve destinations here, so a restarted peer is addressed from the
        same moment on both."""
        view = self.view
        if view is not None:
            for addr in view.members:
                if name_of(addr) == name:
                    return addr
        return make_address(name, (announced or {}).get(name, 1))

    def unacked_by_peer(self) -> dict[str, int]:
        """Peer name -> unicasts sent to it and not acknowledged yet (peers with none are left out)."""
        return {name_of(peer): n for peer, n in self.unicast.unacked_by_peer().items() if n}

    def waiting_on(self) -> dict[str, int]:
        """Peer address -> messages this member waits for with that peer: unicasts sent to it and not acknowledged
        (protocol bookkeeping: UNICAST2 counts a message until its STABLE round, every stable_interval), and
        everything `missing_from` counts."""
        out = self.missing_from()
        for peer, n in self.unicast.unacked_by_peer().items():
            if n:
                out[peer] = out.get(peer, 0) + n
        return out

    def missing_from(self) -> dict[str, int]:
        """Peer address -> unicasts and multicasts from it that are missing here (gaps, or announced and not
        received); under its own address, the multicasts it holds back (before joining, during a merge handshake,
        or MCAST's full window). What nothing reveals missing, a lost tail, the orchestrator finds by comparing what
        senders sent with what receivers got (`multicast_heard`, `unicast_sent` and `unicast_delivered` of
        `progress`)."""
        out: dict[str, int] = {}

        def add(peer: str, n: int) -> None:
            if n:
                out[peer] = out.get(peer, 0) + n

        mcast = self.multicast_protocol
        add(self.local, len(self._held) + (mcast.pending() if mcast is not None else 0))
        for peer, n in self.unicast.missing_by_peer().items():
            add(peer, n)
        if mcast is not None:
            for peer, n in mcast.missing_by_sender().items():
                add(peer, n)
        return out

    def awaiting_ack(self) -> dict[str, int]:
        """Peer address -> unicasts sent to it whose acknowledgement the sender still waits for, retransmitting: the
        unacknowledged messages of a protocol that acknowledges each one (UNICAST3), none of one that purges in
        periodic rounds (UNICAST2: a message delivered long ago stays until the next STABLE)."""
        if not self.unicast.ACKS_EACH_MESSAGE:
            return {}
        return {peer: n for peer, n in self.unicast.unacked_by_peer().items() if n}

    def progress(self) -> dict[str, object]:
        """What the orchestrator reads to tell whether a cluster is quiet (the `stats` control command adds it to
        the counters): `missing_from`, `awaiting_ack`, `multicast_heard`, `unicast_sent` and `unicast_delivered`
        (peer address -> [conn-id, highest seqno]), and `waiting_on` and `unacked_by_peer`. Quiet is what the checks
        need: every message a running member sent to another is delivered there, nothing is missing anywhere, and
        no sender still retransmits for an acknowledgement."""
        return {
            "unacked_by_peer": self.unacked_by_peer(),
            "waiting_on": self.waiting_on(),
            "missing_from": self.missing_from(),
            "awaiting_ack": self.awaiting_ack(),
            "multicast_heard": self.multicast_heard(),
            "unicast_sent": {peer: list(v) for peer, v in self.unicast.sent_by_peer().items()},
            "unicast_delivered": {peer: list(v) for peer, v in self.unicast.delivered_by_peer().items()},
        }

    def multicast_heard(self) -> dict[str, int]:
        """Sender address -> the highest multicast seqno received from it, this member's own address -> the highest
        it sent ({} without a multicast protocol). A lost tail (no later message reveals the gap) is not in
        `missing_from`; the orchestrator finds it by comparing what the members of a view heard with what each sent."""
        mcast = self.multicast_protocol
        if mcast is None:
            return {}
        return {member: hr for member, (_, hr) in mcast.digest().items()}


def _names(role: type) -> list[str]:
    return [name for name, cls in PROTOCOLS.items() if issubclass(cls, role)]


def build_stack(
    local: str,
    stack: str = "unicast3",
    properties: Mapping[str, Mapping[str, object]] | None = None,
    *,
    cluster: str = "chaosbed",
    conn_id_start: int = 1,
    seed: int | None = None,
) -> Stack:
    """A stack by name (see STACKS) with per-protocol properties, e.g. {"unicast3": {"xmit_interval": "200ms"}}.

    `seed` drives the protocols' randomised timers (MERGE's INFO jitter): a simulator passes one from its seeded
    generator so that runs replay; None derives it from the address. Layers are built bottom first; each is given
    the layers below it that it needs (BuildContext), and GMS the stack's routes to the others.
    """
    if stack not in STACKS:
        raise ValueError(f"unknown stack {stack!r}; known: {', '.join(sorted(STACKS))}")
    properties = properties or {}
    # properties of known protocols this stack lacks are ignored (one property set serves several stacks)
    unknown = set(properties) - set(PROTOCOLS) - {stack}
    if unknown:
        raise ValueError(
            f"properties for unknown protocols: {', '.join(sorted(unknown))}; known: {', '.join(PROTOCOLS)}"
        )
    routes = LayerRoutes()
    ctx = BuildContext(conn_id_start, seed, routes)
    layers: list[Layer[Properties]] = []
    for name in STACKS[stack]:
        layer = PROTOCOLS[name].create(local, properties.get(name, {}), ctx)
        ctx.add(layer)
        layers.append(layer)
    routes.wire(layers)
    return Stack(local, layers, cluster=cluster)

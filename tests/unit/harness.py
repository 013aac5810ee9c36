"""One harness for the protocol unit tests: members made of protocol layers (the Layer contract of
node/protocols/base.py), a hand-driven network and a virtual clock.

What a layer sends waits on `wire` as (src, dest, message) until the test delivers, drops, duplicates or reorders
it: a multicast is one entry per member, the sender's own copy included (UDP multicast loops back), so a test can
treat each receiver's copy alone. `seen` keeps everything ever put on the wire, `sends` every send as the layer made
it (dest None for a multicast). Delivering hands a message to the destination's layer of the message's protocol,
as the stack does. With `instant=True` every call on a member pumps the network at once, so a message is handled as
soon as it is sent (the membership tests); `cuts` and `drop` then decide what is lost on the way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from node.protocols.base import Deliver, Effects, Event, Layer, Properties
from node.wire import Message, spec_of

Wire = tuple[str, str, Message]  # (src, dest, message) in flight
Sent = tuple[str, str | None, Message]  # (src, dest or None for a multicast, message) as the layer sent it
Predicate = Callable[[Wire], bool]
L = TypeVar("L")
R = TypeVar("R")


def never(w: Wire) -> bool:
    return False


def always(w: Wire) -> bool:
    return True


def of(cls: type, src: str | None = None, dest: str | None = None) -> Predicate:
    """Matches the messages of one header class (from src, to dest)."""
    return lambda w: type(w[2]) is cls and (src is None or w[0] == src) and (dest is None or w[1] == dest)


class Net(Generic[L]):
    """Members and the network between them. `net[name]` is the member's first layer (the one under test; a member
    may have more, e.g. NAKACK2 with STABLE on top)."""

    def __init__(self, *, instant: bool = False) -> None:
        self.layers: dict[str, list[Layer[Properties]]] = {}  # member -> its layers, bottom first
        self.now = 0.0
        self.wire: list[Wire] = []
        self.seen: list[Wire] = []  # everything ever put on the wire
        self.sends: list[Sent] = []  # every send as made
        self.delivered: dict[str, list[Deliver]] = {}
        self.events: dict[str, list[Event]] = {}
        self.instant = instant
        self.cuts: set[tuple[str, str]] = set()  # (src, dest): everything src sends to dest is lost (pump)
        self.drop: Predicate = never  # what pump loses besides the cuts

    # --- members ----------------------------------------------------------------------------------------------------

    def add(self, name: str, *layers: Layer[Properties]) -> None:
        """A member with its layers, bottom first."""
        self.layers[name] = list(layers)
        self.delivered[name] = []
        self.events[name] = []

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.layers)

    @property
    def nodes(self) -> dict[str, L]:
        """Each member's first layer, by name."""
        return {n: self[n] for n in self.layers}

    def __getitem__(self, name: str) -> L:
        layer: Any = self.layers[name][0]  # the type the test's Net[L] says its members' first layers have
        return layer

    def absorb(self, name: str, out: Effects) -> None:
        """Takes what one call of a member's layer produced: sends onto the wire, deliveries and events."""
        for dest, msg in out.sends:
            self.sends.append((name, dest, msg))
            copies = [(name, d, msg) for d in (self.names if dest is None else (dest,))]
            self.wire.extend(copies)
            self.seen.extend(copies)
        self.delivered[name].extend(out.delivers)
        self.events[name].extend(out.events)

    def call(self, name: str, fn: Callable[[L, Effects], R]) -> R:
        """fn(the member's first layer, out); takes its output (and pumps it, instant)."""
        out = Effects()
        result = fn(self[name], out)
        self._done(name, out)
        return result

    def _done(self, name: str, out: Effects) -> None:
        self.absorb(name, out)
        if self.instant:
            self.pump()

    # --- the network ------------------------------------------------------------------------------------------------

    def take(self, pred: Predicate = always) -> list[Wire]:
        """Removes the matching in-flight messages from the wire (to drop them, or to deliver them later)."""
        taken = [w for w in self.wire if pred(w)]
        self.wire = [w for w in self.wire if not pred(w)]
        return taken

    def deliver(self, items: Iterable[Wire], batch: bool = False) -> None:
        """Hands messages to their destinations: one handle() call each, or with `batch` one per (src, dest) pair
        (in the order each pair first appears), as a datagram bundles them. Each goes to the destination's layer of
        its protocol; nothing reaches a member that is not in the net."""
        groups: dict[tuple[str, str], list[Message]] = {}
        calls: list[tuple[str, str, list[Message]]] = []
        for src, dest, msg in items:
            if not batch:
                calls.append((src, dest, [msg]))
            elif (src, dest) in groups:
                groups[(src, dest)].append(msg)
            else:
                groups[(src, dest)] = msgs = [msg]
                calls.append((src, dest, msgs))
        for src, dest, msgs in calls:
            if dest in self.layers:
                self._handle(src, dest, msgs)

    def _handle(self, src: str, dest: str, msgs: list[Message]) -> None:
        by_protocol: dict[str, list[Message]] = {}
        for m in msgs:
            by_protocol.setdefault(spec_of(m).protocol, []).append(m)
        for protocol, batch in by_protocol.items():
            layer = next((p for p in self.layers[dest] if protocol == p.PROTOCOL), None)
            if layer is not None:
                out = Effects()
                layer.handle(src, batch, self.now, out)
                self.absorb(dest, out)

    def pump(self, drop: Predicate | None = None, batch: bool = False, max_steps: int = 10**6) -> None:
        """Delivers everything in flight, FIFO, including what that causes; `drop` (or the net's `drop` and `cuts`)
        loses messages on the way. With `batch`, what is in flight is delivered a generation at a time, batched per
        (src, dest)."""
        lose = drop if drop is not None else self._lost
        steps = 0
        while self.wire:
            if batch:
                items, self.wire = self.wire, []
                steps += len(items)
                self.deliver([w for w in items if not lose(w)], batch=True)
            else:
                w = self.wire.pop(0)
                steps += 1
                if not lose(w):
                    self.deliver([w])
            assert steps < max_steps, "message storm"

    def _lost(self, w: Wire) -> bool:
        return (w[0], w[1]) in self.cuts or self.drop(w)

    # --- the clock --------------------------------------------------------------------------------------------------

    def tick(self, name: str) -> None:
        """Ticks each layer of the member whose wakeup is due."""
        for layer in self.layers[name]:
            if layer.next_wakeup() <= self.now:
                out = Effects()
                layer.tick(self.now, out)
                self._done(name, out)

    def advance(self, dt: float, *names: str) -> None:
        """Moves the clock by dt and ticks the members that are due (all, or those named); pumps nothing (but an
        instant net pumps every tick's output)."""
        self.now += dt
        for name in names or self.names:
            self.tick(name)

    def elapse(self, dt: float, drop: Predicate | None = None) -> None:
        """Moves the clock by dt, ticks every member that is due, then pumps (with `drop`, as `pump`)."""
        self.advance(dt)
        self.pump(drop)

    def run_timers(self, until: float) -> None:
        """Runs every timer due up to `until`, in time order (ties: by member name), moving the clock to each."""
        while True:
            due, name = min((min(p.next_wakeup() for p in layers), n) for n, layers in self.layers.items())
            if due > until:
                break
            self.now = max(self.now, due)
            self.tick(name)
        self.now = until

    # --- what happened ----------------------------------------------------------------------------------------------

    def sent(self, cls: type, src: str | None = None, dest: str | None = "*") -> list[Any]:
        """The messages of one header class sent so far (from src; to dest, None: multicast, "*": anywhere)."""
        return [m for s, d, m in self.sends if type(m) is cls and (src is None or s == src) and dest in ("*", d)]

    def sends_of(self, cls: type, src: str | None = None) -> list[Sent]:
        """The sends of one header class so far, as (src, dest or None for a multicast, message)."""
        return [w for w in self.sends if type(w[2]) is cls and (src is None or w[0] == src)]

    def seqnos(self, at: str, sender: str) -> list[int]:
        return [d.seqno for d in self.delivered[at] if d.sender == sender]

    def payloads(self, at: str, sender: str | None = None, *, conn_id: int | None = None) -> list[bytes]:
        """The payloads delivered at `at` (from sender; on connection conn_id)."""
        return [
            d.payload
            for d in self.delivered[at]
            if (sender is None or d.sender == sender) and (conn_id is None or d.conn_id == conn_id)
        ]


__all__ = ["Net", "Predicate", "Sent", "Wire", "always", "never", "of"]

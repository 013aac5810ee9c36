"""The sans-IO contract every protocol follows.

A protocol is a state machine. It is handed a batch of messages from one sender, an application send, or a timer
tick, always with `now` (seconds, from whatever clock drives it: the simulator's virtual clock or the runtime's
monotonic clock), and an `Outbox` to append what it wants done: messages to send, payloads to deliver, history
events. `next_wakeup()` says when it wants its next tick. No sockets, clocks or threads inside.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar, NamedTuple

from node.units import parse_duration

NEVER = math.inf


class Delivery(NamedTuple):
    """A payload handed to the application. seqno is the protocol's per-connection (or per-sender) seqno."""

    kind: str  # "unicast" | "multicast"
    sender: str
    payload: bytes
    conn_id: int | None
    seqno: int


class Outbox:
    """What one or more protocol calls want done; the stack (or a test) drains it."""

    __slots__ = ("delivers", "events", "sends")

    def __init__(self) -> None:
        self.sends: list[tuple[str | None, Any]] = []  # (dest, message); dest None = multicast
        self.delivers: list[Delivery] = []
        self.events: list[dict[str, Any]] = []  # history events (see SCENARIO.md), without t/member

    def clear(self) -> None:
        self.sends.clear()
        self.delivers.clear()
        self.events.clear()


@dataclass
class Properties:
    """Base of a protocol's properties: typed fields with JGroups names; durations in seconds."""

    DURATIONS: ClassVar[frozenset[str]] = frozenset()

    def set(self, name: str, value: Any) -> None:
        """Sets one property from a user-given value, with a clear error naming it."""
        known = {f.name: f for f in fields(self)}
        if name not in known:
            raise ValueError(f"unknown property {name!r}; known: {', '.join(sorted(known))}")
        current = getattr(self, name)
        try:
            if name in self.DURATIONS:
                new: Any = parse_duration(value)
            elif isinstance(current, bool):
                if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
                    new = value.lower() in ("true", "1", "yes")
                elif isinstance(value, bool | int):
                    new = bool(value)
                else:
                    raise ValueError
            elif isinstance(current, int):
                new = int(value)
            elif isinstance(current, float):
                new = float(value)
            else:
                new = value
        except (TypeError, ValueError):
            raise ValueError(f"property {name}: bad value {value!r} (expected {type(current).__name__})") from None
        setattr(self, name, new)
        self.validate()

    def update(self, values: dict[str, Any]) -> None:
        for k, v in values.items():
            self.set(k, v)

    def validate(self) -> None:
        """Raises ValueError naming the property that is out of range."""

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

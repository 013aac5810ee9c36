"""The netns fault engine's state file (`chaos.json` in the cluster's state directory) and the NFQUEUE handler's stats
reply, typed. The file is shared by every process that changes the cluster's faults (a running scenario, `chaosbed
fault` commands, their timers), under the engine's file lock."""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict, cast

from chaos.faults import FaultRecord


class HandlerState(TypedDict):
    """A running NFQUEUE handler process of one receiving member."""

    pid: int
    socket: str  # its control socket
    max_len: int  # its kernel queue's length
    numbered_at_apply: NotRequired[int]  # the kernel's packet numbering when its current rules took over


class HandlerStats(TypedDict):
    """The part of a handler's `stats` reply (chaos/nfqueue/handler.py Handler.stats) the engine reads."""

    missed_ids: int
    unknown_shapes: NotRequired[int]  # datagrams of the wire its rules read of a shape they do not know (passed)
    queue: dict[str, int]  # the kernel's queue counters (id_sequence, queue_dropped, ...); {} when not bound
    rules: dict[str, dict[str, int]]  # rule id -> counters (matched, dropped, delayed, ...)


def handler_stats(reply: Mapping[str, object]) -> HandlerStats:
    """The stats of a handler's reply to {"cmd": "stats"} (ValueError if it has none)."""
    stats = reply.get("stats")
    if not isinstance(stats, dict) or not all(k in stats for k in ("missed_ids", "queue", "rules")):
        raise ValueError(f"not a stats reply: {reply!r}")
    return cast(HandlerStats, stats)  # the handler's own JSON: the shape its Handler.stats writes


@dataclass
class EngineState:
    """chaos.json: the last fault id number, the faults in force, the handlers, the `--for` timers (fault id ->
    pid) and the clock offset sampled by the last plan() (CLOCK_REALTIME - CLOCK_MONOTONIC, ns)."""

    next: int = 0
    faults: list[FaultRecord] = field(default_factory=list)
    handlers: dict[str, HandlerState] = field(default_factory=dict)
    timers: dict[str, int] = field(default_factory=dict)
    clock_offset: int | None = None

    def to_json(self) -> str:
        doc: dict[str, object] = {
            "next": self.next,
            "faults": [f.to_json() for f in self.faults],
            "handlers": self.handlers,
            "timers": self.timers,
        }
        if self.clock_offset is not None:
            doc["clock_offset"] = self.clock_offset
        return json.dumps(doc, indent=1)

    @classmethod
    def from_json(cls, text: str) -> EngineState:
        doc = json.loads(text)
        offset = doc.get("clock_offset")
        return cls(
            next=int(doc.get("next", 0)),
            faults=[FaultRecord.from_json(f) for f in doc.get("faults", [])],
            handlers={str(m): cast(HandlerState, h) for m, h in doc.get("handlers", {}).items()},
            timers={str(k): int(v) for k, v in doc.get("timers", {}).items()},
            clock_offset=int(offset) if offset is not None else None,
        )


STATE_FILE = "chaos.json"  # a fault table's state in its cluster's state folder, next to chaos.lock


def load_state(folder: Path) -> EngineState:
    """The fault table's state in `folder` (empty where none was written yet)."""
    try:
        return EngineState.from_json((folder / STATE_FILE).read_text())
    except FileNotFoundError:
        return EngineState()


@contextlib.contextmanager
def locked_state(folder: Path) -> Iterator[EngineState]:
    """The state in `folder` under its lock file, written back (atomically) when the block ends, also on error:
    one writer at a time across processes (the orchestrator, `chaosbed fault`, a `for` timer)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "chaos.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = load_state(folder)
        try:
            yield state
        finally:
            tmp = (folder / STATE_FILE).with_suffix(".tmp")
            tmp.write_text(state.to_json())
            tmp.replace(folder / STATE_FILE)

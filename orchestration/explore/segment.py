"""A warm cluster's schedule as a run folder of its own: the part of each member's history that the schedule wrote,
checked as a fresh run's folder is.

The members of a warm cluster append to one history file each, schedule after schedule. `SegmentCutter` follows
those files. `begin()` reads what was written so far (everything before the schedule). `cut()` writes the segment's
folder: for each member, the events of its current incarnation that are not messages (its `start`, its views and
connections: what the checker needs to know who the member is and what group it is in), then every line the
schedule wrote, then a `stop` event at the segment's end for each member still running (a run's live members end
with one; this one is the orchestrator's and carries `"segment_end": true`).

A delivery in the segment of a message sent before it is state that leaked from an earlier schedule (the checker
would call it a phantom): `Cut.leaked` lists them, and the warm cluster is started afresh. So is a delivery between
two segments (`begin()` counts them): the last schedule ended quiet, with nothing owed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

MESSAGE_EVENTS = frozenset({"send", "deliver", "xmit", "ack"})


@dataclass
class Cut:
    lines: int = 0  # history lines the schedule wrote
    leaked: list[str] = field(default_factory=list)  # msg_ids delivered in the segment, sent before it


@dataclass
class _File:
    pos: int = 0
    partial: bytes = b""
    context: list[str] = field(default_factory=list)  # the current incarnation's non-message events


class SegmentCutter:
    """Follows the history files of one warm cluster (`src`: its history folder)."""

    def __init__(self, src: Path) -> None:
        self.src = src
        self.files: dict[str, _File] = {}
        self.sent: set[str] = set()  # every msg_id sent before the segment under way
        self.cuts = 0

    def _new_lines(self, name: str) -> list[str]:
        f = self.files.setdefault(name, _File())
        with (self.src / name).open("rb") as h:
            h.seek(f.pos)
            data = f.partial + h.read()
        f.pos += len(data) - len(f.partial)
        *whole, f.partial = data.split(b"\n")
        return [line.decode(errors="replace") for line in whole if line.strip()]

    def _consume(self, name: str, lines: list[str]) -> int:
        """Takes the lines as before the next segment; returns how many deliveries they hold."""
        f = self.files[name]
        deliveries = 0
        for line in lines:
            e = _event(line)
            if e is None:
                continue
            kind = e.get("event")
            if kind == "start":
                f.context = [line]
            elif kind not in MESSAGE_EVENTS:
                f.context.append(line)
            elif kind == "send" and isinstance(mid := e.get("msg_id"), str):
                self.sent.add(mid)
            elif kind == "deliver":
                deliveries += 1
        return deliveries

    def _names(self) -> list[str]:
        return sorted(p.name for p in self.src.glob("*.jsonl"))

    def begin(self) -> int:
        """Everything written so far is before the segment. Returns the deliveries written since the last cut: after a
        quiet end nothing is owed, so one there is the last schedule's, seen too late for its check (0 before the
        first cut, when the members have only started)."""
        late = sum(self._consume(name, self._new_lines(name)) for name in self._names())
        return late if self.cuts else 0

    def cut(self, dst: Path, t_end: int, alive: dict[str, int]) -> Cut:
        """Writes the segment into `dst` (a run folder's history/), ending at t_end; `alive`: the running members
        and their incarnations. What the segment wrote is before the next one."""
        dst.mkdir(parents=True, exist_ok=True)
        out = Cut()
        segment: dict[str, list[str]] = {name: self._new_lines(name) for name in self._names()}
        sent_now: set[str] = set()
        delivered: list[str] = []
        for lines in segment.values():
            for line in lines:
                e = _event(line)
                if e is not None and isinstance(mid := e.get("msg_id"), str):
                    if e.get("event") == "send":
                        sent_now.add(mid)
                    elif e.get("event") == "deliver":
                        delivered.append(mid)
        out.leaked = sorted({m for m in delivered if m in self.sent and m not in sent_now})
        for name, lines in segment.items():
            member = name.removesuffix(".jsonl")
            stop = []
            if member in alive:
                stop = [json.dumps({"t": t_end, "member": member, "incarnation": alive[member], "event": "stop",
                                    "segment_end": True}, separators=(",", ":"))]  # fmt: skip
            text = "\n".join(self.files[name].context + lines + stop)
            (dst / name).write_text(text + "\n" if text else "")
            out.lines += len(lines)
            self._consume(name, lines)
        self.cuts += 1
        return out


def _event(line: str) -> dict[str, object] | None:
    try:
        e = json.loads(line)
    except ValueError:
        return None  # a bad line: the checker of the segment counts it where it is
    return e if isinstance(e, dict) else None

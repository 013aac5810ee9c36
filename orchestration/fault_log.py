"""faults.jsonl, the orchestrator's part of a run's history (docs/scenario-format.md "Fault timing", docs/history.md):
the one writer of its lines, for the scheduler (orchestration/schedule.py), `chaosbed fault`
(orchestration/cli/fault.py), the pytest plugin's recording cluster and the simulator's own log (Simulation.write_run).

A line is one JSON object, compact, keys in this order: `start` lines `event, t, seed, backend` (and `clocks` on a
swarm); every other line
`t, event ("fault"), seed, kind`, then the kind's fields (a network fault: `id`, its keys as node/fault_kinds.py
names them, `for`; a heal: `faults`; a member action: its arguments), then a scheduled fault's `at` (and, made by a
[[nemesis]], its `nemesis` and `round`), a late member action's `late` and `lag_ms`, and where a probe run measured it a
network fault's `observed_t`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from chaos.faults import FaultRecord, JsonObject
from node.atomic import write_atomic

FILE = "faults.jsonl"


class FaultLog:
    """The lines of one faults.jsonl. With a path each line is appended to the file as it is logged (a run killed
    midway keeps what happened so far); without one (the simulator) they are kept until `save`. `on_event` sees
    every line as it is logged (`chaosbed run` prints them)."""

    def __init__(self, path: Path | None, *, on_event: Callable[[JsonObject], None] | None = None) -> None:
        self.path = path
        self.on_event = on_event
        self.events: list[JsonObject] = []  # every line this log wrote, in order

    def start(self, *, t: int, seed: int, backend: str, clocks: Mapping[str, object] | None = None) -> JsonObject:
        """The first line: `t` is the instant the schedule's clock reads 0, `backend` the backend that runs it, and
        on a swarm `clocks`, each host's clock against the orchestrator's (orchestration/agent/client.py)."""
        event: JsonObject = {"event": "start", "t": t, "seed": seed, "backend": backend}
        if clocks:
            event["clocks"] = dict(clocks)
        return self._log(event)

    def fault(
        self,
        record: FaultRecord,
        *,
        t: int,
        duration: float | None = None,
        at: float | None = None,
        nemesis: tuple[int, int] | None = None,
    ) -> JsonObject:
        """A network fault that took effect at `t`: its id, its keys, its `for`, its planned `at` (seconds) and, made
        by a [[nemesis]] entry, which one and its round."""
        event = _line(t, record.seed, record.kind, {"id": record.id, **record.fault.event_fields()})
        if duration is not None:
            event["for"] = f"{duration:g}s"
        return self._log(_round(_at(event, at), nemesis))

    def heal(self, ids: Sequence[str] | None, *, t: int, seed: int, at: float | None = None) -> JsonObject:
        """A heal: of every network fault (ids None), or of just these (a partial heal, e.g. a `for` running out)."""
        event = _line(t, seed, "heal", {} if ids is None else {"faults": list(ids)})
        return self._log(_at(event, at))

    def action(
        self,
        kind: str,
        fields: Mapping[str, object],
        *,
        t: int,
        seed: int,
        at: float | None = None,
        lag_ms: float | None = None,
        nemesis: tuple[int, int] | None = None,
    ) -> JsonObject:
        """A member action (kill, restart, ..., with its arguments) that started at `t`, or a fault the simulator's
        own API made; `lag_ms`: how late it started (it is then marked `late`)."""
        event = _round(_at(_line(t, seed, kind, fields), at), nemesis)
        if lag_ms is not None:
            event.update(late=True, lag_ms=round(lag_ms, 1))
        return self._log(event)

    def observed(self, onsets: Mapping[str, int]) -> None:
        """Adds `observed_t` (when a probe run saw it take effect, ns: orchestration/onset_probes.py) to the lines of
        the network faults with these ids, in the file too (the other lines stay byte for byte)."""
        changed: dict[str, str] = {}
        for event in self.events:
            fault_id = event.get("id")
            if event.get("event") == "fault" and isinstance(fault_id, str) and fault_id in onsets:
                before = encode(event)
                event["observed_t"] = onsets[fault_id]
                changed[before] = encode(event)
        if self.path is not None and changed:
            lines = self.path.read_text().splitlines()
            write_atomic(self.path, "".join(changed.get(line, line) + "\n" for line in lines))

    def save(self, path: Path) -> None:
        """Writes every line logged so far as a new file (the simulator's log, which has no path of its own)."""
        write_atomic(path, "".join(encode(e) + "\n" for e in self.events))

    def _log(self, event: JsonObject) -> JsonObject:
        self.events.append(event)
        if self.path is not None:
            with open(self.path, "a") as f:
                f.write(encode(event) + "\n")
        if self.on_event is not None:
            self.on_event(event)
        return event


def encode(event: JsonObject) -> str:
    """One faults.jsonl line (without its newline)."""
    return json.dumps(event, separators=(",", ":"))


def _line(t: int, seed: int, kind: str, fields: Mapping[str, object]) -> JsonObject:
    return {"t": t, "event": "fault", "seed": seed, "kind": kind, **fields}


def _round(event: JsonObject, nemesis: tuple[int, int] | None) -> JsonObject:
    if nemesis is not None:
        event["nemesis"], event["round"] = nemesis
    return event


def _at(event: JsonObject, at: float | None) -> JsonObject:
    if at is not None:
        event["at"] = f"{at:g}s"
    return event

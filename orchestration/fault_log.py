"""faults.jsonl lines (SCENARIO.md "Fault timing", docs/history.md): a network fault applied, a heal."""

from __future__ import annotations

import json
import time
from pathlib import Path

from chaos.faults import FaultRecord, JsonObject


def fault_event(record: FaultRecord, duration: float | None = None) -> JsonObject:
    """The faults.jsonl line of an applied fault: its keys, id, seed and `for`."""
    event: JsonObject = {"t": time.monotonic_ns(), "event": "fault", "seed": record.seed, "kind": record.kind}
    event.update(id=record.id, **record.fault.event_fields())
    if duration is not None:
        event["for"] = f"{duration:g}s"
    return event


def heal_event(ids: list[str] | None, seed: int = 0) -> JsonObject:
    """A heal: of every fault (ids None), or of just the faults `ids` (a partial heal, e.g. a `for` running out)."""
    event: JsonObject = {"t": time.monotonic_ns(), "event": "fault", "seed": seed, "kind": "heal"}
    if ids is not None:
        event["faults"] = ids
    return event


def append_log(path: Path, event: JsonObject) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(event, separators=(",", ":")) + "\n")

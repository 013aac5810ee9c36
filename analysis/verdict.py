"""Violations, their stable order, and verdict.json exactly as docs/scenario-format.md specifies it."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from analysis.config import CHECKS
from node.atomic import write_atomic

_INT = re.compile(r"^-?(0|[1-9][0-9]*)$")
_ORDER = {c: i for i, c in enumerate(CHECKS)}


def _natural(value: str | int | None) -> tuple[int, int, str]:
    """Sorts None first, then numbers numerically, then text."""
    if value is None:
        return (0, 0, "")
    if isinstance(value, int) or _INT.match(str(value)):
        return (1, int(value), "")
    return (2, 0, str(value))


@dataclass(frozen=True)
class Violation:
    """One violation: which check, which message (conn_id/seqno/msg_id), which members, and why."""

    check: str
    sender: str | None
    receiver: str | None
    conn_id: str | None
    seqno: int | None
    msg_id: str | None
    detail: str
    run: str | None = None
    kind: str | None = None
    t: int | None = None

    def where(self) -> str:
        """Which members and message, as one line shows them ("A->B unicast conn 7 seqno 12 msg A>B#12"), leaving
        out what does not apply (a run's `timeout` has no members and no message: "")."""
        parts = []
        if self.sender is not None or self.receiver is not None:
            parts.append(f"{self.sender or '*'}->{self.receiver or '*'}")
        if self.kind:
            parts.append(self.kind)
        parts += [
            f"{k} {x}"
            for k, x in (("conn", self.conn_id), ("seqno", self.seqno), ("msg", self.msg_id))
            if x is not None
        ]
        return " ".join(parts)

    def line(self) -> str:
        """The violation as one line: check, members and message, then the checker's sentence."""
        where = self.where()
        return f"{self.check}{' ' + where if where else ''}: {self.detail}"

    def sort_key(self) -> tuple:
        return (
            self.run or "",
            _ORDER.get(self.check, len(_ORDER)),
            self.check,
            _natural(self.sender),
            _natural(self.receiver),
            self.kind or "",
            _natural(self.conn_id),
            _natural(self.seqno),
            _natural(self.msg_id),
            self.detail,
        )

    def to_json(self) -> dict[str, object]:
        d = asdict(self)
        if isinstance(self.conn_id, str) and _INT.match(self.conn_id):
            d["conn_id"] = int(self.conn_id)  # conn ids written as JSON numbers come back as numbers
        return {
            k: d[k] for k in ("run", "check", "sender", "receiver", "conn_id", "seqno", "msg_id", "kind", "t", "detail")
        }


def sort_violations(violations: list[Violation]) -> list[Violation]:
    return sorted(violations, key=Violation.sort_key)


def verdict_doc(
    violations: list[Violation], stats: Mapping[str, Any], system: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """verdict.json's document. `stats`: a run's RunStats (a Mapping of its JSON) or a matrix's stats dict;
    `system`: what the run's members ran (outcome.json's `system`: name, stack, release), so a verdict says it."""
    ordered = sort_violations(violations)
    doc = {"ok": not ordered, "violations": [v.to_json() for v in ordered], "stats": dict(stats)}
    if system:
        doc["system"] = dict(system)
    return doc


def write_verdict(
    path: Path, violations: list[Violation], stats: Mapping[str, Any], system: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Writes verdict.json ({"ok", "violations", "stats"}, and `system` when known) atomically; returns it."""
    doc = verdict_doc(violations, stats, system)
    write_atomic(path, json.dumps(doc, indent=1, default=str) + "\n")
    return doc

"""Helpers shared by the analysis tests."""

from __future__ import annotations

from pathlib import Path


def violation_keys(violations: list) -> list[tuple]:
    """What identifies a violation, for comparing checkers and injections (conn ids as text)."""
    keys = [
        (v.check, v.sender, v.receiver, None if v.conn_id is None else str(v.conn_id), v.seqno, v.msg_id)
        for v in violations
    ]
    return sorted(keys, key=repr)


def expected_keys(truth: object) -> list[tuple]:
    return sorted(((e.check, e.sender, e.receiver, e.conn_id, e.seqno, e.msg_id) for e in truth.expected), key=repr)


def write_lines(path: Path, lines: list[str], newline_at_end: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + ("\n" if newline_at_end else ""))

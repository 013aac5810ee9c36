"""Application payloads of workload messages: the msg_id the checker joins on, then padding up to the size."""

from __future__ import annotations


def make_payload(msg_id: str, size: int = 0) -> bytes:
    raw = msg_id.encode() + b"\0"
    return raw + b"x" * (size - len(raw)) if size > len(raw) else raw


def msg_id_of(payload: bytes) -> str | None:
    """The msg_id of a workload payload, or None for a payload that is not one."""
    end = payload.find(b"\0")
    if end <= 0:
        return None
    try:
        return payload[:end].decode()
    except UnicodeDecodeError:
        return None

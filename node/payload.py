"""Application payloads of workload messages: the msg_id the checker joins on, then padding up to the size.

A msg_id is `<sender address>><dest>#<n>` (`make_msg_id`): the sender's address ("A", or "A/2" for its second
incarnation), the destination member's name ("*" for a multicast) and a counter that starts at 1 per sender
incarnation and destination. So ids are unique per run without any coordination: a restarted member "B/2" starts
again at "B/2>A#1". The real member (node/runtime.py) and the simulator both make them here.
"""

from __future__ import annotations


def msg_id_prefix(sender_address: str, dest: str) -> str:
    """What every msg_id of this sender incarnation to `dest` starts with (make_msg_id: then the counter)."""
    return f"{sender_address}>{dest}#"


def make_msg_id(sender_address: str, dest: str, n: int) -> str:
    """The msg_id of the n-th (from 1) message this sender incarnation sends to `dest` (a member name, "*" for
    multicast)."""
    return f"{msg_id_prefix(sender_address, dest)}{n}"


def make_payload(msg_id: str, size: int = 0) -> bytes:
    return f"{msg_id}\0".encode().ljust(size, b"x")  # padded to size with b"x" in one allocation


def msg_id_of(payload: bytes) -> str | None:
    """The msg_id of a workload payload, or None for a payload that is not one."""
    end = payload.find(b"\0")
    if end <= 0:
        return None
    try:
        return payload[:end].decode()
    except UnicodeDecodeError:
        return None

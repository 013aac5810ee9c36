"""The JSON-lines request client: one JSON object per line on a connected stream socket (TCP or AF_UNIX), one reply
line per request. The orchestrator talks to a member's control endpoint (node/control.py) and the chaos engine to an
NFQUEUE handler (chaos/nfqueue/) with it; each caller keeps its own way of connecting (a netns backend connects from
inside a namespace) and passes either the connected socket or a callable that connects.

Standard library only: node/ is what a member imports.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any


class PeerClosed(ConnectionError):
    """The peer closed the connection before a whole reply line arrived."""


class BadReply(ValueError):
    """The reply line is not a JSON object."""


def encode(obj: object) -> bytes:
    """One JSON line (json.dumps' default separators, then a newline)."""
    return json.dumps(obj).encode() + b"\n"


def request(
    conn: socket.socket | Callable[[], socket.socket], req: dict[str, object], timeout: float, *, peer: str = "the peer"
) -> dict[str, Any]:
    """Sends `req` as one line and returns the reply line's object, within `timeout` seconds in all.

    `conn` is a connected socket (left open: the caller owns it) or a callable that returns one (closed here).
    Raises OSError when connecting or sending fails, TimeoutError when no whole reply line arrived in time,
    PeerClosed when the peer closed first, BadReply when the line is not a JSON object; `peer` names the other end in
    those messages."""
    if isinstance(conn, socket.socket):
        return _exchange(conn, req, timeout, peer)
    with conn() as sock:
        return _exchange(sock, req, timeout, peer)


def _exchange(sock: socket.socket, req: dict[str, object], timeout: float, peer: str) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    sock.settimeout(timeout)
    sock.sendall(encode(req))
    buf = b""
    while b"\n" not in buf:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no reply from {peer} to {req.get('cmd')!r} within {timeout:g} s")
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(1 << 20)
        except TimeoutError:
            raise TimeoutError(f"no reply from {peer} to {req.get('cmd')!r} within {timeout:g} s") from None
        if not chunk:
            raise PeerClosed(f"{peer} closed the connection without a reply to {req.get('cmd')!r}")
        buf += chunk
    line = buf.split(b"\n", 1)[0]
    try:
        reply = json.loads(line)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadReply(
            f"{peer} replied to {req.get('cmd')!r} with a line that is not JSON ({e}): {line[:200]!r}"
        ) from None
    if not isinstance(reply, dict):
        raise BadReply(f"{peer} replied to {req.get('cmd')!r} with {type(reply).__name__}, not a JSON object")
    return reply

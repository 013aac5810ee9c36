"""Member addresses, part of the history contract (docs/history.md, docs/contracts/history.md) and of the wire.

An address is a string: the member's name for its first incarnation ("B") and name/incarnation after a restart
("B/2"). A restarted member is a new address, as a new UUID is in JGroups: no protocol state of the old incarnation
(conn-ids, timestamps, seqnos) applies to it. The network routes by name; a stack drops datagrams addressed to an
older incarnation of itself. Histories carry addresses (`start` address, `send` dest_address, `deliver`
sender_address, `view` addresses) and msg_ids begin with one (node/payload.py).

Here, in the lowest layer and beside the history format, so that the wire and the protocols, the orchestrator, the
foreign members' launchers and the checker make and read them one way.
"""

from __future__ import annotations

__all__ = ["incarnation_of", "make_address", "name_of", "parse_address"]


def make_address(name: str, incarnation: int = 1) -> str:
    """The address of a member's incarnation (1 = the first); a ValueError for a name that cannot be one."""
    if not name or "/" in name:
        raise ValueError(f"a member name is non-empty and has no '/': {name!r}")
    return name if incarnation <= 1 else f"{name}/{incarnation}"


def name_of(address: str) -> str:
    """The member's name: what the network routes by and histories name members by."""
    return address.split("/", 1)[0]


def incarnation_of(address: str) -> int:
    """The incarnation number (1 = the first); a ValueError when what follows the '/' is no number."""
    _, _, inc = address.partition("/")
    return int(inc) if inc else 1


def parse_address(address: object) -> tuple[str, int] | None:
    """An address read from a history ("C", "C/2", ...) as (name, incarnation number, 1 = the first), or None when it
    is absent or not an address (empty, no name, or a bad or non-positive incarnation number)."""
    if not isinstance(address, str) or not address:
        return None
    try:
        inc = incarnation_of(address)
    except ValueError:
        return None
    name = name_of(address)
    return (name, inc) if name and inc >= 1 else None

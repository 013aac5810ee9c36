"""Member addresses.

An address is a string: the member's name for its first incarnation ("B") and name/incarnation after a restart
("B/2"). A restarted member is a new address, as a new UUID is in JGroups: no protocol state of the old incarnation
(conn-ids, timestamps, seqnos) applies to it. The network routes by name; a stack drops datagrams addressed to an
older incarnation of itself.
"""

from __future__ import annotations


def make_address(name: str, incarnation: int = 1) -> str:
    if not name or "/" in name:
        raise ValueError(f"a member name is non-empty and has no '/': {name!r}")
    return name if incarnation <= 1 else f"{name}/{incarnation}"


def name_of(address: str) -> str:
    return address.split("/", 1)[0]


def incarnation_of(address: str) -> int:
    _, _, inc = address.partition("/")
    return int(inc) if inc else 1

"""What a datagram carries, by name: the message keys a wire profile reads in a UDP payload ("UNICAST3.ACK",
"GMS.VIEW", "NAKACK2.MSG", ...), for observers that only watch (the wire tap, chaos/wiretap.py), never for rules.

Each message gives the keys of its protocol headers, the transport's own header (chaosbed's wire has none; JGroups'
`TP`/`UDP`) left out since every message has it; a message with no other header is `DATA` (JGroups' application
messages, whose payload is the workload's). `None` means the payload is not a datagram this wire can read (another
program, another release's layout, a truncated fragment): the tap counts those and names none.
"""

from __future__ import annotations

from collections.abc import Callable

from chaos.nfqueue.spans import datagram_spans
from chaos.profiles import jgroups5, jgroups212
from node import wire

KeyReader = Callable[[bytes], "list[str] | None"]
TRANSPORT_HEADERS = frozenset({"TP", "UDP", "TCP"})
APPLICATION = "DATA"  # a JGroups message with no protocol header but the transport's


def chaosbed_keys(payload: bytes) -> list[str] | None:
    try:
        _, spans = datagram_spans(payload)
    except (wire.WireError, IndexError):
        return None
    out = []
    for _, _, proto, typ in spans:
        spec = wire.SPECS_BY_IDS.get((proto, typ))
        out.append(spec.key if spec is not None else f"?{proto}.{typ}")
    return out


def _jgroups_keys(decode: Callable[[bytes], jgroups5.Datagram | jgroups212.Datagram]) -> KeyReader:
    def read(payload: bytes) -> list[str] | None:
        dgram = decode(payload)
        if not dgram.messages:
            return None
        out: list[str] = []
        for m in dgram.messages:
            keys = [h.key for h in m.headers if h.protocol not in TRANSPORT_HEADERS]
            out += keys or [APPLICATION]
        return out

    return read


READERS: dict[str, KeyReader] = {
    "chaosbed": chaosbed_keys,
    "jgroups-2.12": _jgroups_keys(jgroups212.decode),
    "jgroups-5": _jgroups_keys(jgroups5.decode),
}


def reader_for(wire_name: str) -> KeyReader | None:
    """The key reader of a wire profile (None for a system whose wire chaosbed cannot read, `wire = "none"`)."""
    return READERS.get(wire_name)

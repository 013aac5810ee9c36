"""What `chaosbed stacks` prints after the stack names: each stack's protocols and every protocol's declared
properties (name, type, default, unit, description), read from the protocols' Properties classes."""

from __future__ import annotations

import textwrap

from node.protocols.base import SECONDS
from node.stack import PROTOCOLS, STACKS

WIDTH = 118


def _default(value: object, unit: str) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if unit == SECONDS:
        return f"{value:g}s" if isinstance(value, float | int) else str(value)
    return str(value)


def properties_text() -> str:
    """The text after the stack names (ends with a newline)."""
    lines = ["", "protocols of each stack, bottom first:"]
    for name in sorted(STACKS):
        lines.append(f"  {name}: {' '.join(STACKS[name])}")
    lines += [
        "",
        "properties (in a scenario: [cluster.properties] PROTOCOL = { NAME = VALUE }; on the command line:",
        "  --set cluster.properties.PROTOCOL.NAME=VALUE):",
    ]
    for proto, cls in PROTOCOLS.items():
        lines += ["", f"{proto} ({cls.PROTOCOL}):"]
        declared = cls.PROPS.declared()
        width = max(len(p.name) for p in declared)
        for p in declared:
            head = f"  {p.name:<{width}} {p.type:<5} {_default(p.default, p.unit):>7}  "
            unit = "" if p.unit in ("", SECONDS) else f"[{p.unit}] "
            wrapped = textwrap.wrap(unit + p.description, WIDTH - len(head)) or [""]
            lines.append(head + wrapped[0])
            lines += [" " * len(head) + more for more in wrapped[1:]]
    return "\n".join(lines) + "\n"

"""How a foreign member is started: its config JSON, the placeholders of its command, its environment.

The values (docs/scenario-format.md, "Foreign members"): `{config}` (the config file), `{name}`, `{address}` ("B", "B/2"
after one restart), `{ip}`, `{port}` (data; the control endpoint is port + 1), `{history}`, `{incarnation}`, `{cluster}`
(the cluster's label), `{mcast_group}`, `{mcast_port}`, `{peers}` (the other members, `B=10.0.0.2:7800,C=...`). The same
values are in the environment as CHAOSBED_<NAME> in upper case, and the control token as CHAOSBED_TOKEN; the token is
in the config and the environment, never on the command line. `{{` and `}}` are literal braces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from node.addresses import make_address

PLACEHOLDERS = (
    "config",
    "name",
    "address",
    "ip",
    "port",
    "history",
    "incarnation",
    "cluster",
    "mcast_group",
    "mcast_port",
    "peers",
)
MCAST_PORT_OFFSET = 10_000  # the group's port is the data port + 10000, as chaosbed's own members use
_FIELD = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


@dataclass(frozen=True)
class Launch:
    """One incarnation of a member as its command sees it."""

    name: str
    ip: str
    port: int
    incarnation: int
    history: str
    config: str  # the config file's path
    cluster: str  # the cluster's label
    mcast_group: str
    peers: dict[str, tuple[str, int]]  # every member, this one included
    group_port: int | None = None  # the group's multicast port when members have ports of their own (loopback)

    @property
    def address(self) -> str:
        return make_address(self.name, self.incarnation)

    @property
    def mcast_port(self) -> int:
        return self.group_port if self.group_port is not None else self.port + MCAST_PORT_OFFSET

    def values(self) -> dict[str, str]:
        others = ",".join(f"{n}={ip}:{port}" for n, (ip, port) in self.peers.items() if n != self.name)
        return {
            "config": self.config,
            "name": self.name,
            "address": self.address,
            "ip": self.ip,
            "port": str(self.port),
            "history": self.history,
            "incarnation": str(self.incarnation),
            "cluster": self.cluster,
            "mcast_group": self.mcast_group,
            "mcast_port": str(self.mcast_port),
            "peers": others,
        }

    def config_doc(self, token: str, transport: str, system: str) -> dict[str, object]:
        """The config JSON's content (docs/contracts/control.md lists the keys)."""
        return {
            "name": self.name,
            "address": self.address,
            "ip": self.ip,
            "port": self.port,
            "history": self.history,
            "incarnation": self.incarnation,
            "cluster": self.cluster,
            "token": token,
            "peers": {n: [ip, port] for n, (ip, port) in self.peers.items()},
            "mcast_group": self.mcast_group,
            "mcast_port": self.mcast_port,
            "transport": transport,
            "system": system,
        }

    def env(self, token: str) -> dict[str, str]:
        """The CHAOSBED_* variables (added to the environment the member starts with)."""
        return {f"CHAOSBED_{k.upper()}": v for k, v in self.values().items()} | {"CHAOSBED_TOKEN": token}

    def argv(self, template: tuple[str, ...] | list[str]) -> list[str]:
        """The command with every placeholder filled in."""
        values = self.values()
        return [_fill(arg, values) for arg in template]


def _fill(arg: str, values: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        text = m.group(0)
        if text in ("{{", "}}"):
            return text[0]
        return values[m.group(1)]

    return _FIELD.sub(one, arg)


def template_problem(arg: str) -> str | None:
    """What is wrong with one argument of a command template (None: nothing): an unknown placeholder, the token,
    a lone brace."""
    for m in _FIELD.finditer(arg):
        text = m.group(0)
        if text in ("{{", "}}"):
            continue
        if m.group(1) is None:
            return f"a lone {text!r} in {arg!r}: write {text * 2} for a literal brace"
        key = m.group(1)
        if key == "token":
            return "the control token is never on the command line: the member reads CHAOSBED_TOKEN or the config"
        if key not in PLACEHOLDERS:
            return f"unknown placeholder {{{key}}} in {arg!r}; placeholders: " + ", ".join(
                f"{{{p}}}" for p in PLACEHOLDERS
            )
    return None

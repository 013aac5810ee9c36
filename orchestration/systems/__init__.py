"""What a cluster's members run: a *system* (docs/scenario-format.md, "Foreign members").

`chaosbed` (the default) is chaosbed's own member (node/), started on the native path: stacks, protocol properties,
`set` and `close-connection` faults, discards on chaosbed's wire, every backend including the simulator. Any other
system is *foreign*: a program started from a command with placeholders (orchestration/systems/launch.py), on the
real backends (process, netns, docker), that writes the history contract and, with `control`, answers the control
contract (docs/contracts/). A foreign system is named in the registry below (`chaosbed systems` lists it) or defined
inline by a scenario's `[cluster.member]` table (orchestration/systems/definition.py parses both).

Adding a named system is one entry in SYSTEMS; a wire profile becomes usable by `discard` faults once the fault engine
can apply it (WIRE_PROFILES: the profiles of chaos/profiles/).

The real JGroups 2.12.2 jar is two named systems (docs/foreign/jgroups.md): `jgroups-2.12` (UNICAST2 + NAKACK, the
flawed unicast of JGRP-1548 and JGRP-1563) and `jgroups-2.12-unicast` (the ack-based UNICAST, their fixed
variant); `cluster.stack` picks any of the member's stacks (the `-fast` ones, the defaults, have short discovery,
failure detection, merge and STABLE timers; `unicast2` and `unicast` are udp.xml's own timings).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import TypeVar

from chaos.profiles import PROFILES
from foreign import jgroups

NATIVE = "chaosbed"
REAL_BACKENDS = ("process", "netns", "docker")
# Wire profiles the fault engine (chaos/netns_engine.py) can apply a `discard` rule to. "none": no discards.
WIRE_PROFILES = {
    "none": "no protocol-aware discards: partitions, loss, delay, reorder and duplicate only",
    **{name: p.description for name, p in PROFILES.items()},
}
DEFAULT_SETTLE = 1.0  # seconds of unchanged histories that make a foreign member without `waiting_on` quiet
T = TypeVar("T")


@dataclass(frozen=True)
class System:
    """A system the members of a cluster run.

    `command` is the argv template of a foreign member ({config}, {name}, ... see launch.PLACEHOLDERS); `image` the
    docker backend's image (None: chaosbed's member image, with the working directory mounted); `control`: it answers
    the control contract (else it runs its own workload and [[workload]] is refused); `wire`: its wire profile for
    `discard` faults; `stack`: free text for reports; `settle`: how long its histories must stay unchanged before a
    member that does not report `waiting_on` counts as quiet at the end of a run; `views`: its members install views
    (a run waits for one common view before its schedule starts); `native`: chaosbed's own member on its native
    path; `stacks`: the stacks a scenario's `cluster.stack` may choose (written into the config as `stack`; none:
    cluster.stack is refused); `process_ip`: on the process backend every member binds this address with a port
    each (a JVM cannot send multicast from chaosbed's 127.77.x.y addresses); `mounts`: host folders a container
    of chaosbed's image gets read-only at the same path (the docker backend); `requires`: a check of what the
    machine must have, by name (`unavailable`); `one_by_one`: members start one at a time, each ready before the
    next, so the first is the group's coordinator (as a JGroups cluster is started; the bug files' fault sequences
    count on it); `transport`: udp or tcp, what its stack sends over (a discard over tcp is refused: a byte stream has
    no message to cut out)."""

    name: str
    command: tuple[str, ...] = ()
    image: str | None = None
    control: bool = True
    wire: str = "none"
    stack: str = ""
    settle: float = DEFAULT_SETTLE
    native: bool = False
    description: str = ""
    inline: bool = False  # defined by a scenario's [cluster.member], not by the registry
    views: bool = False
    stacks: tuple[str, ...] = ()
    process_ip: str = ""
    mounts: tuple[str, ...] = ()
    requires: str = ""
    one_by_one: bool = False
    transport: str = "udp"

    @property
    def backends(self) -> tuple[str, ...]:
        return ("sim", *REAL_BACKENDS, "swarm") if self.native else REAL_BACKENDS

    @property
    def label(self) -> str:
        """The name with the stack, for reports: `my-gossip (gossip-v1)`."""
        return f"{self.name} ({self.stack})" if self.stack and self.stack != self.name else self.name

    def to_dict(self) -> dict[str, object]:
        """JSON-able (a ClusterSpec keeps it, so a cluster attached from its state file knows its system)."""
        d = asdict(self)
        d["command"] = list(self.command)
        return d

    def cluster_table(self) -> dict[str, object]:
        """The system as a scenario's [cluster] keys: its name, and an inline system's [cluster.member] table."""
        if not self.inline:
            return {"system": self.name}
        member: dict[str, object] = {"command": list(self.command), "control": self.control, "wire": self.wire,
                                  "stack": self.stack, "settle": self.settle, "views": self.views}  # fmt: skip
        if self.image:
            member["image"] = self.image
        return {"system": self.name, "member": member}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> System:
        """From to_dict's form, also as JSON (a ClusterSpec's `system` in a cluster's state file: lists for the
        tuples); a missing key is the field's default. TypeError naming the key for a key that is no field, or a
        value of the wrong type."""
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise TypeError(f"a system has no field {unknown[0]!r}")
        if not isinstance(name := d.get("name"), str):
            raise TypeError(f"a system's name must be a string, not {name!r}")
        base = cls(name)  # the defaults
        image, settle = d.get("image", base.image), d.get("settle", base.settle)
        if image is not None and not isinstance(image, str):
            raise TypeError(f"a system's image must be a string or null, not {image!r}")
        if not isinstance(settle, int | float) or isinstance(settle, bool):
            raise TypeError(f"a system's settle must be a number, not {settle!r}")
        return cls(
            name=name,
            command=_strings(d, "command"),
            image=image,
            control=_field(d, "control", base.control),
            wire=_field(d, "wire", base.wire),
            stack=_field(d, "stack", base.stack),
            settle=settle,
            native=_field(d, "native", base.native),
            description=_field(d, "description", base.description),
            inline=_field(d, "inline", base.inline),
            views=_field(d, "views", base.views),
            stacks=_strings(d, "stacks"),
            process_ip=_field(d, "process_ip", base.process_ip),
            mounts=_strings(d, "mounts"),
            requires=_field(d, "requires", base.requires),
            one_by_one=_field(d, "one_by_one", base.one_by_one),
            transport=_field(d, "transport", base.transport),
        )


def _field(d: Mapping[str, object], key: str, default: T) -> T:
    """A System field of to_dict's form: the default without it, TypeError naming it when not of the default's type."""
    value = d.get(key, default)
    if not isinstance(value, type(default)):
        raise TypeError(f"a system's {key} must be {type(default).__name__}, not {value!r}")
    return value


def _strings(d: Mapping[str, object], key: str) -> tuple[str, ...]:
    """A tuple field of to_dict's form (a list in JSON): () without it, TypeError naming it when not of strings."""
    value = d.get(key, ())
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"a system's {key} must be a list of strings, not {value!r}")
    return tuple(value)


CHAOSBED = System(
    NATIVE,
    command=("python3", "-m", "node", "{config}"),
    image="chaosbed-member (compose/Dockerfile, built on demand)",
    control=True,
    wire="chaosbed",
    stack="unicast3+nakack2 (any of `chaosbed stacks`)",
    native=True,
    description="chaosbed's own member (node/): stacks, [cluster.properties], set and close-connection faults",
)

SYSTEMS: dict[str, System] = {
    NATIVE: CHAOSBED,
    "chaosbed-contract": System(
        "chaosbed-contract",
        command=("python3", "-m", "foreign.chaosbed", "{config}", "--stack", "unicast3+nakack2"),
        control=True,
        wire="chaosbed",
        stack="unicast3+nakack2",
        views=True,
        description="chaosbed's own member started as a foreign one (the contracts' config, command and environment;"
        " run from the chaosbed checkout): parity and overhead of the foreign path",
    ),
}
_JGROUPS = {
    "command": jgroups.system_command(),
    "control": True,
    "wire": "jgroups-2.12",
    "views": True,
    "stacks": jgroups.STACKS,
    "process_ip": "127.0.0.1",
    "mounts": jgroups.docker_mounts(),
    "requires": "jgroups",
    "one_by_one": True,
}
SYSTEMS["jgroups-2.12"] = System(
    "jgroups-2.12",
    stack="unicast2-fast",
    description="the real JGroups 2.12.2 jar (Debian's libjgroups-java; foreign/jgroups/): UNICAST2 + NAKACK, "
    "discards in JGroups' names (UNICAST2.DATA(seqno=6), NAKACK.MSG(), GMS.VIEW())",
    **_JGROUPS,  # type: ignore[arg-type]
)
SYSTEMS["jgroups-2.12-unicast"] = System(
    "jgroups-2.12-unicast",
    stack="unicast-fast",
    description="the real JGroups 2.12.2 jar with the ack-based UNICAST (the fixed variant of JGRP-1548/1563)",
    **_JGROUPS,  # type: ignore[arg-type]
)


def named(name: str) -> System | None:
    """The registry's system of this name (None if there is none)."""
    return SYSTEMS.get(name)


def system_of(spec_system: Mapping[str, object] | None) -> System:
    """The system a ClusterSpec carries (None: chaosbed's own)."""
    return CHAOSBED if spec_system is None else System.from_dict(spec_system)


def unavailable(system: System) -> str | None:
    """What this machine lacks to run the system (None: nothing it can tell): the JGroups systems need a JDK and
    the jar (`make setup` installs both as root)."""
    if system.requires == "jgroups":
        return jgroups.missing()
    return None


def prepare(system: System) -> None:
    """Before a cluster of the system starts: the JGroups member is built (`make jgroups`, a no-op when up to
    date). Raises RuntimeError with what is missing."""
    if system.requires == "jgroups":
        jgroups.build()

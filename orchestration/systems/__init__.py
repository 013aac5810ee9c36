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

from chaos.profiles import PROFILES
from foreign import jgroups
from orchestration.systems.jgroups5 import JGROUPS5_SYSTEMS
from orchestration.systems.system import DEFAULT_SETTLE, REAL_BACKENDS, System

__all__ = ["DEFAULT_SETTLE", "NATIVE", "REAL_BACKENDS", "SYSTEMS", "WIRE_PROFILES", "System", "named", "system_of"]

NATIVE = "chaosbed"
# Wire profiles the fault engine (chaos/netns_engine.py) can apply a `discard` rule to. "none": no discards.
WIRE_PROFILES = {
    "none": "no protocol-aware discards: partitions, loss, delay, reorder and duplicate only",
    **{name: p.description for name, p in PROFILES.items()},
}


CHAOSBED = System(
    NATIVE,
    command=("python3", "-m", "node", "{config}"),
    image="chaosbed-member (compose/Dockerfile, built on demand)",
    control=True,
    wire="chaosbed",
    stack="unicast3+nakack2 (any of `chaosbed stacks`)",
    native=True,
    leave="control",  # its own `leave` command: the group's leave protocol (node/)
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
    "releases": "2.12.2 (Debian's libjgroups-java)",
    "leave": "control",
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


SYSTEMS.update(JGROUPS5_SYSTEMS)


def named(name: str) -> System | None:
    """The registry's system of this name (None if there is none)."""
    return SYSTEMS.get(name)


def system_of(spec_system: Mapping[str, object] | None) -> System:
    """The system a ClusterSpec carries (None: chaosbed's own)."""
    return CHAOSBED if spec_system is None else System.from_dict(spec_system)


def unavailable(system: System) -> str | None:
    """What this machine lacks to run the system (None: nothing it can tell): the JGroups systems need a JDK and
    the jar (`make setup` installs both as root; a 5.x release's jar is fetched on first use)."""
    if system.requires == "jgroups":
        return jgroups.missing()
    if system.requires == "jgroups5":
        from orchestration.systems.jgroups5 import missing

        return missing(system)
    return None


def prepare(system: System) -> None:
    """Before a cluster of the system starts: the JGroups member is built (`make jgroups`, `make jgroups5`, a no-op
    when up to date) and a release's jar fetched. Raises RuntimeError with what is missing."""
    if system.requires == "jgroups":
        jgroups.build()
    if system.requires == "jgroups5":
        from orchestration.systems.jgroups5 import prepare as prepare5

        prepare5(system)

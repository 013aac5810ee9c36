"""A scenario's `[cluster] system` and `[cluster.member]` as a System, and what a foreign system cannot do.

Every problem is a (dotted path, reason) pair, so orchestration/scenario.py raises it as a ScenarioError naming the
key: `cluster.member.wire: unknown wire profile ...`, `faults[2].kind: ... refused for system 'my-gossip' ...`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeGuard

from node.units import parse_duration
from orchestration.systems import NATIVE, SYSTEMS, WIRE_PROFILES, System, named
from orchestration.systems.launch import template_problem

MEMBER_KEYS = {"command", "image", "control", "wire", "stack", "settle", "views", "leave"}
LEAVES = ("sigterm", "control")
# what only chaosbed's own member understands: refused for a foreign system, naming the key and the system
CHAOSBED_ONLY_FAULTS = {
    "set": "it changes a property of chaosbed's own protocols",
    "close-connection": "it asks chaosbed's own unicast protocol to close a connection",
}


class SystemProblem(ValueError):
    """A system that cannot be used: `path` is the dotted key, `reason` what is wrong and how to fix it."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def _need(cond: bool, path: str, reason: str) -> None:
    if not cond:
        raise SystemProblem(path, reason)


def _strings(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(a, str) for a in value)


def from_cluster(cluster: Mapping[str, object]) -> System:
    """The system of a scenario's [cluster] table: `system` names a registered system (default chaosbed) or, with a
    [cluster.member] table, an inline one."""
    name = cluster.get("system", NATIVE)
    if not isinstance(name, str) or not name:
        raise SystemProblem("cluster.system", "a non-empty string: a system's name")
    _need("/" not in name, "cluster.system", "no '/' in a system's name")
    member = cluster.get("member")
    known = named(name)
    if member is None:
        if known is None:
            raise SystemProblem(
                "cluster.system",
                f"unknown system {name!r}; named systems: {', '.join(sorted(SYSTEMS))} (`chaosbed systems`), "
                "or define it inline with a [cluster.member] table (command = [...]), or once in a systems.toml "
                "beside your scenarios (docs/foreign.md)",
            )
        return known
    _need(
        known is None,
        "cluster.member",
        f"{name!r} is a named system (`chaosbed systems`): [cluster.member] defines an inline system, so give it a "
        "name of its own, or leave [cluster.member] out",
    )
    return inline(name, member)


def inline(name: str, member: object, path: str = "cluster.member") -> System:
    """An inline system from its [cluster.member] table."""
    if not isinstance(member, dict):
        raise SystemProblem(path, "must be a table: command = [...], image, control, wire, stack")
    table: Mapping[str, object] = member
    for key in table:
        _need(
            key in MEMBER_KEYS, f"{path}.{key}", f"unknown key; [cluster.member] has: {', '.join(sorted(MEMBER_KEYS))}"
        )
    command = table.get("command")
    if not _strings(command) or not command:
        raise SystemProblem(
            f"{path}.command", 'an argv: a non-empty list of strings, e.g. ["python3", "member.py", "{config}"]'
        )
    for i, arg in enumerate(command):
        problem = template_problem(arg)
        _need(problem is None, f"{path}.command[{i}]", str(problem))
    _need(bool(command[0].strip()), f"{path}.command[0]", "the program to run: not empty")
    image = table.get("image")
    if image is not None and not (isinstance(image, str) and image):
        raise SystemProblem(f"{path}.image", "an image reference, e.g. my/gossip:1")
    control = table.get("control", True)
    if not isinstance(control, bool):
        raise SystemProblem(f"{path}.control", "true (it answers the control contract) or false")
    wire = table.get("wire", "none")
    if not isinstance(wire, str) or wire not in WIRE_PROFILES:
        raise SystemProblem(
            f"{path}.wire",
            f"unknown wire profile {wire!r}; profiles the fault engine applies: {', '.join(WIRE_PROFILES)}",
        )
    stack = table.get("stack", "")
    if not isinstance(stack, str):
        raise SystemProblem(f"{path}.stack", "free text (shown in reports)")
    settle = parse_duration(table.get("settle", "1s"), f"{path}.settle", non_negative=True, error=_settle_error)
    _need(settle <= 60, f"{path}.settle", "at most 60s")
    views = table.get("views", False)
    if not isinstance(views, bool):
        raise SystemProblem(f"{path}.views", "true (its members install views) or false")
    leave = table.get("leave", "sigterm")
    if leave not in LEAVES:
        raise SystemProblem(
            f"{path}.leave",
            '"control" (the `leave` fault sends the control command `leave`: a graceful leave) or "sigterm" (default)',
        )
    _need(leave == "sigterm" or control, f"{path}.leave", '"control" needs control = true')
    return System(
        name, tuple(command), image, control, wire, stack or name, settle, native=False, inline=True,
        description="defined inline by the scenario", views=views, leave=str(leave),
    )  # fmt: skip


def _settle_error(message: str) -> SystemProblem:
    path, _, reason = message.partition(": ")
    return SystemProblem(path, reason or message)


def cluster_refusals(system: System, cluster: Mapping[str, object]) -> list[tuple[str, str]]:
    """[cluster] keys that only chaosbed's own member understands, used with a foreign system."""
    if system.native:
        return []
    found = []
    if cluster.get("properties"):  # an empty table sets nothing (a [per_system] table may empty the file's)
        found.append(
            (
                "cluster.properties",
                f"refused for system {system.name!r}: protocol properties are chaosbed's own (node/); a foreign "
                "system is configured by its command",
            )
        )
    if "stack" in cluster and system.stacks:
        if not system.accepts_stack(cluster["stack"]):
            found.append(
                (
                    "cluster.stack",
                    f"unknown stack {cluster['stack']!r} for system {system.name!r}; its stacks: "
                    + ", ".join(system.stacks)
                    + (", or the path of a JGroups XML file (*.xml)" if system.stack_files else ""),
                )
            )
    elif "stack" in cluster:
        found.append(
            (
                "cluster.stack",
                f"refused for system {system.name!r}: chaosbed's stacks run on system 'chaosbed' only; describe a "
                "foreign system's stack in cluster.member.stack (free text) or its command",
            )
        )
    return found


TCP_DISCARD = (
    "a discard cuts messages out of datagrams, and over TCP the messages are one byte stream that the kernel "
    "retransmits (a dropped segment comes again, and no message can be cut out of the stream); use partition, loss, "
    "delay, kill, pause or leave, or a UDP stack"
)


def transport_refusal(system: System, transport: str, kind: str) -> str | None:
    """Why a fault of this kind is refused over the cluster's transport (None: it is not): a discard over TCP."""
    if kind != "discard" or transport != "tcp":
        return None
    why = f"system {system.name!r} runs over tcp" if system.transport == "tcp" else "cluster.transport is tcp"
    return f"discard is refused over TCP ({why}): {TCP_DISCARD}"


def fault_refusal(system: System, kind: str, transport: str = "udp") -> str | None:
    """Why a fault of this kind is refused for the system over the cluster's transport (None: it is not)."""
    if why := transport_refusal(system, transport, kind):
        return why
    if system.native:
        return None
    if kind in CHAOSBED_ONLY_FAULTS:
        return f"{kind} is refused for system {system.name!r}: {CHAOSBED_ONLY_FAULTS[kind]}"
    if kind == "discard" and system.wire == "none":
        return (
            f'discard is refused for system {system.name!r}: it has no wire profile (wire = "none"), so no rule can '
            "read its messages; use partition, loss, delay, reorder or duplicate"
        )
    return None


def workload_refusal(system: System) -> str | None:
    """Why [[workload]] tables are refused (a member without control runs its own workload)."""
    if system.control:
        return None
    return (
        f"system {system.name!r} has no control (control = false): its members run their own workload, so a "
        "scenario's [[workload]] cannot be sent; leave it out"
    )


def foreign_release(system: System, cluster: Mapping[str, object]) -> System:
    """A foreign system with the stack (cluster_refusals checked it) and the release (`cluster.version`) a
    scenario's [cluster] names; a release's jar is fetched here, on first use, so that a missing one fails at load
    time. SystemProblem naming the key."""
    from dataclasses import replace

    from orchestration.systems import jgroups5

    if "version" in cluster:
        if not system.release:
            why = f"it runs {system.releases} only" if system.releases else "it has no releases to choose from"
            raise SystemProblem("cluster.version", f"refused for system {system.name!r}: {why}")
        named = str(cluster["stack"]) if system.stacks and "stack" in cluster else None
        try:
            system = jgroups5.with_release(system, cluster["version"], named)
        except jgroups5.ReleaseProblem as e:
            raise SystemProblem("cluster.version", str(e)) from None
    if system.stacks and "stack" in cluster:
        stack = str(cluster["stack"])
        if system.requires != jgroups5.REQUIRES:
            system = replace(system, stack=stack)
        else:
            try:
                system = jgroups5.with_stack(system, stack)
            except jgroups5.ReleaseProblem as e:
                raise SystemProblem("cluster.stack", str(e)) from None
    if system.requires == jgroups5.REQUIRES:
        try:
            jgroups5.ensure_jar(system)
        except jgroups5.ReleaseProblem as e:
            raise SystemProblem("cluster.version" if "version" in cluster else "cluster.system", str(e)) from None
    return system

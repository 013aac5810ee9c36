"""The System dataclass: what a cluster's members run (orchestration/systems/__init__.py has the registry)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import TypeVar

REAL_BACKENDS = ("process", "netns", "docker")
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
    count on it); `release`: the release of a real system it runs, where a scenario's `cluster.version` can
    choose another (orchestration/systems/jgroups5.py), `releases` the ones it can run (text: "5.2.7+"); `leave`:
    how the `leave` fault ends a member: "control" (the control contract's optional `leave` command, a graceful
    leave of the group, with SIGTERM as the fallback) or "sigterm"; `transport`: the transport the system always
    uses ("": the scenario's); `stack_files`: `cluster.stack` may also be the path of a stack file of the user's
    own (*.xml); `member_config`: more keys for every member's config file (the JGroups members' record_messages,
    which benchmarks turn off)."""

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
    release: str = ""
    releases: str = ""
    leave: str = "sigterm"
    transport: str = ""
    stack_files: bool = False
    member_config: dict[str, object] = field(default_factory=dict)

    @property
    def backends(self) -> tuple[str, ...]:
        return ("sim", *REAL_BACKENDS, "swarm") if self.native else REAL_BACKENDS

    @property
    def label(self) -> str:
        """The name with the stack (and the release), for reports: `my-gossip (gossip-v1)`, `jgroups-5-udp (5.5.6,
        udp-fast)`; a stack file by its file name (`jgroups-5 (5.4.6, nakack4-window-100.xml)`)."""
        stack = self.stack if self.stack and self.stack != self.name else ""
        if stack.endswith(".xml"):
            stack = stack.rsplit("/", 1)[-1]
        inner = ", ".join(x for x in (self.release, stack) if x)
        return f"{self.name} ({inner})" if inner else self.name

    def accepts_stack(self, stack: object) -> bool:
        """Whether `cluster.stack` may name this stack: one of its own, or (stack_files) a *.xml file."""
        return isinstance(stack, str) and (stack in self.stacks or (self.stack_files and stack.endswith(".xml")))

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
                                  "stack": self.stack, "settle": self.settle, "views": self.views,
                                  "leave": self.leave}  # fmt: skip
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
            release=_field(d, "release", base.release),
            releases=_field(d, "releases", base.releases),
            leave=_field(d, "leave", base.leave),
            transport=_field(d, "transport", base.transport),
            stack_files=_field(d, "stack_files", base.stack_files),
            member_config=_field(d, "member_config", base.member_config),
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

"""The JGroups systems of Maven Central's releases (docs/foreign/jgroups5.md, docs/foreign/jgroups3.md): the 5.x
member program (foreign/jgroups/jgroups5.py) and the 3.x one (foreign/jgroups/jgroups3.py) with each of their stacks,
on a release a scenario chooses (`cluster.version`, default the newest release that has the stack; a system keeps
to its member program's API generation: a 3.x system takes 3.x releases only).

| system | stacks (`cluster.stack`) | default release | releases |
|---|---|---|---|
| `jgroups-5-udp` | udp-fast (default), udp: UNICAST3 + NAKACK2 over UDP | 5.5.6 | 5.2.7+ |
| `jgroups-5-tcp` | tcp-fast, tcp: the same over TCP, TCPPING from the peers | 5.5.6 | 5.2.7+ |
| `jgroups-5-nakack4` | nakack4-fast, nakack4: NAKACK4 + UNICAST4 (udp-new.xml, the MCAST design) | 5.5.6 | 5.4.0+ |
| `jgroups-5-tcp-noxmit` | tcp-noxmit-fast, tcp-noxmit: NAKACK2 without retransmission over TCP | 5.4.3 | 5.2.13-5.4.3 |
| `jgroups-5` | any of the above, or the path of a JGroups XML file of the user's own | 5.5.6 | 5.2.7+ |
| `jgroups-3-unicast2` | unicast2-udp-fast, unicast2-udp: UNICAST2 + NAKACK2 over UDP | 3.2.7 | 3.1.0-3.6.20 |
| `jgroups-3-unicast3` | unicast3-udp-fast, unicast3-udp: UNICAST3 + NAKACK2 over UDP | 3.6.0 | 3.3.0-3.6.20 |
| `jgroups-3` | any of the 3.x stacks, or a JGroups 3 XML file of the user's own | 3.6.0 | 3.1.0-3.6.20 |

The 3.x systems have no wire profile yet (their discards are refused at load time): JGroups 3's wire format is not
5's (docs/foreign/jgroups3.md).

A release changes the command (its jar on the classpath) and the docker mounts (the jar's folder): `with_release`. A
stack file of the user's own is made absolute and mounted; its transport is read from the file: `with_stack`.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from types import ModuleType

from foreign.jgroups import jgroups3, jgroups5
from foreign.jgroups.maven import JarError, fetch, jar_path, verified
from foreign.jgroups.releases import NEWEST, NOXMIT, OLDEST3, Release, ReleaseError, check_stack, stack_span
from orchestration.systems.system import System

REQUIRES = "jgroups5"  # every system of a Maven Central release (5.x and 3.x): the name is older than the 3.x member
NEWEST3_USED = "3.6.0"  # the 3.x systems' default release: the newest the project fetches
WIRES = {"5": "jgroups-5", "3": "none"}  # the wire profile of each generation's systems
_TCP_TRANSPORT = re.compile(r"<\s*(TCP|TCP_NIO2|TUNNEL)\b")


class ReleaseProblem(ValueError):
    """A release or stack a JGroups system cannot run (or whose jar cannot be had): the message says why and what
    to do."""


def program(release: Release) -> ModuleType:
    """The member program of the release's API generation: foreign.jgroups.jgroups5 or foreign.jgroups.jgroups3."""
    return jgroups3 if release.generation == "3" else jgroups5


def _system(name: str, stacks: tuple[str, ...], release: str, description: str, *, files: bool = False) -> System:
    r = Release.parse(release)
    return System(
        name,
        command=program(r).system_command(r),
        control=True,
        wire=WIRES[r.generation],  # over tcp its discards are refused (transport)
        stack=stacks[0],
        description=description,
        views=True,
        stacks=stacks,
        process_ip="127.0.0.1",
        mounts=program(r).docker_mounts(r),
        requires=REQUIRES,
        one_by_one=True,
        release=r.version,
        releases=str(stack_span(stacks[0])),
        leave="control",
        transport=jgroups5_transport(stacks[0]),
        stack_files=files,
    )


def jgroups5_transport(stack: str) -> str:
    """The transport of a stack: "tcp" for the tcp stacks and for a file whose transport is TCP, else "udp"."""
    if stack.endswith(".xml"):
        try:
            return "tcp" if _TCP_TRANSPORT.search(Path(stack).read_text(errors="replace")) else "udp"
        except OSError:
            return "udp"
    return "tcp" if stack.startswith("tcp") else "udp"


JGROUPS5_SYSTEMS = {
    s.name: s
    for s in (
        _system("jgroups-5-udp", ("udp-fast", "udp"), NEWEST,
                "the real JGroups 5 (Maven Central; foreign/jgroups/): UNICAST3 + NAKACK2 over UDP (its udp.xml)"),
        _system("jgroups-5-tcp", ("tcp-fast", "tcp"), NEWEST,
                "the real JGroups 5: UNICAST3 + NAKACK2 over TCP (its tcp.xml, TCPPING from the peers)"),
        _system("jgroups-5-nakack4", ("nakack4-fast", "nakack4"), NEWEST,
                "the real JGroups 5: NAKACK4 + UNICAST4 (its udp-new.xml: the MCAST design, fixed windows, acks)"),
        _system("jgroups-5-tcp-noxmit", ("tcp-noxmit-fast", "tcp-noxmit"), NOXMIT,
                "the real JGroups 5: NAKACK2 without retransmission over TCP (xmit_interval=0), the newest release "
                "that has it"),
        _system("jgroups-5", tuple(jgroups5.STACKS[1::2]) + tuple(jgroups5.STACKS[0::2]), NEWEST,
                "the real JGroups 5 with any of its stacks, or your own JGroups XML file as cluster.stack",
                files=True),
        _system("jgroups-3-unicast2", ("unicast2-udp-fast", "unicast2-udp"), OLDEST3,
                "the real JGroups 3 (Maven Central): UNICAST2 + NAKACK2 over UDP (UNICAST2: 3.1-3.6)"),
        _system("jgroups-3-unicast3", ("unicast3-udp-fast", "unicast3-udp"), NEWEST3_USED,
                "the real JGroups 3: UNICAST3 + NAKACK2 over UDP (UNICAST3: 3.3-3.6; its sync design from 3.5.1)"),
        _system("jgroups-3", tuple(jgroups3.STACKS[1::2]) + tuple(jgroups3.STACKS[0::2]), NEWEST3_USED,
                "the real JGroups 3 with any of its stacks, or your own JGroups 3 XML file as cluster.stack",
                files=True),
    )
}  # fmt: skip


def with_release(system: System, version: object, stack: str | None = None) -> System:
    """The system on another release: the command and mounts of its jar (ReleaseProblem for a release it cannot
    run: not of its member program's generation, or without what its stack needs: `stack`, the one the scenario
    names and with_stack sets next, else the system's own)."""
    own = Release.parse(system.release)
    if not isinstance(version, str):
        raise ReleaseProblem(f'a release as a string, e.g. "{own}", not {version!r}')
    try:
        r = Release.parse(version)
        if r.generation != own.generation:
            raise ReleaseError(f"system {system.name!r} runs JGroups {own.generation}.x releases, not {r}")
        check_stack(r, stack or system.stack)
    except ReleaseError as e:
        raise ReleaseProblem(str(e)) from None
    return replace(system, release=r.version, command=program(r).system_command(r), mounts=_mounts(system, r))


def with_stack(system: System, stack: str) -> System:
    """The system with one of its stacks, or a stack file of the user's own (made absolute, its folder mounted, its
    transport read from it); ReleaseProblem for a file that is not there or a stack its release lacks."""
    if stack.endswith(".xml"):
        path = Path(stack).expanduser().resolve()
        if not path.is_file():
            raise ReleaseProblem(f"no stack file {stack!r} (from {Path.cwd()}): the path of a JGroups XML file")
        stack = str(path)
    try:
        check_stack(Release.parse(system.release), stack)
    except ReleaseError as e:
        raise ReleaseProblem(str(e)) from None
    changed = replace(system, stack=stack, transport=jgroups5_transport(stack))
    return replace(changed, mounts=_mounts(changed, Release.parse(system.release)))


def _mounts(system: System, release: Release) -> tuple[str, ...]:
    mounts = list(program(release).docker_mounts(release))
    if system.stack.endswith(".xml"):
        mounts.append(str(Path(system.stack).parent))
    return tuple(dict.fromkeys(mounts))


def ensure_jar(system: System) -> None:
    """The system's release's jar, fetched on first use; ReleaseProblem naming the release and the fetch command."""
    try:
        fetch(Release.parse(system.release))
    except (JarError, ReleaseError) as e:
        raise ReleaseProblem(str(e)) from None


def missing(system: System) -> str | None:
    r = Release.parse(system.release)
    return program(r).missing(r)


def prepare(system: System) -> None:
    """The jar (fetched if it is not here) and the member's build; RuntimeError saying what is missing."""
    ensure_jar(system)
    problem = missing(system)
    if problem:
        raise RuntimeError(problem)
    program(Release.parse(system.release)).build()


def on_this_machine() -> list[str]:
    """The 5.x and 3.x releases (those a member program runs) whose jars are in Maven's local repository, oldest
    first."""
    base = jar_path(Release.parse(NEWEST)).parent.parent
    found = []
    for d in base.iterdir() if base.is_dir() else ():
        try:
            r = Release.parse(d.name)
        except ReleaseError:
            continue
        if (r.major == 5 or ((r.major, r.minor) >= (3, 1) and r.major == 3)) and verified(r):
            found.append(r)
    return [r.version for r in sorted(found)]

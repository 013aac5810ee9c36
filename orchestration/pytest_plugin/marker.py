"""The `chaosbed` marker: its arguments, the backend a test runs on (and why one cannot run here), and the
ClusterSpec they describe, validated as a scenario's [cluster] table is."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, NoReturn

import pytest

if TYPE_CHECKING:
    from orchestration.cluster import ClusterSpec, Properties
    from orchestration.scenario import TomlTable

MARKER = "chaosbed"
MARKER_HELP = (
    "chaosbed(members=3, stack='unicast3+nakack2', backend=None, transport='udp', properties=None, seed=0, "
    "system='chaosbed', member=None): the cluster of the chaos_cluster fixture (backend None: --chaosbed-backend, "
    "else netns as root, else process; system: a named system, or with member={'command': [...], ...} one defined "
    "as a scenario's [cluster.member] is)"
)


@dataclass(frozen=True)
class ClusterOptions:
    """The `chaosbed` marker's arguments with their defaults. A user's arguments come as pytest hands them over,
    unchecked: cluster_spec validates them as a scenario's [cluster] table is."""

    members: int | list[str] = 3
    stack: str = "unicast3+nakack2"
    backend: str | None = None
    transport: str = "udp"
    properties: Properties | None = None
    seed: int = 0
    system: str = "chaosbed"
    member: TomlTable | None = None  # an inline system's [cluster.member] table


MARKER_DEFAULTS = ClusterOptions()
MARKER_ARGUMENTS = tuple(f.name for f in fields(ClusterOptions))  # in the order MARKER_HELP gives them


def marker_options(node: pytest.Item) -> ClusterOptions:
    """The closest `chaosbed` marker's arguments (defaults without one); unknown arguments are an error."""
    marker = node.get_closest_marker(MARKER)
    kwargs = dict(marker.kwargs) if marker else {}
    if marker and marker.args:
        usage_error(f"the chaosbed marker of {node.nodeid} takes keyword arguments only: {MARKER_HELP}")
    unknown = sorted(set(kwargs) - set(MARKER_ARGUMENTS))
    if unknown:
        usage_error(
            f"the chaosbed marker of {node.nodeid}: unknown argument(s) {', '.join(unknown)}; "
            f"it takes {', '.join(MARKER_ARGUMENTS)}"
        )
    return ClusterOptions(**kwargs)


def usage_error(message: str) -> NoReturn:
    """A wrong marker argument or backend name: the test errors with the message (the session goes on)."""
    pytest.fail(message, pytrace=False)


def choose_backend(config: pytest.Config, marked: str | None) -> str:
    """The marker's backend, else --chaosbed-backend, else the ini option, else CHAOSBED_BACKEND, else netns when it
    can run here, else process."""
    chosen = (
        marked
        or config.getoption("chaosbed_backend", None)
        or config.getini("chaosbed_backend")
        or os.environ.get("CHAOSBED_BACKEND")
    )
    if chosen:
        return str(chosen)
    return "netns" if netns_problem() is None else "process"


def netns_problem() -> str | None:
    """Why the netns backend cannot run here (None if it can)."""
    from orchestration.backends.netns import check_netns_available
    from orchestration.cluster import ClusterError

    try:
        check_netns_available()
    except ClusterError as e:
        return str(e)
    return None


def backend_problem(backend: str) -> str | None:
    """Why `backend` cannot run here, as a skip reason; an error for a name no version of chaosbed knows."""
    from orchestration.backends import BACKENDS

    if backend not in BACKENDS:
        usage_error(f"unknown chaosbed backend {backend!r}: {' | '.join(BACKENDS)}")
    if backend == "netns":
        problem = netns_problem()
        return f"netns: {problem}" if problem else None
    if backend == "docker":
        problem = docker_problem()
        return f"docker: {problem}" if problem else None
    return None


def docker_problem() -> str | None:
    """Why the docker backend cannot run here: it needs root (faults go into the containers' namespaces) and an
    engine that runs, or one this session can start (root with Debian's docker.io: the session then stops it)."""
    from orchestration.host import docker_engine

    if os.geteuid() != 0:
        return "the docker backend needs root (it applies faults inside the containers' network namespaces)"
    return docker_engine.unavailable_reason()


def scenario_raw(spec: ClusterSpec, name: str, checks: TomlTable | None = None) -> TomlTable:
    """The cluster (and checks) as a scenario file's table: validated by orchestration.scenario.parse and written
    as the run folder's scenario.toml by the runner's writer, so a test's folder reads like a `chaosbed run`."""
    cluster: TomlTable = {"members": list(spec.members), "stack": spec.stack, "transport": spec.transport}
    if spec.properties:
        cluster["properties"] = spec.properties
    if spec.system is not None:
        from orchestration.systems import System

        cluster = {"members": list(spec.members), "transport": spec.transport}
        cluster.update(System.from_dict(spec.system).cluster_table())
    raw: TomlTable = {"name": name, "seed": spec.seed, "cluster": cluster}
    if checks is not None:
        raw["checks"] = checks
    return raw


def cluster_spec(options: ClusterOptions, backend: str, name: str) -> ClusterSpec:
    """The ClusterSpec of the marker's arguments, validated as a scenario's [cluster] table is."""
    from orchestration.cluster import ClusterSpec
    from orchestration.scenario import ScenarioError, parse
    from orchestration.systems.clusters import spec_of

    members = options.members
    raw = scenario_raw(
        ClusterSpec([], options.stack, options.transport, dict(options.properties or {}), backend, options.seed),
        name,
    )
    cluster = raw["cluster"]
    assert isinstance(cluster, dict)  # scenario_raw's
    cluster["members"] = members  # a number or names, as the marker gives them: parse validates them
    if options.system != "chaosbed" or options.member is not None:
        foreign = {"system": options.system, **({"member": options.member} if options.member is not None else {})}
        raw["cluster"] = {"members": members, "transport": options.transport, **foreign}
        if options.stack != MARKER_DEFAULTS.stack or options.properties:
            usage_error(
                f"the chaosbed marker of {name}: stack and properties are chaosbed's own, not {options.system}'s"
            )
    try:
        sc = parse(raw)
    except ScenarioError as e:
        usage_error(f"the chaosbed marker of {name}: {e}")
    return spec_of(sc.system, sc.members, backend, stack=sc.stack, transport=sc.transport, properties=sc.properties,
                   seed=sc.seed)  # fmt: skip

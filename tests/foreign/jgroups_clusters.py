"""JGroups clusters for the tests, started through the one Cluster API (orchestration/systems/clusters.py), as
`chaosbed run`, `up`, `conform` and the benchmarks start them: every generation (jgroups-2.12, the jgroups-5-*
systems) the same way, on the process backend (loopback, no root) or netns. Helpers read a member's history and talk
to its control endpoint; `JGroupsClusters` (the fixture `jclusters`) takes every cluster down at the end of a test,
also on failure, and fails the test if a member process or a namespace of it remains."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from foreign import jgroups
from foreign.jgroups import jgroups5
from foreign.jgroups.releases import Release
from orchestration.cluster import Cluster, ClusterError
from orchestration.host.processes import alive
from orchestration.systems import SYSTEMS, System, unavailable
from orchestration.systems.clusters import new_cluster, spec_of
from orchestration.systems.jgroups5 import with_release
from tests.clusters import netns_skip_reason

NETNS_MISSING = netns_skip_reason()
# A matrix on real members (its runs on netns, its check on Spark): the marks of the side-by-side matrix tests
MATRIX_ON_NETNS = [
    pytest.mark.netns,
    pytest.mark.jgroups,
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.skipif(bool(NETNS_MISSING), reason=str(NETNS_MISSING)),
]


def run_matrix(matrix: Path, out: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """`chaosbed matrix MATRIX -j 2 --out OUT` as a user runs it: its process and its matrix.json (None if it wrote
    none)."""
    proc = subprocess.run(
        [sys.executable, "-m", "orchestration", "matrix", str(matrix), "-j", "2", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    doc = out / "matrix.json"
    return proc, json.loads(doc.read_text()) if doc.exists() else None


NETNS = pytest.param(
    "netns", id="netns", marks=[pytest.mark.netns, pytest.mark.skipif(bool(NETNS_MISSING), reason=str(NETNS_MISSING))]
)
BACKENDS = [pytest.param("process", id="process"), NETNS]
GENERATIONS = ("jgroups-2.12", "jgroups-5-udp")  # one system per member program


def system_missing(name: str) -> str | None:
    """What this machine lacks for the system (a JDK, the jar), or None."""
    return unavailable(SYSTEMS[name])


def skip_unless(name: str) -> pytest.MarkDecorator:
    why = system_missing(name)
    return pytest.mark.skipif(why is not None, reason=str(why))


def system(name: str, *, version: str | None = None, **config: object) -> System:
    """A named system, on another release, with more member config keys (record_messages)."""
    s = SYSTEMS[name]
    if version is not None:
        s = with_release(s, version)
    return dataclasses.replace(s, member_config=dict(config)) if config else s


def history_path(c: Cluster, name: str) -> Path:
    return Path(c.workdir) / "history" / f"{name}.jsonl"


def history(c: Cluster, name: str) -> list[dict[str, Any]]:
    """A member's events; a cut-off or malformed line (a killed member's last) is skipped."""
    try:
        data = history_path(c, name).read_bytes()
    except FileNotFoundError:
        return []
    out = []
    for raw in data.split(b"\n"):
        try:
            e = json.loads(raw)
        except ValueError:
            continue
        if isinstance(e, dict):
            out.append(e)
    return out


def events(c: Cluster, name: str, event: str, **match: Any) -> list[dict[str, Any]]:
    return [e for e in history(c, name) if e["event"] == event and all(e.get(k) == v for k, v in match.items())]


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """The first true value of condition, polled until the deadline (AssertionError naming `what` then)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.05)


def wait_view(c: Cluster, names: list[str], timeout: float = 30.0) -> dict[str, Any]:
    """Waits until the members `names` share one view of exactly them (the others may see something else)."""

    def agreed() -> dict[str, Any] | None:
        views = [c.control(n, "view")["view"] for n in names]
        first = views[0]
        if first is None or sorted(m.split("/")[0] for m in first["members"]) != sorted(names):
            return None
        return first if all(v == first for v in views) else None

    return wait_for(agreed, timeout, f"one view of {names}")


def wait_tasks(c: Cluster, name: str, timeout: float = 30.0) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        tasks = c.control(name, "tasks")["tasks"]
        return tasks if all(t["done"] for t in tasks.values()) else None

    return wait_for(done, timeout, f"the tasks of {name} to finish")


def raw(c: Cluster, name: str, *lines: bytes | dict[str, Any]) -> list[dict[str, Any]]:
    """Request lines sent as they are (no token added) on one control connection; the replies."""
    m = c.members[name]
    with c._connect(m, 10.0) as s:  # type: ignore[attr-defined]
        s.sendall(b"".join(x if isinstance(x, bytes) else json.dumps(x).encode() + b"\n" for x in lines))
        with s.makefile("rb") as f:
            return [json.loads(f.readline()) for _ in lines]


def request(c: Cluster, name: str, cmd: str, **args: Any) -> dict[str, Any]:
    """One command with the token, its reply whether ok or not (Cluster.control raises on ok: false)."""
    return raw(c, name, {"token": c.token, "cmd": cmd, **args})[0]  # type: ignore[attr-defined]


def namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


class JGroupsClusters:
    """Makes clusters of JGroups systems for one test and takes them all down at its end."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.made: list[Cluster] = []

    def make(self, sys: System | str, names: list[str], backend: str, *, stack: str | None = None) -> Cluster:
        s = SYSTEMS[sys] if isinstance(sys, str) else sys
        spec = spec_of(s, names, backend, stack=stack or s.stack)
        c = new_cluster(spec, workdir=self.tmp_path / f"c{len(self.made)}")
        self.made.append(c)
        return c

    def start(self, sys: System | str, names: list[str], backend: str, *, stack: str | None = None) -> Cluster:
        """Started (one member after the other: the first is the coordinator) and in one view."""
        c = self.make(sys, names, backend, stack=stack)
        c.start(timeout=60)
        c.wait_for_view(timeout=30)
        return c

    def close(self) -> None:
        for c in self.made:
            c.down()
        for c in self.made:
            left = [n for n, m in c.members.items() if m.pid is not None and alive(m.pid, c.label)]
            assert not left, f"members of {c.label} still running: {left}"
            assert not [ns for ns in namespaces() if ns.startswith(f"{c.label}-")], f"namespaces of {c.label} left"


def build_missing() -> str | None:
    """Builds both member programs (a no-op when up to date); what is missing otherwise."""
    try:
        if jgroups.missing() is None:
            jgroups.build()
        jgroups5.build()
    except (RuntimeError, ClusterError) as e:
        return str(e)
    return None


def release_here(version: str) -> bool:
    from foreign.jgroups.maven import verified

    return verified(Release.parse(version))

"""Real clusters in tests (tests/process, tests/netns, tests/analysis): the `make_cluster` fixture (each test's cluster
is torn down, and the test fails if anything of it remains), the process/netns backend parameter (the netns half
marked `netns` and skipped without root), and reading a member's history. A conftest.py takes the fixture with
`from tests.clusters import make_cluster`."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestration.backends import backend_class
from orchestration.backends.netns import list_namespaces
from orchestration.cluster import Cluster, ClusterSpec
from orchestration.host.processes import alive


@contextlib.contextmanager
def reaper_lock() -> Iterator[None]:
    """`chaosbed down --all` reaps the leftovers of every crashed run on the machine, other tests' included. Tests
    that run it hold this lock (across xdist workers), and a test that makes leftovers for its own `down --all` to
    reap holds it from before it makes them, so that no other test's reaper takes them first."""
    with open(Path(tempfile.gettempdir()) / "chaosbed-tests-reaper.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def down_all(env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`chaosbed down --all` in a process of its own (the state root is fixed at import: env's CHAOSBED_STATE), under
    the reaper lock."""
    with reaper_lock():
        return subprocess.run(
            [sys.executable, "-m", "orchestration.cli", "down", "--all"],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def netns_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    if shutil.which("ip") is None:
        return "needs the ip tool (iproute2)"
    return None


def chaos_skip_reason(*, nfqueue: bool = False) -> str | None:
    """Why the chaos tests cannot run here (None: they can): root and the ip tool for namespaces, nft and iptables
    for the kernel rules, and with `nfqueue` the chaos extra's NetfilterQueue (its presence says NFQUEUE was meant
    to be usable)."""
    reason = netns_skip_reason()
    if reason:
        return reason
    missing = [t for t in ("nft", "iptables", "iptables-restore") if shutil.which(t) is None]
    if missing:
        return f"needs {', '.join(missing)} (make setup installs them)"
    if nfqueue:
        try:
            import netfilterqueue  # noqa: F401
        except ImportError as e:
            return f"netfilterqueue does not import ({e}); install the chaos extra"
    return None


def skip_without_chaos(*, nfqueue: bool = False) -> pytest.MarkDecorator:
    """Skips a chaos test, saying why, where the chaos tests cannot run."""
    reason = chaos_skip_reason(nfqueue=nfqueue)
    return pytest.mark.skipif(reason is not None, reason=str(reason))


def chaos_tests(*, nfqueue: bool = False) -> list[pytest.MarkDecorator]:
    """The marks of a module of chaos tests: `netns`, skipped with the reason where they cannot run."""
    return [pytest.mark.netns, skip_without_chaos(nfqueue=nfqueue)]


BACKENDS = [
    pytest.param("process", id="process"),
    pytest.param(
        "netns",
        id="netns",
        marks=[pytest.mark.netns, pytest.mark.skipif(netns_skip_reason() is not None, reason=str(netns_skip_reason()))],
    ),
]


def assert_nothing_left(cluster: Cluster) -> None:
    leftovers = [ns for ns in list_namespaces() if ns.startswith(cluster.label)]
    assert not leftovers, f"namespaces left behind: {leftovers}"
    procs = [(n, m.pid) for n, m in cluster.members.items() if m.pid is not None and alive(m.pid, cluster.label)]
    assert not procs, f"member processes left behind: {procs}"
    assert not cluster.state_dir.exists(), f"state left behind: {cluster.state_dir}"


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator:
    made: list[Cluster] = []

    def make(backend: str, n: int = 3, **spec: object) -> Cluster:
        names = [chr(ord("A") + i) for i in range(n)]
        cluster = backend_class(backend)(
            ClusterSpec(members=names, backend=backend, **spec), workdir=tmp_path / f"run{len(made)}"
        )
        made.append(cluster)
        return cluster.start()

    yield make
    for cluster in made:
        cluster.down()
        assert_nothing_left(cluster)


def read_history(path: str) -> list[dict]:
    """A member's events; only the last line may be cut off (a member killed mid-write), and is skipped."""
    lines = Path(path).read_text().splitlines()
    events = [json.loads(line) for line in lines[:-1]]
    if lines:
        with contextlib.suppress(json.JSONDecodeError):
            events.append(json.loads(lines[-1]))
    return events


def clusters_under(folder: Path) -> list[str]:
    """The live clusters (their state folders) whose run folder is inside `folder`: what a test that ran clusters
    into its tmp_path left behind, whatever other tests running at the same time have up."""
    from orchestration.cluster import STATE_ROOT, list_clusters

    left = []
    for label in list_clusters():
        try:
            workdir = Path(json.loads((STATE_ROOT / label / "state.json").read_text())["workdir"])
        except (OSError, ValueError, KeyError):
            continue  # a cluster still starting (no state yet) or another kind: not one of ours at the end
        if workdir.resolve().is_relative_to(folder.resolve()):
            left.append(label)
    return left

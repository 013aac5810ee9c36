"""tests/foreign: foreign members (docs/scenario-format.md, "Foreign members"). The JGroups tests run the real JGroups
2.12 jar (marked `jgroups`; skipped with the reason when no JDK or jar is found) on loopback, and in network namespaces
too when root is there (that half marked `netns`)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from foreign import jgroups
from foreign.jgroups.launch import JGroupsCluster, netns_available

JGROUPS_MISSING = jgroups.missing()
NETNS_MISSING = netns_available()

skip_without_jgroups = pytest.mark.skipif(JGROUPS_MISSING is not None, reason=str(JGROUPS_MISSING))

MODES = [
    pytest.param("loopback", id="loopback"),
    pytest.param(
        "netns",
        id="netns",
        marks=[pytest.mark.netns, pytest.mark.skipif(NETNS_MISSING is not None, reason=str(NETNS_MISSING))],
    ),
]


@pytest.fixture(scope="session")
def jgroups_built() -> None:
    """The member is built (make jgroups) once per session."""
    if JGROUPS_MISSING is not None:
        pytest.skip(JGROUPS_MISSING)
    jgroups.build()


def _namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def assert_removed(cluster: JGroupsCluster) -> None:
    """Nothing of the cluster is left: no member process, no namespace."""
    running = [m.name for m in cluster.members.values() if m.running()]
    assert not running, f"members still running: {running}"
    if cluster.mode == "netns":
        left = [ns for ns in _namespaces() if ns.startswith(f"{cluster.label}-")]
        assert not left, f"namespaces left behind: {left}"


@pytest.fixture
def make_jgroups(jgroups_built: None) -> Iterator[type[JGroupsCluster]]:
    """A factory of JGroupsCluster objects: every cluster made is closed at the end of the test (also on failure),
    and the test fails if anything of it remains."""
    made: list[JGroupsCluster] = []

    def make(*args: object, **kwargs: object) -> JGroupsCluster:
        c = JGroupsCluster(*args, **kwargs)  # type: ignore[arg-type]
        made.append(c)
        return c

    yield make  # type: ignore[misc]
    for c in made:
        c.close()
    for c in made:
        assert_removed(c)

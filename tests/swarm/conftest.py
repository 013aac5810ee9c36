"""tests/swarm: the swarm backend on a Docker Swarm of two engines, each in a network namespace of its own, with a
chaos agent per engine (orchestration/host/local_swarm.py). The first test that needs it starts it and the last
xdist worker's session stops it (leases), leaving nothing behind; a swarm started with `chaosbed swarm up` is used
and left running. Marked `swarm` (and `slow`); skipped, saying why, where it cannot run (CI requires it)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestration.backends.swarm_hosts import SwarmDescription
from orchestration.host import local_swarm

BASE_TARBALL = Path("/var/cache/chaosbed/base-bookworm-minbase-python3.tar")


def swarm_skip_reason() -> str | None:
    if (why := local_swarm.problem()) is not None:
        return why
    if not BASE_TARBALL.exists() and shutil.which("debootstrap") is None:
        return "no base image tarball and no debootstrap to make one (make setup installs it)"
    return None


SKIP_REASON = swarm_skip_reason()
needs_swarm = [
    pytest.mark.swarm,
    pytest.mark.slow,
    pytest.mark.skipif(SKIP_REASON is not None, reason=f"no local swarm: {SKIP_REASON}"),
]


@pytest.fixture(scope="session")
def swarm() -> Iterator[SwarmDescription]:
    """The local swarm (two engines, an agent each) for the session."""
    with local_swarm.using(2) as desc:
        yield desc

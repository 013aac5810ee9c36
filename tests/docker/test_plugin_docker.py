"""The README's example test file (docs/examples/test_my_cluster.py) on the docker backend, under pytest-xdist, as
a user runs it: the plugin's chaos_cluster and history_check work on containers as on netns."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.docker.conftest import needs_docker
from tests.plugin.conftest import EXAMPLE, Inner, inner, warm_state  # noqa: F401 - fixtures

pytestmark = [*needs_docker, pytest.mark.spark]


def test_readme_example_passes_on_docker_under_xdist(docker_client: Any, inner: Inner) -> None:  # noqa: F811
    out = inner.run({"test_my_cluster.py": EXAMPLE}, "-n", "2", "--chaosbed-backend=docker")
    assert out.ret == 0, out.output
    assert re.search(r"\b2 passed\b", out.output), out.output

"""A docker run folder keeps what its members printed, as process and netns ones do (tests/process/test_member_logs.py):
each incarnation's container output (stdout and stderr, as the engine kept it) is written to the run folder's
logs/<name>.<incarnation>.log before the container is removed, by kill, restart and down alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.docker.conftest import needs_docker

pytestmark = needs_docker


def _ready_lines(log: Path) -> list[object]:
    return [json.loads(line)["ready"] for line in log.read_text().splitlines() if line.startswith('{"ready"')]


def test_kill_restart_and_down_keep_every_incarnations_output(docker_cluster: Any) -> None:
    cluster = docker_cluster(2, stack="unicast3")
    cluster.kill("B")  # B.1's container is removed here: its output is kept now
    cluster.restart("B")
    cluster.down()
    logs = cluster.workdir / "logs"
    assert sorted(p.name for p in logs.iterdir()) == ["A.1.log", "B.1.log", "B.2.log"]
    for name, log in (("A", "A.1.log"), ("B", "B.1.log"), ("B", "B.2.log")):
        assert _ready_lines(logs / log) == [name], (log, (logs / log).read_text()[-2000:])
    cluster.down()  # idempotent: a second teardown neither fails nor loses the kept logs
    assert sorted(p.name for p in logs.iterdir()) == ["A.1.log", "B.1.log", "B.2.log"]

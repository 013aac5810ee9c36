"""The docker backend: the Cluster API on containers, with the netns backend's faults (same chaos engine, inside
each container's network namespace), and the same verdicts as the simulator on the shipped scenarios."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from analysis.reference import check_path
from orchestration.runner import run
from orchestration.scenario import load
from tests.bug_catalogue import FOREIGN_BUG_FILES, assert_reproduced, bug_params, run_catalogue
from tests.clean_unicast2 import STACKS, assert_a_clean_unicast2_run_passes
from tests.clusters import reaper_lock
from tests.docker.conftest import leftovers, needs_docker

pytestmark = needs_docker
REPO = Path(__file__).resolve().parents[2]


def delivered(cluster: Any, name: str, kind: str) -> int:
    counters = cluster.control(name, "stats")["counters"]
    proto = "unicast3" if kind == "unicast" else "nakack2"
    return counters[proto]["msgs_delivered"]


def test_members_form_one_view_stream_and_survive_kill_pause_restart(docker_cluster: Any) -> None:
    cluster = docker_cluster(3, stack="unicast3+nakack2", properties={"gms": {"join_timeout": "1s"}})
    view = cluster.wait_for_view(["A", "B", "C"], timeout=60)
    assert view["view_id"].startswith("A|")
    # the member process, not docker-init: `status` shows its RSS and CPU
    pid = cluster.members["A"].pid
    assert b"node" in Path(f"/proc/{pid}/cmdline").read_bytes()

    cluster.control("A", "send", to="C", count=300, size=100)
    cluster.control("B", "multicast", count=300, size=100)
    cluster.wait_until(lambda: delivered(cluster, "C", "unicast") == 300, 30, "C delivers A's 300 unicasts")
    cluster.wait_until(lambda: delivered(cluster, "A", "multicast") == 300, 30, "A delivers B's 300 multicasts")

    cluster.pause("B")
    assert cluster.members["B"].paused and "B" in cluster.running()
    cluster.resume("B")
    cluster.kill("C")
    assert "C" not in cluster.running()
    cluster.restart("C")
    assert cluster.members["C"].incarnation == 2 and "C" in cluster.running()
    cluster.wait_for_view(["A", "B", "C"], timeout=60)
    history = [json.loads(line) for line in Path(cluster.members["C"].history).read_text().splitlines() if line]
    assert {e["incarnation"] for e in history if e["event"] == "start"} == {1, 2}


def test_faults_are_the_chaos_engines_rules_inside_the_containers(docker_cluster: Any) -> None:
    """A one-way partition: C stops hearing A (A's unicasts to C are dropped in C's namespace, by source), B still
    hears A; after the heal, C gets everything (UNICAST3 retransmits)."""
    cluster = docker_cluster(3, stack="unicast3")
    cluster.chaos.add("partition", {"from": ["A"], "to": ["C"], "one_way": True})
    cluster.control("A", "send", to="C", count=50, size=10)
    cluster.control("A", "send", to="B", count=50, size=10)
    cluster.wait_until(lambda: delivered(cluster, "B", "unicast") == 50, 30, "B delivers A's 50 unicasts")
    assert delivered(cluster, "C", "unicast") == 0
    blocked = cluster.chaos.kernel_counters()
    assert any(n for n in blocked.get("C", {}).values()), blocked
    cluster.chaos.heal()
    cluster.wait_until(lambda: delivered(cluster, "C", "unicast") == 50, 30, "C delivers A's 50 after the heal")


def test_down_removes_containers_network_and_namespaces(docker_client: Any, docker_cluster: Any) -> None:
    cluster = docker_cluster(2, stack="unicast3")
    assert leftovers(docker_client, cluster.label)
    cluster.down()
    assert leftovers(docker_client, cluster.label) == []
    cluster.down()  # idempotent


def verdict(out: Path, timed_out: bool) -> tuple[bool, set[str]]:
    (result,) = check_path(out).values()
    checks = {v.check for v in result.violations} | ({"timeout"} if timed_out else set())
    return not checks, checks


@pytest.mark.parametrize("name", ["one-way-split", "partition-heal"])
def test_same_verdict_on_sim_and_docker(name: str, docker_client: Any, tmp_path: Path) -> None:
    """The parity suite's docker column (tests/netns/test_parity.py holds sim and netns to the same verdicts)."""
    outcomes = {}
    for backend in ("sim", "docker"):
        sc = load(REPO / "scenarios" / f"{name}.toml")
        out = tmp_path / backend
        outcome = run(sc, backend, out)
        outcomes[backend] = verdict(out, outcome.timed_out)
        log = [json.loads(line) for line in (out / "faults.jsonl").read_text().splitlines()]
        assert log[0]["event"] == "start" and log[0]["backend"] == backend
        assert all("at" in e and "t" in e for e in log[1:]), log
    assert outcomes["sim"] == outcomes["docker"] == (True, set()), outcomes


def test_a_bug_of_the_catalogue_reproduces_on_docker(docker_client: Any, tmp_path: Path) -> None:
    """The flawed UNICAST2 variant (discard + close-connection at one instant, NFQUEUE rules in the container's
    namespace) violates what the catalogue says, the fixed one passes: the verdicts of netns and sim."""
    path = REPO / "scenarios" / "bugs" / "unicast2-reopen.toml"
    entries, result = run_catalogue("docker", tmp_path / "bugs", only=path)
    assert_reproduced(result, path, entries)


@pytest.mark.parametrize("path", bug_params([p for p in FOREIGN_BUG_FILES if p.name.startswith("jgroups-")]))
def test_a_real_jar_bug_reproduces_on_docker(path: Path, docker_client: Any, tmp_path: Path) -> None:
    """The real JGroups 2.12 jar's bugs (scenarios/bugs/jgroups-*.toml) in containers of the member image, the jar and
    the built member mounted: the flawed variant violates what its file names, the fixed one (UNICAST) passes."""
    entries, result = run_catalogue("docker", tmp_path / "bugs", only=path)
    assert_reproduced(result, path, entries)


CRASHING_RUN = """
import sys
from pathlib import Path
from orchestration.backends.docker import DockerCluster
from orchestration.cluster import ClusterSpec
spec = ClusterSpec(members=["A", "B"], backend="docker", stack="unicast3")
cluster = DockerCluster(spec, workdir=Path(sys.argv[1])).start()
print(cluster.label, flush=True)
sys.stdin.read()
"""


def test_down_all_reaps_a_crashed_runs_containers_and_nothing_else(
    docker_client: Any, docker_cluster: Any, tmp_path: Path
) -> None:
    live = docker_cluster(2, stack="unicast3")  # a running cluster of someone else: stays
    with reaper_lock():  # no other test's `down --all` may reap the crashed run first
        env = {**os.environ, "CHAOSBED_STATE": str(tmp_path / "crashed-state")}
        proc = subprocess.Popen(
            [sys.executable, "-c", CRASHING_RUN, str(tmp_path / "crashed")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        try:
            label = proc.stdout.readline().strip()  # type: ignore[union-attr]
        finally:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp_path / "crashed-state")  # the crashed run's state root is gone too
        unrelated = docker_client.containers.create(live._image, command=["true"], name=f"unrelated-{live.label}")
        try:
            assert leftovers(docker_client, label), "the crashed run left nothing to reap"
            down = subprocess.run(
                [str(Path(sys.executable).parent / "chaosbed"), "down", "--all"],
                env={**os.environ, "CHAOSBED_STATE": str(tmp_path / "another-root")},
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert down.returncode == 0, down.stderr
            assert leftovers(docker_client, label) == [], down.stdout
            assert f"docker cluster {label}" in down.stdout
            unrelated.reload()  # still there: no label of ours
            assert sorted(live.running()) == ["A", "B"] and leftovers(docker_client, live.label)
        finally:
            unrelated.remove(force=True)


def test_the_command_line_drives_a_docker_cluster(docker_client: Any, tmp_path: Path) -> None:
    """`chaosbed up --backend docker` as a user types it (histories under the relative runs/ folder), then status,
    a fault, down: every step exits 0 and nothing of the cluster is left."""
    env = {**os.environ, "CHAOSBED_STATE": str(tmp_path / "state"), "COLUMNS": "200"}
    chaosbed = str(Path(sys.executable).parent / "chaosbed")

    def run(*args: str) -> str:
        proc = subprocess.run([chaosbed, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, f"chaosbed {' '.join(args)}: {proc.stdout}{proc.stderr}"
        return proc.stdout

    up = run("up", "--backend", "docker", "-n", "2", "--stack", "unicast3+nakack2")
    label = up.split("cluster ", 1)[1].split()[0]
    assert "on the docker backend" in up and (tmp_path / "runs" / label / "history").is_dir()
    try:
        assert "running" in run("status")
        run("fault", "partition", "--from", "A", "--to", "B", "--one-way")
        run("fault", "heal")
    finally:
        run("down")
    assert leftovers(docker_client, label) == []


@pytest.mark.parametrize("stack", STACKS)
def test_a_clean_unicast2_run_with_default_properties_passes(stack: str, docker_client: Any, tmp_path: Path) -> None:
    """Quiet is what the checks need (every message delivered, nothing missing), not UNICAST2's lazy purge."""
    assert_a_clean_unicast2_run_passes(stack, "docker", tmp_path / "run")

"""Foreign members under Docker: the example system (examples/naive_rb) as the docker backend's members (in chaosbed's
member image with the working directory mounted), through a cluster's whole life and the example scenario; and
`chaosbed compose attach` on a compose project of plain containers (the Debian base image, not chaosbed's member
image) running the example: a partition between two of them measured by the kernel's rule counters, its heal, member
faults from the command line, status from outside, the check of their histories, and a detach that leaves no rule."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chaos import kernel
from orchestration.backends import attach
from orchestration.host import claims, docker_images
from tests.docker.conftest import needs_docker
from tests.docker.test_compose import compose_missing
from tests.foreign.example_lifecycle import FLAW, NAIVE_RB, counts, lifecycle, restarted_history, run_scenario, wait

pytestmark = [*needs_docker, pytest.mark.spark]
REPO = Path(__file__).resolve().parents[2]
CHAOSBED = str(Path(sys.executable).parent / "chaosbed")


@pytest.mark.chaosbed(system="naive-rb", member=NAIVE_RB, backend="docker")
def test_the_example_through_a_cluster_life(docker_client: Any, chaos_cluster: Any, history_check: Any) -> None:
    lifecycle(chaos_cluster, partition=True)
    with pytest.raises(pytest.fail.Exception):
        history_check(chaos_cluster)
    verdict = json.loads((Path(chaos_cluster.workdir) / "verdict.json").read_text())
    assert counts(verdict) == FLAW
    assert restarted_history(Path(chaos_cluster.workdir) / "history" / "C.jsonl") == [(1, "start"), (2, "start"),
                                                                                       (2, "stop")]  # fmt: skip


def test_the_example_scenario(docker_client: Any, tmp_path: Path) -> None:
    verdict = run_scenario("docker", tmp_path / "run")
    outcome = json.loads((tmp_path / "run" / "outcome.json").read_text())
    # the runner's warnings say whether the one-way cut ran off its planned window (a wall clock that moved)
    assert counts(verdict) == FLAW, (verdict["violations"][:3], outcome.get("warnings"))


def compose_file(tmp_path: Path, project: str, base: str, prefix: str, token: str) -> Path:
    """Three services a, b, c of the plain base image, each running the example member from a mounted folder with a
    config of its own, on a network with fixed addresses; histories to tmp_path/history."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "history").mkdir()
    peers = {n: [f"{prefix}.{11 + i}", 7800] for i, n in enumerate("abc")}
    services = {}
    for name, (ip, port) in peers.items():
        config = {"name": name, "address": name, "ip": ip, "port": port, "history": f"/history/{name}.jsonl",
                  "incarnation": 1, "cluster": project, "token": token, "peers": peers,
                  "mcast_group": "239.77.250.1", "mcast_port": 17800}  # fmt: skip
        (tmp_path / "configs" / f"{name}.json").write_text(json.dumps(config))
        services[name] = {
            "image": base,
            "init": True,
            "command": ["python3", "/example/member.py", f"/configs/{name}.json"],
            "environment": {"CHAOSBED_TOKEN": token},
            "volumes": [
                f"{REPO}/examples/naive_rb:/example:ro",
                f"{tmp_path}/configs:/configs:ro",
                f"{tmp_path}/history:/history",
            ],
            "networks": {"net": {"ipv4_address": ip}},
        }
    doc = {"name": project, "services": services,
           "networks": {"net": {"ipam": {"config": [{"subnet": f"{prefix}.0/24"}]}}}}  # fmt: skip
    path = tmp_path / "compose.json"  # JSON is YAML
    path.write_text(json.dumps(doc))
    return path


def no_rules(pid: int) -> bool:
    """No chaosbed table or chain in the network namespace of process pid."""
    enter = ["nsenter", f"--net=/proc/{pid}/ns/net"]
    nft = subprocess.run([*enter, "nft", "list", "table", "inet", kernel.NFT_TABLE], capture_output=True)
    ipt = subprocess.run([*enter, "iptables", "-S", kernel.IPT_CHAIN], capture_output=True)
    return nft.returncode != 0 and ipt.returncode != 0


@pytest.mark.skipif(compose_missing() is not None, reason=str(compose_missing()))
def test_compose_attach_on_plain_containers(docker_client: Any, tmp_path: Path) -> None:
    project, token = f"cbplain{secrets.token_hex(3)}", secrets.token_hex(8)
    label = f"cb{secrets.token_hex(3)}"
    index = claims.claim(label, "docker", 4 * 250, tmp_path)  # a subnet no other cluster of the machine uses
    prefix = f"10.{250 + index // 250}.{index % 250}"
    base = docker_images.base_image(docker_client)
    compose = ["docker", "compose", "-p", project, "-f", str(compose_file(tmp_path, project, base, prefix, token))]

    def chaosbed(*args: str, ok: bool = True) -> str:
        proc = subprocess.run([CHAOSBED, *args], capture_output=True, text=True, timeout=300, env=os.environ)
        assert not ok or proc.returncode == 0, f"chaosbed {' '.join(args)}: {proc.stdout}{proc.stderr}"
        return proc.stdout

    cluster_label = None
    try:
        subprocess.run([*compose, "up", "-d"], check=True, capture_output=True, timeout=300)
        out = chaosbed("compose", "attach", "--project", project)
        cluster_label = out.split("as cluster ", 1)[1].split(":", 1)[0].strip()
        assert "not chaosbed's members" in out and f"histories: {tmp_path / 'history'}" in out
        cluster: Any = attach(cluster_label)
        assert sorted(cluster.members) == ["a", "b", "c"] and cluster.spec.system["name"] == f"compose-{project}"
        wait(lambda: all(_pings(cluster, n) for n in "abc"), "the three members answer ping")
        plain_containers_under_faults(cluster, chaosbed)
        pids = {n: m.pid for n, m in cluster.members.items() if n != "c"}
        chaosbed("down", "--cluster", cluster_label)  # detach
        cluster_label = None
        assert all(no_rules(pid) for pid in pids.values())
        subprocess.run([*compose, "stop"], check=True, capture_output=True, timeout=120)  # each writes `stop`
        check = subprocess.run([CHAOSBED, "check", str(tmp_path)], capture_output=True, text=True, timeout=600)
        verdict = json.loads((tmp_path / "verdict.json").read_text())
        assert check.returncode == 1, check.stdout[-2000:] + check.stderr[-2000:]
        assert counts(verdict) == {"fifo": 10}  # a's ten unicasts to b in the partition: lost (naive-rb gives up)
        assert {(v["sender"], v["receiver"]) for v in verdict["violations"]} == {("a", "b")}
        assert verdict["stats"]["members"]["c"]["alive"] is False  # killed: faults.jsonl says so
    finally:
        if cluster_label is not None:
            subprocess.run([CHAOSBED, "down", "--cluster", cluster_label], capture_output=True, timeout=120)
        subprocess.run([*compose, "down", "-v", "-t", "5"], capture_output=True, timeout=120)
        claims.release(label)


def _pings(cluster: Any, name: str) -> bool:
    try:
        return bool(cluster.control(name, "ping", timeout=1.0).get("ok"))
    except Exception:  # not up yet
        return False


def plain_containers_under_faults(cluster: Any, chaosbed: Any) -> None:
    """A partition a <-> b while a sends to b (kernel counters at b count the drops), its heal (no rule left), a kill
    from the command line, and status from outside."""
    label = cluster.label
    chaosbed("send", "a", "b", "--count", "5", "--rate", "50", "--cluster", label)
    wait(lambda: _unacked(cluster) == 0, "a's first five acked")
    chaosbed("fault", "partition", "--from", "a", "--to", "b", "--cluster", label)
    chaosbed("send", "a", "b", "--count", "10", "--rate", "50", "--cluster", label)
    wait(lambda: _unacked(cluster) == 0, "a's ten given up (each sent twice, none acked)")
    blocked = kernel.counters(cluster.members["b"].netns)["blocked"]
    assert blocked >= 20, blocked  # ten datagrams and their retries, dropped at b
    chaosbed("fault", "heal", "--cluster", label)
    assert not kernel.counters(cluster.members["b"].netns).get("blocked")  # the rules are gone
    chaosbed("send", "a", "b", "--count", "10", "--rate", "50", "--cluster", label)
    wait(lambda: _unacked(cluster) == 0, "a's last ten acked")
    chaosbed("kill", "c", "--cluster", label)
    status = chaosbed("status", "--cluster", label)
    assert "not running" in status and "running" in status and "not known from outside" in status
    faults = [json.loads(x) for x in (Path(cluster.workdir) / "faults.jsonl").read_text().splitlines()]
    assert [(f["kind"], f.get("member")) for f in faults] == [("partition", None), ("heal", None), ("kill", "c")]


def _unacked(cluster: Any) -> int:
    return int(cluster.control("a", "stats")["counters"]["unacked"])


def test_a_system_with_an_image_of_its_own_conforms_on_docker(docker_client: Any, tmp_path: Path) -> None:
    """`image`: the member runs in the system's image (here the plain base image plus the example), no working
    directory mounted; `chaosbed conform --backend docker --image` tries it."""
    context = tmp_path / "image"
    context.mkdir()
    (context / "member.py").write_text((REPO / "examples" / "naive_rb" / "member.py").read_text())
    base = docker_images.base_image(docker_client)
    (context / "Dockerfile").write_text(f"FROM {base}\nCOPY member.py /opt/naive/member.py\n")
    tag = f"chaosbed-test-naive:{secrets.token_hex(3)}"
    docker_client.images.build(path=str(context), tag=tag, rm=True, pull=False)
    try:
        argv = ["conform", "--backend", "docker", "--image", tag, "--out", str(tmp_path / "out"), "--", "python3",
                "/opt/naive/member.py", "{config}"]  # fmt: skip
        proc = subprocess.run([CHAOSBED, *argv], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert "member.py conforms: 9 of 10 passed, 1 skipped" in proc.stdout
    finally:
        docker_client.images.remove(tag, force=True)


@pytest.mark.jgroups
@pytest.mark.parametrize("name", ["jgroups-5-udp", "jgroups-5-tcp", "jgroups-5-nakack4", "jgroups-5-tcp-noxmit"])
def test_the_jgroups5_systems_conform_on_docker(docker_client: Any, tmp_path: Path, name: str) -> None:
    """The 5.x member in containers of chaosbed's member image: the host's JDK, the release's jar (its folder in
    Maven's local repository) and the built classes mounted read-only; every item passes, the graceful leave too."""
    from orchestration.systems import SYSTEMS, unavailable
    from orchestration.systems.conform import ITEMS, Checklist

    if (why := unavailable(SYSTEMS[name])) is not None:
        pytest.skip(why)
    items = Checklist(SYSTEMS[name], "docker", tmp_path / "conform", ready=60.0).run()
    assert {i.key: i.ok for i in items} == dict.fromkeys(ITEMS, True), "\n".join(
        f"{i.key}: {i.ok} {i.reason}" for i in items
    )

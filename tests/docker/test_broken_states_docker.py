"""A docker cluster whose member container was removed from another shell (`docker rm -f`): every command that meets
it answers in one line, or does what it can, never with a traceback; `down` removes the rest
(tests/process/test_broken_states.py has the other broken states)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestration.backends.docker import LABEL
from orchestration.host import docker_listing
from tests.docker.conftest import leftovers, needs_docker
from tests.process.broken import Shell

pytestmark = needs_docker


def test_a_member_container_removed_from_another_shell(docker_client: Any, tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    up = shell("up", "--backend", "docker", "-n", "3", "--out", str(tmp_path / "run"))
    assert up.code == 0, up.out + up.err
    (label,) = shell.labels()
    mine = {"label": [f"{LABEL}={label}", "chaosbed.role=member"]}
    (b,) = [
        c
        for c in docker_listing.listed(docker_client, all=True, filters=mine)
        if c.labels.get("chaosbed.member") == "B"
    ]
    docker_client.api.remove_container(b.id, force=True)
    c = ("--cluster", label)
    commands: list[tuple[tuple[str, ...], tuple[int, ...]]] = [
        (("status", *c), (0,)),
        (("send", "A", "B", "--count", "3", *c), (0, 2)),
        (("send", "B", "A", *c), (2,)),
        (("kill", "B", *c), (2,)),
        (("pause", "B", *c), (2,)),
        (("restart", "B", *c), (0, 2)),
        (("fault", "partition", "--from", "A", "--to", "C", *c), (0,)),
        (("fault", "list", *c), (0,)),
        (("down", *c), (0,)),
    ]
    problems = []
    for args, codes in commands:
        problems += shell(*args).problems(codes)
    assert not problems, "\n".join(problems)
    assert not leftovers(docker_client, label), leftovers(docker_client, label)
    assert not shell.labels(), "down left the state"

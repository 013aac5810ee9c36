"""Containers that vanish while they are listed break no caller (orchestration/host/docker_listing.py).

On a real engine, the engine's list request is wrapped so that a listed container is removed right after the list
came back and before anything inspects it: exactly the race of a container going away while the docker SDK's
`containers.list()` inspected each one (`chaosbed down --all` ended in docker.errors.NotFound). Each test drives one
product caller through that race; on the SDK's listing each of them raised NotFound. A last test checks that no
product module lists containers any other way."""

from __future__ import annotations

import contextlib
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestration.agent import service
from orchestration.agent.host import Host
from orchestration.backends import compose_members
from orchestration.backends import docker as docker_backend
from orchestration.cluster import list_clusters
from orchestration.host import claims, docker_engine, docker_images, docker_listing
from tests.docker.conftest import needs_docker

REPO = Path(__file__).resolve().parents[2]
pytestmark = needs_docker


class Vanish:
    """Containers to remove the moment an engine list reports them, and the ids removed so."""

    def __init__(self) -> None:
        self.victims: list[Any] = []
        self.removed: list[str] = []

    def __call__(self, container: Any) -> None:
        self.victims.append(container)


@pytest.fixture
def image(docker_client: Any) -> str:
    return docker_images.member_image(docker_client, build_base=True)


@pytest.fixture
def made(docker_client: Any) -> Iterator[list[Any]]:
    """Containers a test creates, removed afterwards whatever happened."""
    import docker

    containers: list[Any] = []
    yield containers
    for c in containers:
        with contextlib.suppress(docker.errors.NotFound):  # gone already: the point of these tests
            c.remove(force=True)


@pytest.fixture
def vanish(monkeypatch: pytest.MonkeyPatch, docker_client: Any) -> Iterator[Vanish]:
    """`vanish(container)`: the next engine list that reports the container removes it before returning (and counts
    it in `removed`), so whatever inspects it next finds it gone."""
    import docker

    state = Vanish()
    real = docker.api.client.APIClient.containers

    def containers(self: Any, *args: Any, **kwargs: Any) -> Any:
        rows = real(self, *args, **kwargs)
        ids = {row["Id"] for row in rows}
        for victim in [v for v in state.victims if v.id in ids]:
            docker_client.api.remove_container(victim.id, force=True)
            state.victims.remove(victim)
            state.removed.append(victim.id)
        return rows

    monkeypatch.setattr(docker.api.client.APIClient, "containers", containers)
    yield state
    assert not state.victims, "a container meant to vanish was never listed: the test did not reach the race"


def _create(docker_client: Any, image: str, made: list[Any], labels: dict[str, str], *, run: bool = False, **kw: Any):
    if run:
        c = docker_client.containers.run(image, ["sleep", "120"], entrypoint=[], labels=labels, detach=True, **kw)
    else:
        c = docker_client.containers.create(image, ["true"], entrypoint=[], labels=labels, **kw)
    made.append(c)
    return c


def _exists(docker_client: Any, container: Any) -> bool:
    return any(e.id == container.id for e in docker_listing.listed(docker_client, all=True))


def test_the_listing_leaves_out_a_container_gone_before_its_inspect(
    docker_client: Any, image: str, made: list[Any], vanish: Any
) -> None:
    label = {"chaosbed.test-listing": secrets.token_hex(4)}
    keep, gone = (_create(docker_client, image, made, label) for _ in range(2))
    vanish(gone)
    mine = {"label": f"chaosbed.test-listing={label['chaosbed.test-listing']}"}
    found = docker_listing.containers(docker_client, all=True, filters=mine)
    assert [c.id for c in found] == [keep.id]
    assert vanish.removed == [gone.id]


def test_remove_containers_of_a_cluster(docker_client: Any, image: str, made: list[Any], vanish: Any) -> None:
    label = "cb" + secrets.token_hex(3)
    mine = {docker_backend.LABEL: label, "chaosbed.role": "member"}
    others = [_create(docker_client, image, made, mine) for _ in range(2)]
    gone = _create(docker_client, image, made, mine)
    vanish(gone)
    removed = docker_backend.remove_containers(docker_client, label)
    assert sorted(removed) == sorted(c.name for c in others)
    assert not any(_exists(docker_client, c) for c in others)


def test_down_all_reaps_orphans(docker_client: Any, image: str, made: list[Any], vanish: Any) -> None:
    label = "cb" + secrets.token_hex(3)
    orphan = _create(docker_client, image, made, {docker_backend.LABEL: label, "chaosbed.role": "sandbox"})
    gone = _create(docker_client, image, made, {docker_backend.LABEL: label, "chaosbed.role": "member"})
    vanish(gone)
    # every other cluster is kept: other tests' clusters run beside this one (a new one holds its claim first)
    listed = {e.labels.get(docker_backend.LABEL, "") for e in docker_listing.listed(docker_client, all=True)}
    keep = (listed | set(list_clusters()) | claims.held_labels()) - {label}
    assert docker_backend.reap_orphans(keep=keep) == [f"docker cluster {label}"]
    assert not _exists(docker_client, orphan)


def test_a_compose_projects_members(docker_client: Any, image: str, made: list[Any], vanish: Any) -> None:
    project = "cbtest" + secrets.token_hex(3)

    def service_labels(n: int) -> dict[str, str]:
        return {"com.docker.compose.project": project, "com.docker.compose.service": "member",
                "com.docker.compose.container-number": str(n)}  # fmt: skip

    first, second, third = (_create(docker_client, image, made, service_labels(n), run=True) for n in (1, 2, 3))
    vanish(second)
    assert compose_members.has_member_service(docker_client, project)
    vanish(third)
    found = compose_members.project_members(docker_client, project, "member")
    assert [(f.name, f.container.id) for f in found] == [("A", first.id)]


def test_the_engines_bookkeeping(docker_client: Any, image: str, made: list[Any], vanish: Any) -> None:
    mark = {"chaosbed.test-listing": secrets.token_hex(4)}
    mine = {"label": f"chaosbed.test-listing={mark['chaosbed.test-listing']}"}
    old, gone = (_create(docker_client, image, made, mark) for _ in range(2))
    vanish(gone)
    objects = docker_engine.engine_objects(docker_client)  # listed: the one gone meanwhile may still be named
    assert old.id in objects["containers"] and vanish.removed == [gone.id]
    assert objects["images"] and objects["networks"]
    new, also_gone = (_create(docker_client, image, made, mark) for _ in range(2))
    vanish(also_gone)
    # only this test's containers: other tests' run beside it
    docker_engine.remove_new_containers(docker_client, objects["containers"], filters=mine)
    assert _exists(docker_client, old) and not _exists(docker_client, new)


def test_the_agents_running_container(
    docker_client: Any, image: str, made: list[Any], vanish: Any, tmp_path: Path
) -> None:
    label = "cb" + secrets.token_hex(3)
    labels = {docker_backend.LABEL: label, "chaosbed.member": "A"}
    gone = _create(docker_client, image, made, labels, run=True)
    keep = _create(docker_client, image, made, labels, run=True)
    vanish(gone)
    host = Host("h1", tmp_path / "agent-state", "unix:///var/run/docker.sock")
    assert host._running_container(label, "A", timeout=10).id == keep.id


def test_the_agent_services_leftover_containers(docker_client: Any, image: str, made: list[Any], vanish: Any) -> None:
    name = "cbagent" + secrets.token_hex(3)
    keep, gone = (_create(docker_client, image, made, {service.AGENT_OF: name}) for _ in range(2))
    vanish(gone)
    assert keep.id[:12] in service.agent_containers([docker_client], name)  # the one gone may still be listed
    assert vanish.removed == [gone.id]


def test_no_product_module_lists_containers_through_the_sdk() -> None:
    """`containers.list(` inspects what it lists: docker_listing is the one way the product lists containers."""
    offenders = []
    for folder in ("orchestration", "foreign", "chaos", "analysis", "bench", "node"):
        for path in sorted((REPO / folder).rglob("*.py")):
            text = path.read_text()
            if path.name != "docker_listing.py" and re.search(r"containers\.list\(|\.api\.containers\(", text):
                offenders.append(str(path.relative_to(REPO)))
    assert not offenders, offenders

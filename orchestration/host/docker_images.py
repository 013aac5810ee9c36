"""The member image (compose/Dockerfile: a base image with python3, plus node/), built on demand and tagged by the
content of what goes into it, so a changed node/ gets a new image and an unchanged one is never rebuilt.

CHAOSBED_IMAGE names a ready-made member image instead. The base image: CHAOSBED_BASE_IMAGE if set; else the first
of chaosbed-base:bookworm (compose/base-image.sh, built without a registry) and python:3.12-slim that the engine
has; else python:3.12-slim pulled; else a clear error that names compose/base-image.sh.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from orchestration.host.docker_engine import DockerUnavailable

if TYPE_CHECKING:
    from docker import DockerClient

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = "compose/Dockerfile"
BASE_SCRIPT = REPO / "compose" / "base-image.sh"
LOCAL_BASE = "chaosbed-base:bookworm"
DEFAULT_BASE = "python:3.12-slim"
MEMBER_REPO = "chaosbed-member"
IMAGE_LABEL = "chaosbed.image"


def _has(client: DockerClient, ref: str) -> bool:
    import docker

    try:
        client.images.get(ref)
    except docker.errors.ImageNotFound:
        return False
    return True


def base_image(client: DockerClient, *, build: bool = False) -> str:
    """The base image to build on (see the module docstring). `build`: run compose/base-image.sh if no base is
    there and none can be pulled (root, debootstrap)."""
    import docker

    wanted = os.environ.get("CHAOSBED_BASE_IMAGE")
    if wanted:
        if not _has(client, wanted):
            raise DockerUnavailable(f"CHAOSBED_BASE_IMAGE={wanted}: the engine has no such image")
        return wanted
    for ref in (LOCAL_BASE, DEFAULT_BASE):
        if _has(client, ref):
            return ref
    try:
        client.images.pull(DEFAULT_BASE)
        return DEFAULT_BASE
    except docker.errors.DockerException as pull_error:
        if not build:
            raise DockerUnavailable(
                f"no base image for the member image: {DEFAULT_BASE} cannot be pulled ({pull_error}); "
                f"build one without a registry with {BASE_SCRIPT.relative_to(REPO)} (root, debootstrap)"
            ) from None
    proc = subprocess.run([str(BASE_SCRIPT), LOCAL_BASE], capture_output=True, text=True)
    if proc.returncode != 0:
        raise DockerUnavailable(f"{BASE_SCRIPT.name} failed:\n{proc.stderr.strip()[-1500:]}")
    return LOCAL_BASE


def fingerprint(base_id: str) -> str:
    """Hash of the Dockerfile, node/'s sources and the base image id: the member image's tag."""
    h = hashlib.sha256(base_id.encode())
    for path in [REPO / DOCKERFILE, *sorted((REPO / "node").rglob("*.py"))]:
        h.update(str(path.relative_to(REPO)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def member_image(client: DockerClient, *, build_base: bool = False) -> str:
    """The member image for this checkout, built if the engine does not have it yet; CHAOSBED_IMAGE names a
    ready-made one instead (it must run `python3 -m node CONFIG`)."""
    import docker

    ready = os.environ.get("CHAOSBED_IMAGE")
    if ready:
        if not _has(client, ready):
            raise DockerUnavailable(f"CHAOSBED_IMAGE={ready}: the engine has no such image")
        return ready
    base = base_image(client, build=build_base)
    tag = f"{MEMBER_REPO}:{fingerprint(client.images.get(base).id)}"
    if _has(client, tag):
        return tag
    try:
        client.images.build(
            path=str(REPO),
            dockerfile=DOCKERFILE,
            buildargs={"BASE_IMAGE": base},
            tag=tag,
            labels={IMAGE_LABEL: "member"},
            rm=True,
            forcerm=True,
            pull=False,
        )
    except docker.errors.BuildError as e:
        log = "".join(str(chunk.get("stream", chunk.get("error", ""))) for chunk in e.build_log)[-1500:]
        raise DockerUnavailable(f"building {tag} on {base} failed: {e.msg}\n{log}") from None
    return tag

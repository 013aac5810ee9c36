"""The swarm a `--backend swarm` cluster runs on, as a description file (`swarm.json`): the manager's Docker
endpoint, the member image, and every host with its swarm node id and its chaos agent's address. `chaosbed swarm up`
writes one for a swarm of Docker engines in network namespaces on this machine (orchestration/host/local_swarm.py);
for a swarm of real hosts, write it yourself (docs/beyond-one-machine.md) and point CHAOSBED_SWARM at it.

    {"manager": "unix:///var/run/docker.sock", "image": "chaosbed-member:abc123", "token_file": "/etc/chaosbed/token",
     "hosts": [{"name": "h1", "node_id": "...", "address": "192.0.2.11", "agent_port": 7790}, ...]}

A host may also name `netns`: the network namespace the orchestrator connects to its agent from (the local swarm's
engines live in namespaces of this machine). `label` is the local swarm's label, `local` what only it has.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from orchestration.cluster import STATE_ROOT, ClusterError

SWARM_ENV = "CHAOSBED_SWARM"
AGENT_PORT = 7790


class SwarmUnavailable(ClusterError):
    """No swarm to run on; the message says what is missing and what to do."""


@dataclass(frozen=True)
class SwarmHost:
    name: str
    node_id: str  # the swarm's node id: a member is placed with the constraint node.id==node_id
    address: str  # where its agent listens (and the engine's address in the swarm)
    agent_port: int = AGENT_PORT
    netns: str | None = None  # connect to the agent from inside this namespace (engines of this machine)


@dataclass(frozen=True)
class SwarmDescription:
    manager: str  # the Docker endpoint of a manager (unix:///..., tcp://...)
    image: str  # the member image, present on every host
    token_file: str  # the agents' token
    hosts: list[SwarmHost]
    label: str = ""  # a local swarm's label (its namespaces, claims and folders carry it)
    local: dict[str, object] = field(default_factory=dict)  # what `chaosbed swarm down` needs of a local swarm

    def token(self) -> str:
        try:
            return Path(self.token_file).read_text().strip()
        except OSError as e:
            raise SwarmUnavailable(f"the agents' token file {self.token_file}: {e}") from None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str, where: str) -> SwarmDescription:
        try:
            doc = json.loads(text)
            hosts = [SwarmHost(**h) for h in doc.pop("hosts")]
            desc = cls(hosts=hosts, **doc)
        except (ValueError, TypeError, KeyError) as e:
            raise SwarmUnavailable(f"{where}: not a swarm description ({type(e).__name__}: {e})") from None
        return desc


def swarm_dir() -> Path:
    """The local swarm of this state root (`chaosbed swarm up`)."""
    return STATE_ROOT / "swarm"


def description_path() -> Path:
    return Path(os.environ.get(SWARM_ENV) or swarm_dir() / "swarm.json")


def load_description() -> SwarmDescription:
    """The swarm to run on: $CHAOSBED_SWARM, else the local swarm of this state root."""
    path = description_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SwarmUnavailable(
            f"no swarm: {path} does not exist. Start one on this machine with `chaosbed swarm up` (root, dockerd), or "
            f"describe your swarm in a file and set {SWARM_ENV} to it (docs/beyond-one-machine.md)"
        ) from None
    except OSError as e:
        raise SwarmUnavailable(f"{path}: {e}") from None
    desc = SwarmDescription.from_json(text, str(path))
    if not desc.hosts or not desc.manager or not desc.image:
        raise SwarmUnavailable(f"{path}: a swarm description needs a manager, an image and at least one host")
    return desc

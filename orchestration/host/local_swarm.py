"""A Docker Swarm of several engines on this machine, for the swarm backend's tests and demos (`chaosbed swarm up`):
N engines, each in its own network namespace (swarm_engines.py), joined into one swarm over a bridge between the
namespaces (engine 1 is the manager), the member image in every engine, and a chaos agent per engine's host
(orchestration/agent/), deployed as a global service of the swarm (orchestration/agent/service.py): its task on
each engine starts the agent in the host's pid namespace and in that engine's network namespace. The description
of the swarm (swarm_hosts.py) goes to `$CHAOSBED_STATE/swarm/swarm.json`, where `--backend swarm` finds it.

Images: no registry is reachable here, so the member image is built in engine 1 from the checkout (on the base image
that compose/base-image.sh imports from its cached debootstrap tarball) and copied into the others with
`docker save | docker load`.

Everything is removed by `down()`, also after a failed `up()`: agents, engines (and their containers), namespaces,
cgroups, data roots, the state folder and the address claim. One local swarm per state root.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from orchestration.agent import service
from orchestration.agent.client import AgentClient
from orchestration.agent.service import NODE_HOSTNAME, AgentService
from orchestration.backends.swarm_hosts import AGENT_PORT, SwarmDescription, SwarmHost, swarm_dir
from orchestration.cluster import ClusterError, new_label
from orchestration.host import claims, docker_images, leases
from orchestration.host.filelock import locked
from orchestration.host.swarm_engines import (
    DATA_ROOT,
    Engine,
    EngineError,
    make_network,
    missing_tools,
    prepare_run_docker,
    release_run_docker,
    remove_network,
)

REPO = Path(__file__).resolve().parents[2]
AGENT_SERVICE = "chaosbed-agent"
SUBNETS = 250  # 10.90.<index>.0/24: the hosts' network


def problem() -> str | None:
    """Why a local swarm cannot be started here (None: it can)."""
    if os.geteuid() != 0:
        return "a local swarm needs root (network namespaces, dockerd)"
    if missing := missing_tools():
        return f"a local swarm needs {', '.join(missing)} (Debian: make setup installs docker.io; util-linux, iproute2)"
    try:
        import docker  # noqa: F401
    except ImportError:
        return "a local swarm needs the docker SDK: pip install 'chaosbed[docker]'"
    return None


def status() -> SwarmDescription | None:
    """The local swarm of this state root, if it is up (its description file, every engine answering)."""
    path = swarm_dir() / "swarm.json"
    if not path.exists():
        return None
    desc = SwarmDescription.from_json(path.read_text(), str(path))
    if not all(e.process() is not None for e in engines(desc)):
        return None
    return desc


def engines(desc: SwarmDescription) -> list[Engine]:
    return [Engine(**e) for e in desc.local.get("engines", [])]  # type: ignore[arg-type, attr-defined]


@contextlib.contextmanager
def using(n: int = 2) -> Iterator[SwarmDescription]:
    """The local swarm of this state root for the block, started if none runs (at least `n` engines), under a lease
    (orchestration/host/leases.py, so every pytest-xdist worker shares one swarm): the last lease given back stops a
    swarm that a lease started; a swarm started with `chaosbed swarm up` is never stopped here."""
    if (why := problem()) is not None:
        raise ClusterError(why)
    folder = swarm_dir()
    with locked(folder / "lock"):
        desc = status()
        if desc is not None and len(desc.hosts) < n:
            raise ClusterError(f"the local swarm {desc.label} has {len(desc.hosts)} engines, {n} are needed")
        if desc is None:
            if (folder / "swarm.json").exists():
                _down(folder)
            desc = _up(folder, n, None, on_demand=True)
        lease = leases.take(folder / "leases")
    try:
        yield desc
    finally:
        with locked(folder / "lock"):
            leases.give_back(lease)
            current = status()
            if current is not None and current.local.get("on_demand") and leases.live(folder / "leases") == 0:
                _down(folder)


def up(n: int = 2, *, on_step: object = None) -> tuple[SwarmDescription, bool]:
    """Starts a local swarm of `n` engines (or finds the running one); returns it and whether this call started it.
    ClusterError saying what failed; nothing of a failed start is left."""
    if (why := problem()) is not None:
        raise ClusterError(why)
    if not 1 <= n <= 5:
        raise ClusterError(f"a local swarm has 1 to 5 engines, not {n}")
    folder = swarm_dir()
    with locked(folder / "lock"):
        running = status()
        if running is not None:
            return running, False
        if (folder / "swarm.json").exists():  # a swarm whose engines died: clean up after it first
            _down(folder)
        return _up(folder, n, on_step), True


def _say(on_step: object, text: str) -> None:
    if callable(on_step):
        on_step(text)


def _up(folder: Path, n: int, on_step: object, *, on_demand: bool = False) -> SwarmDescription:
    label = new_label()
    state = folder / label
    state.mkdir(parents=True)
    index = claims.claim(label, "swarm-hosts", SUBNETS, state)
    token_file = state / "agent.token"
    token_file.write_text(secrets.token_hex(16))
    token_file.chmod(0o600)
    local: dict[str, object] = {"made_run_docker": prepare_run_docker(), "engines": [], "on_demand": on_demand}
    desc = SwarmDescription("", "", str(token_file), [], label, local)
    _write(folder, desc)  # from here on, down() finds what to remove
    try:
        _say(on_step, f"namespaces and a bridge for {n} engines")
        addresses = make_network(label, f"10.90.{index}", n)
        # each engine's folder is named as its host (its namespace and hostname): the agent service's paths are
        # templates on the node's hostname
        made = [Engine(label, i + 1, addresses[i], str(state / f"{label}-h{i + 1}")) for i in range(n)]
        local["engines"] = [e.to_json() for e in made]
        for i, e in enumerate(made):
            _say(on_step, f"dockerd in namespace {e.netns}")
            try:
                e.start()
            finally:
                local["engines"][i] = e.to_json()  # type: ignore[index]
                _write(folder, desc)
        _say(on_step, "swarm init and join")
        node_ids = _form_swarm(made)
        _say(on_step, "the member image (built in engine 1, docker save | docker load into the others)")
        image = _images(made)
        hosts = [SwarmHost(e.name, node_ids[i], e.address, AGENT_PORT, e.netns) for i, e in enumerate(made)]
        desc = SwarmDescription(made[0].socket, image, str(token_file), hosts, label, local)
        _say(on_step, "the chaos agents (a global service of the swarm)")
        local["agent_service"] = AGENT_SERVICE
        _write(folder, desc)
        deploy_agents(desc, agent_service(desc, AGENT_SERVICE, AGENT_PORT))
        _write(folder, desc)
    except BaseException:
        _down(folder)
        raise
    return desc


def agent_service(desc: SwarmDescription, name: str, port: int, node_id: str | None = None) -> AgentService:
    """The agent service of the local swarm: paths per engine, by the hostname the swarm expands on each node."""
    engine_folder = f"{swarm_dir() / desc.label}/{NODE_HOSTNAME}"
    return AgentService(name, desc.image, port, engine_socket=f"{engine_folder}/docker.sock",
                        state=f"{engine_folder}/{name}", python=sys.executable, node_id=node_id)  # fmt: skip


def deploy_agents(desc: SwarmDescription, spec: AgentService) -> dict[str, int]:
    """Deploys `spec` on the local swarm and waits for its agents (on every host, or on spec.node_id's); returns
    their pids by host."""
    hosts = [h for h in desc.hosts if spec.node_id in (None, h.node_id)]
    agents = [AgentClient.of(h, desc.token(), spec.port) for h in hosts]
    return service.start(engines(desc)[0].client(), spec, desc.token(), agents)


def remove_agents(desc: SwarmDescription, name: str) -> None:
    """Removes an agent service of the local swarm and waits until its agents are gone from every engine."""
    import docker

    clients = [e.client() for e in engines(desc) if e.process() is not None]
    if clients:
        try:
            service.remove(clients[0], name, clients)
        except docker.errors.DockerException as e:
            raise ClusterError(f"removing the agents' service {name}: {e}") from None


def _write(folder: Path, desc: SwarmDescription) -> None:
    tmp = folder / "swarm.json.tmp"
    tmp.write_text(desc.to_json())
    tmp.replace(folder / "swarm.json")


def _form_swarm(engines: list[Engine]) -> list[str]:
    """swarm init on engine 1, join of the others as workers; their node ids."""
    import docker

    manager = engines[0].client()
    try:
        manager.swarm.init(advertise_addr=engines[0].address, listen_addr=f"{engines[0].address}:2377")
        token = manager.swarm.attrs["JoinTokens"]["Worker"]
        for e in engines[1:]:
            e.client().swarm.join(remote_addrs=[f"{engines[0].address}:2377"], join_token=token,
                                  advertise_addr=e.address, listen_addr=f"{e.address}:2377")  # fmt: skip
        ids = [str(e.client().info()["Swarm"]["NodeID"]) for e in engines]
    except docker.errors.DockerException as e:
        raise EngineError(f"forming the swarm: {e}") from None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # every node ready in the manager's view
        nodes = {node.id: node.attrs["Status"]["State"] for node in manager.nodes.list()}
        if all(nodes.get(i) == "ready" for i in ids):
            return ids
        time.sleep(0.2)  # polling the manager with a deadline
    raise EngineError(f"the swarm's nodes did not all become ready within 60 s: {nodes}")


def _images(engines: list[Engine]) -> str:
    """The member image in engine 1 (built there from the checkout), copied into the others."""
    env = dict(os.environ, DOCKER_HOST=engines[0].socket)
    proc = subprocess.run([str(REPO / "compose" / "base-image.sh")], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise EngineError(f"compose/base-image.sh failed: {proc.stderr.strip()[-1500:]}")
    image = docker_images.member_image(engines[0].client())
    for e in engines[1:]:
        save = subprocess.Popen(["docker", "-H", engines[0].socket, "save", image], stdout=subprocess.PIPE)
        load = subprocess.run(["docker", "-H", e.socket, "load"], stdin=save.stdout, capture_output=True, text=True)
        assert save.stdout is not None
        save.stdout.close()
        if save.wait() != 0 or load.returncode != 0:
            raise EngineError(f"docker save {image} | docker load into {e.name}: {load.stderr.strip()}")
    return image


def down() -> bool:
    """Removes the local swarm of this state root (True if there was one)."""
    folder = swarm_dir()
    if not (folder / "swarm.json").exists():
        return False
    with locked(folder / "lock"):
        return _down(folder)


def _down(folder: Path) -> bool:
    path = folder / "swarm.json"
    try:
        desc = SwarmDescription.from_json(path.read_text(), str(path))
    except (OSError, ClusterError):
        path.unlink(missing_ok=True)
        return False
    problems = []
    if isinstance(name := desc.local.get("agent_service"), str):
        try:
            remove_agents(desc, name)
        except ClusterError as why:  # the engines are stopped anyway: their containers go with them
            problems.append(str(why))
    for e in reversed(engines(desc)):
        problems += e.stop()
    for d in (DATA_ROOT / desc.label, DATA_ROOT):
        with contextlib.suppress(OSError):
            d.rmdir()  # empty once every engine's data root is gone (DATA_ROOT: unless another swarm uses it)
    problems += remove_network(desc.label)
    release_run_docker(bool(desc.local.get("made_run_docker")))
    shutil.rmtree(folder / desc.label, ignore_errors=True)
    claims.release(desc.label)
    path.unlink(missing_ok=True)
    if problems:
        raise EngineError(f"the local swarm {desc.label} left: {', '.join(problems)}")
    return True

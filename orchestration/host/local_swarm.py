"""A Docker Swarm of several engines on this machine, for the swarm backend's tests and demos (`chaosbed swarm up`):
N engines, each in its own network namespace (swarm_engines.py), joined into one swarm over a bridge between the
namespaces (engine 1 is the manager), the member image in every engine, and a chaos agent per engine's host
(orchestration/agent/), in that host's network namespace. The description of the swarm (swarm_hosts.py) goes to
`$CHAOSBED_STATE/swarm/swarm.json`, where `--backend swarm` finds it.

Images: no registry is reachable here, so the member image is built in engine 1 from the checkout (on the base image
that compose/base-image.sh imports from its cached debootstrap tarball) and copied into the others with
`docker save | docker load`.

Everything is removed by `down()`, also after a failed `up()`: agents, engines (and their containers), namespaces,
cgroups, data roots, the state folder and the address claim. One local swarm per state root.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

from orchestration.backends.swarm_hosts import AGENT_PORT, SwarmDescription, SwarmHost, swarm_dir
from orchestration.cluster import ClusterError, new_label
from orchestration.host import claims, docker_images, leases
from orchestration.host.filelock import locked
from orchestration.host.leases import process_started
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
AGENT_START_TIMEOUT = 30.0
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
    agents: list[dict[str, object]] = []
    local: dict[str, object] = {"made_run_docker": prepare_run_docker(), "engines": [], "agents": agents,
                                "on_demand": on_demand}  # fmt: skip
    desc = SwarmDescription("", "", str(token_file), [], label, local)
    _write(folder, desc)  # from here on, down() finds what to remove
    try:
        _say(on_step, f"namespaces and a bridge for {n} engines")
        addresses = make_network(label, f"10.90.{index}", n)
        made = [Engine(label, i + 1, addresses[i], str(state / f"h{i + 1}")) for i in range(n)]
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
        for e in made:
            _say(on_step, f"the chaos agent of {e.name}")
            agents.append(start_agent(e, state / f"{e.name}-agent", token_file))
            _write(folder, desc)
    except BaseException:
        _down(folder)
        raise
    return desc


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


def start_agent(
    e: Engine, state: Path, token_file: Path, port: int = AGENT_PORT, log: Path | None = None
) -> dict[str, object]:
    """A chaos agent of engine e's host, in its network namespace, serving on `port` with its files in `state`;
    waits for its ready line. Returns its pid and start time (what `down` stops it by)."""
    log = log or Path(e.folder) / "agent.log"
    cmd = ["nsenter", f"--net=/run/netns/{e.netns}", sys.executable, "-m", "orchestration.agent",
           "--listen", f"{e.address}:{port}", "--token-file", str(token_file), "--docker", e.socket,
           "--state", str(state), "--name", e.name]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=REPO, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + AGENT_START_TIMEOUT
    while time.monotonic() < deadline and proc.poll() is None:
        for line in log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                if json.loads(line).get("ready"):
                    return {"host": e.name, "pid": proc.pid, "started": process_started(proc.pid)}
        time.sleep(0.05)  # polling the agent's log for its ready line, with a deadline
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    raise EngineError(f"the chaos agent of {e.name} did not start: {log.read_text(errors='replace')[-1500:]}")


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
    for agent in desc.local.get("agents", []):  # type: ignore[attr-defined]
        stop_agent(agent)
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


def stop_agent(agent: dict[str, object]) -> None:
    """SIGTERM to an agent we started (pid and start time checked): it heals its clusters and exits."""
    pid, started = agent.get("pid"), agent.get("started")
    if not isinstance(pid, int) or process_started(pid) != started:
        return
    with contextlib.suppress(psutil.NoSuchProcess):
        proc = psutil.Process(pid)
        proc.terminate()
        try:
            proc.wait(15)
        except psutil.TimeoutExpired:
            proc.kill()
            proc.wait(5)

"""The task of the chaos agents' global swarm service (service.py): starts this host's agent as a container in the
host's pid and network namespaces with the capabilities it needs, forwards its output, and stops it with the task.

Why a launcher: a swarm service can be neither privileged nor in the host's pid namespace (moby/moby#24862, and no
`pid` option for services), but its task may talk to its own engine. So the service's task, one per host (mode
global), runs this script with the engine's socket mounted, and it starts the agent with `docker run`'s options a
service lacks:

    --pid host --network host --cap-add SYS_ADMIN --cap-add NET_ADMIN --cap-add SYS_PTRACE -v /:/host
    chroot /host PYTHON -m orchestration.agent --listen NODE_ADDR:PORT --exit-with LAUNCHER_PID ...

- host pid namespace: the member containers' pids the engine reports are the agent's own pids (it enters their
  network namespaces by /proc/<pid>/ns/net, and the NFQUEUE handlers it starts are processes of the host);
- the host's network namespace (the engine's: in the local test swarm each engine lives in a namespace of its own),
  where the agent listens on the swarm node's address;
- `chroot /host`: the host's own chaosbed, python, iptables, nft and ip, whose versions match the host's kernel (a
  classic trap of agents that bring their own iptables); a tmpfs of its own over /run/netns, where it attaches the
  member containers' namespaces by name;
- capabilities, not --privileged: what the agent does needs these three; --privileged asks for every capability
  and fails where the engine's bounding set lacks one (this machine has no CAP_SYS_RESOURCE).

The agent reads its token from the launcher's swarm secret (/proc/<launcher pid>/root/run/secrets/...) and ends
itself when the launcher ends (--exit-with): a launcher killed outright leaves no agent behind. When the agent ends
on its own, the launcher exits 1 and the swarm restarts the task; the new agent heals what the old one left
(host.py recover).

Standard library only: the task's image is the member image (python3, coreutils), with this checkout mounted at
/chaosbed. Configured by environment (service.py sets it; `{{.Node.Hostname}}` is expanded by the swarm):
CHAOSBED_AGENT_PORT, _STATE, _DOCKER (the engine's socket as the agent sees it, on the host), _PYTHON, _REPO,
_TASK (the task's id), _SERVICE, _SECRET (the token's file name under /run/secrets).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse
from typing import Any

SOCKET = "/var/run/docker.sock"
CAPS = ["SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE"]
STOP_TIMEOUT = 20  # s: the agent heals and detaches every cluster when it stops
OWN_CONTAINER_TIMEOUT = 30.0  # s: the engine marks our container running soon after it started it
AGENT_OF = "chaosbed.agent-of"  # the label of an agent container: its service
# the agent's namespace names (`ip netns attach`) in a /run/netns of its own: the host's `ip netns` (and `chaosbed
# down --all` there) never sees them half-alive, and none is left on the host when the agent dies
PRIVATE_NETNS = 'mkdir -p /run/netns && mount -t tmpfs -o mode=0755 chaosbed-agent /run/netns && exec "$0" "$@"'


class Engine:
    """Requests to this host's Docker engine over its unix socket."""

    def __init__(self, path: str = SOCKET) -> None:
        self.path = path

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        conn = http.client.HTTPConnection("localhost", timeout=timeout)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(self.path)
        conn.sock = sock
        return conn

    def call(self, method: str, path: str, body: object = None, timeout: float | None = 60.0) -> tuple[int, Any]:
        conn = self._connection(timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            raw = resp.read()
            return resp.status, json.loads(raw) if raw.strip() else None
        finally:
            conn.close()

    def ok(self, method: str, path: str, body: object = None, timeout: float | None = 60.0) -> Any:
        status, doc = self.call(method, path, body, timeout)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status} {doc}")
        return doc

    def stream(self, path: str) -> http.client.HTTPResponse:
        conn = self._connection(None)
        conn.request("GET", path)
        return conn.getresponse()


def agent_container(env: dict[str, str], node_addr: str, launcher_pid: int, image: str) -> dict[str, object]:
    """The agent container's create request."""
    secret = f"/proc/{launcher_pid}/root/run/secrets/{env['CHAOSBED_AGENT_SECRET']}"
    cmd = [
        "chroot", "/host", "sh", "-c", PRIVATE_NETNS, env["CHAOSBED_AGENT_PYTHON"], "-m", "orchestration.agent",
        "--listen", f"{node_addr}:{env['CHAOSBED_AGENT_PORT']}", "--token-file", secret,
        "--docker", env["CHAOSBED_AGENT_DOCKER"], "--state", env["CHAOSBED_AGENT_STATE"],
        "--name", env["CHAOSBED_AGENT_NAME"], "--exit-with", str(launcher_pid),
    ]  # fmt: skip
    return {
        "Image": image,
        "Entrypoint": cmd[:1],
        "Cmd": cmd[1:],
        "Env": [f"PYTHONPATH={env['CHAOSBED_AGENT_REPO']}", "PYTHONUNBUFFERED=1"],
        "Labels": {AGENT_OF: env["CHAOSBED_AGENT_SERVICE"]},
        "StopSignal": "SIGTERM",
        "StopTimeout": STOP_TIMEOUT,
        "HostConfig": {
            "PidMode": "host",
            "NetworkMode": "host",
            "CapAdd": CAPS,
            "Binds": ["/:/host"],
            "AutoRemove": True,
        },
    }


def _filters(**kw: str) -> str:
    return urllib.parse.quote(json.dumps({k: [v] for k, v in kw.items()}))


def own_container(engine: Engine, task: str, timeout: float = OWN_CONTAINER_TIMEOUT) -> dict[str, Any]:
    """This task's container (by the swarm's task label), inspected once the engine has it running with its pid.
    The launcher can run before that: the engine records the container as running after its process started (seen
    under load: a listing of running containers without it), so it is looked up among all and waited for."""
    deadline = time.monotonic() + timeout
    query = f"/containers/json?all=1&filters={_filters(label=f'com.docker.swarm.task.id={task}')}"
    while True:
        found = engine.ok("GET", query)
        if found:
            me: dict[str, Any] = engine.ok("GET", f"/containers/{found[0]['Id']}/json")
            if me["State"].get("Running") and me["State"].get("Pid"):
                return me
        if time.monotonic() > deadline:
            state = me["State"] if found else "not listed"
            raise RuntimeError(f"no running container of task {task} on this engine within {timeout:g} s ({state})")
        time.sleep(0.1)  # polling the engine for our own container's state, with a deadline


def remove_leftovers(engine: Engine, service: str) -> None:
    """Stops and removes agent containers of this service that an earlier task left (it was killed outright and its
    agent has not ended yet): one agent per host and port."""
    for c in engine.ok("GET", f"/containers/json?all=1&filters={_filters(label=f'{AGENT_OF}={service}')}"):
        engine.call("POST", f"/containers/{c['Id']}/stop?t={STOP_TIMEOUT}", timeout=STOP_TIMEOUT + 30)
        engine.call("DELETE", f"/containers/{c['Id']}?force=1")


def forward(engine: Engine, cid: str) -> None:
    """Copies the agent's output to ours until it ends (the engine's multiplexed stream: 8-byte frame headers)."""
    resp = engine.stream(f"/containers/{cid}/logs?follow=1&stdout=1&stderr=1")
    out = {1: sys.stdout.buffer, 2: sys.stderr.buffer}
    while True:
        header = resp.read(8)
        if len(header) < 8:
            return
        size = int.from_bytes(header[4:8], "big")
        data = resp.read(size)
        target = out.get(header[0], sys.stdout.buffer)
        target.write(data)
        target.flush()


def main() -> int:
    env = dict(os.environ)
    engine = Engine()
    info = engine.ok("GET", "/info")
    node_addr = str(info.get("Swarm", {}).get("NodeAddr") or "")
    if not node_addr:
        print("launcher: this engine is not a swarm node", file=sys.stderr)
        return 2
    me = own_container(engine, env["CHAOSBED_AGENT_TASK"])
    service = env["CHAOSBED_AGENT_SERVICE"]
    remove_leftovers(engine, service)
    body = agent_container(env, node_addr, int(me["State"]["Pid"]), str(me["Image"]))
    name = f"{service}.agent.{env['CHAOSBED_AGENT_TASK'][:12]}"
    cid = engine.ok("POST", f"/containers/create?name={name}", body)["Id"]
    stopping = threading.Event()

    def stop(signum: int, frame: object) -> None:
        stopping.set()
        engine.call("POST", f"/containers/{cid}/stop?t={STOP_TIMEOUT}", timeout=STOP_TIMEOUT + 30)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    engine.ok("POST", f"/containers/{cid}/start")
    print(json.dumps({"launcher": service, "agent_container": cid[:12], "node": node_addr, "t": time.time()}),
          flush=True)  # fmt: skip
    forward(engine, cid)
    return 0 if stopping.is_set() else 1  # an agent that ended on its own: the swarm starts a new task


if __name__ == "__main__":
    sys.exit(main())

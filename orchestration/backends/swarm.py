"""Members as Docker Swarm services on the hosts of a swarm, on an overlay network, with the netns faults installed
by a chaos agent on each host (orchestration/agent/).

Layout for cluster label L on a swarm (orchestration/backends/swarm_hosts.py: its manager, image, hosts, agents):
- an attachable overlay network L (subnet 10.(91+i/250).(i%250).0/24 from the machine-wide claims; on a swarm of
  real hosts the claim only keeps this machine's clusters apart);
- per member M a service L-M: one task, pinned to its host (constraint node.id==...; members are spread over the
  hosts in turn: A on the first, B on the second, ...), restart policy none (a killed member stays dead until
  `restart`), DNS round robin (its name resolves to its task's address), `python3 -m node.container` configured from
  its environment: its name, every member's service name (CHAOSBED_PEERS), stack, properties, the control token,
  CHAOSBED_IP_MCAST=false, and /history bind-mounted from its host's agent folder.

Multicast does not cross an overlay network: the UDP transport sends a group message as a unicast to every peer
(node/runtime.py `ip_mcast`, as JGroups' UDP with ip_mcast=false); the TCP transport sends one per peer anyway. So
every stack works, discovery included (GMS FIND goes to every peer named in CHAOSBED_PEERS).

The orchestrator reaches only the agents: control requests, kills, pauses and the histories go through the agent of
the member's host. Every agent holds a lease on the cluster, renewed every few seconds by the orchestrator; when it
runs out (the orchestrator died, or lost the host), the agent heals the cluster's faults on its host. A lost host is
reported (stderr, and the next fault operation fails naming it). The histories are collected from every host when
the members stop and when the cluster goes down, shifted onto the orchestrator's clock where a host's differs.

kill = SIGKILL to the member's container, pause = docker pause, restart = a new task of the service (a new
incarnation, on the same host; it may get another address: the others look its name up again every second, and the
faults are re-rendered with it).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, cast

from orchestration.agent.client import AgentClient, HostClock
from orchestration.backends.swarm_faults import SwarmFaultTable
from orchestration.backends.swarm_hosts import SwarmDescription, SwarmUnavailable, load_description
from orchestration.cluster import Cluster, ClusterError, ClusterSpec, ControlReply, MemberInfo, RealClock
from orchestration.host import claims

if TYPE_CHECKING:
    from docker import DockerClient

DATA_PORT = 7800
LABEL = "chaosbed.cluster"  # docker label of everything a cluster creates (as on the docker backend)
LEASE_ENV = "CHAOSBED_SWARM_LEASE"  # seconds
# an agent heals the cluster's faults on its host when the orchestrator is silent this long
LEASE_S = float(os.environ.get(LEASE_ENV, "15"))
RENEW_S = min(2.0, LEASE_S / 4)
START_TIMEOUT = 120.0  # services scheduled, images present, containers started
STOP_TIMEOUT = 20.0  # a member's exit after SIGTERM (it writes its `stop` event), on a busy engine


class SwarmCluster(Cluster):
    backend_name = "swarm"

    def __init__(self, spec: ClusterSpec, *, label: str | None = None, workdir: Path | None = None) -> None:
        super().__init__(spec, label=label, workdir=workdir)
        self.workdir = self.workdir.resolve()
        self.clock = RealClock()
        self.token = secrets.token_hex(8)
        self.placement: dict[str, str] = {}  # member -> host name
        self.clocks: dict[str, HostClock] = {}
        self.history_dirs: dict[str, str] = {}  # host -> the members' history folder there
        self.lost: dict[str, str] = {}  # host -> why the orchestrator lost it
        self._desc: SwarmDescription | None = None
        self._agents: dict[str, AgentClient] = {}
        self._client: DockerClient | None = None
        self._leaving: set[str] = set()
        self._renewing = threading.Event()
        self._down = False

    # --- the swarm ------------------------------------------------------------------------------------------------

    @property
    def desc(self) -> SwarmDescription:
        if self._desc is None:
            self._desc = load_description()
        return self._desc

    @property
    def agents(self) -> dict[str, AgentClient]:
        if not self._agents:
            token = self.desc.token()
            hosts = self.desc.hosts
            self._agents = {h.name: AgentClient.of(h, token) for h in hosts}
        return self._agents

    @property
    def docker(self) -> DockerClient:
        if self._client is None:
            import docker

            try:
                self._client = docker.DockerClient(base_url=self.desc.manager, timeout=60)
                self._client.ping()
            except docker.errors.DockerException as e:
                raise SwarmUnavailable(f"the swarm's manager at {self.desc.manager} does not answer: {e}") from None
        return self._client

    def agent_of(self, name: str) -> AgentClient:
        host = self.placement.get(name)
        if host is None:
            raise ClusterError(f"member {name} is not placed on any host")
        return self.agents[host]

    def host_clocks(self) -> dict[str, dict[str, object]] | None:
        """Each host's clock against the orchestrator's (faults.jsonl's start line records them)."""
        return {h: c.to_json() for h, c in sorted(self.clocks.items())}

    # --- lifecycle ------------------------------------------------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT) -> SwarmCluster:
        if any(h.netns for h in self.desc.hosts) and os.geteuid() != 0:
            raise ClusterError("this swarm's agents live in network namespaces of this machine: run as root")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "history").mkdir(parents=True, exist_ok=True)
        try:
            import docker

            try:
                self._start(max(timeout, START_TIMEOUT))
            except docker.errors.DockerException as e:
                raise ClusterError(f"the swarm's manager refused: {e}") from None
        except BaseException:
            self.down()
            raise
        return self

    def _start(self, timeout: float) -> None:
        index = claims.claim(self.label, "swarm", 4 * 250, self.state_dir)
        self._subnet = f"10.{91 + index // 250}.{index % 250}.0/24"
        for host, agent in self.agents.items():
            self.clocks[host] = agent.clock()
            self.history_dirs[host] = str(agent.request("prepare", cluster=self.label, lease_s=LEASE_S)["history_dir"])
        self._renew_leases()
        hosts = [h.name for h in self.desc.hosts]
        self.placement = {m: hosts[i % len(hosts)] for i, m in enumerate(self.spec.members)}
        self.members = {m: MemberInfo(m, "", DATA_PORT) for m in self.spec.members}
        self._save_state()
        self._create_network()
        for m in self.spec.members:
            self._create_service(m)
        self._save_state()
        deadline = time.monotonic() + timeout
        for host in hosts:
            here = [m for m in self.spec.members if self.placement[m] == host]
            if here:
                self._attach(host, here, deadline)
        self._save_state()
        for m in self.spec.members:
            self.wait_ready(m, max(1.0, deadline - time.monotonic()))
        self._save_state()

    def _create_network(self) -> None:
        import docker

        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=self._subnet)])
        self.docker.networks.create(self.label, driver="overlay", attachable=True, ipam=ipam,
                                    labels={LABEL: self.label})  # fmt: skip

    def _create_service(self, m: str) -> None:
        import docker
        from docker.types import EndpointSpec, Mount, NetworkAttachmentConfig, RestartPolicy

        node = next(h.node_id for h in self.desc.hosts if h.name == self.placement[m])
        self.docker.services.create(
            self.desc.image,
            name=f"{self.label}-{m}",
            env=self._member_env(m),
            mounts=[Mount("/history", self.history_dirs[self.placement[m]], type="bind")],
            networks=[NetworkAttachmentConfig(self.label)],
            constraints=[f"node.id=={node}"],
            restart_policy=RestartPolicy(condition="none"),
            endpoint_spec=EndpointSpec(mode="dnsrr"),
            labels={LABEL: self.label},
            container_labels={LABEL: self.label, "chaosbed.role": "member", "chaosbed.member": m},
            stop_grace_period=10 * 10**9,
            init=True,
        )
        _ = docker  # the SDK's types come with it

    def _member_env(self, m: str) -> list[str]:
        props = []
        for proto, values in self.spec.properties.items():
            for key, value in values.items():
                text = str(value).lower() if isinstance(value, bool) else str(value)
                if "," in text or "=" in text:
                    raise ClusterError(f"property {proto}.{key}={text!r}: the swarm backend passes no ',' or '='")
                props.append(f"{proto}.{key}={text}")
        peers = ",".join(f"{n}={self.label}-{n}" for n in self.spec.members)
        return [f"CHAOSBED_NAME={m}", f"CHAOSBED_PEERS={peers}", f"CHAOSBED_TOKEN={self.token}",
                f"CHAOSBED_STACK={self.spec.stack}", f"CHAOSBED_TRANSPORT={self.spec.transport}",
                f"CHAOSBED_PROPERTIES={','.join(props)}", f"CHAOSBED_CLUSTER={self.label}",
                f"CHAOSBED_PORT={DATA_PORT}", "CHAOSBED_HISTORY_DIR=/history", "CHAOSBED_IP_MCAST=false"]  # fmt: skip

    def _attach(self, host: str, names: list[str], deadline: float) -> None:
        """The host's agent attaches its members' namespaces (it waits for their containers); their addresses."""
        timeout = max(5.0, deadline - time.monotonic())
        reply = self.agents[host].request("attach", cluster=self.label, members=names,
                                          transport=self.spec.transport, timeout=timeout)  # fmt: skip
        for name, found in reply["members"].items():
            m = self.members[name]
            m.ip, m.pid, m.paused = str(found["ip"]), int(found["pid"]), False
            # a member on this machine's kernel (the local swarm's engines): its namespace, by its process, for
            # whoever here wants to enter it (probes); the agents' names for it are their own
            m.netns = f"/proc/{m.pid}/ns/net" if self.clocks[host].same_clock else None

    def wait_ready(self, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if self.control(name, "ping", timeout=2.0).get("ok"):
                    return
            except ClusterError as e:
                last = e
            time.sleep(0.1)  # polling the member's control endpoint with a deadline
        raise ClusterError(f"member {name} did not answer within {timeout:g}s: {last}")

    def down(self) -> None:
        """Stops the members (they write their `stop` events), collects the histories, removes the services and
        the network, and releases the cluster on every host (its faults healed, its namespaces detached).
        Idempotent; a lost host is reported, not fatal (its lease heals it)."""
        self._renewing.set()
        if self._down:
            return
        self._down = True
        problems: list[str] = []
        if self.members:
            self._term_all(self.running())
            problems += self.collect_histories()
        with contextlib.suppress(SwarmUnavailable, ClusterError):
            remove_services(self.docker, self.label)
        for agent in self.agents.values() if self.placement else []:
            try:
                agent.request("release", cluster=self.label, remove_files=True)
            except ClusterError as e:
                if "no cluster" not in str(e):
                    problems.append(str(e))
        claims.release(self.label)
        shutil.rmtree(self.state_dir, ignore_errors=True)
        if problems:
            print(f"chaosbed: swarm cluster {self.label}: {'; '.join(problems)}", file=sys.stderr)

    # --- leases -----------------------------------------------------------------------------------------------------

    def _renew_leases(self) -> None:
        """Renews the cluster's lease on every host every RENEW_S seconds while this process holds the cluster (a
        thread per host: a host that does not answer delays no other). A host whose agent has not answered for
        half a lease, or whose lease ran out, is lost: reported on stderr and in `lost` (the next fault operation on
        it fails naming it)."""

        def renew(host: str, agent: AgentClient) -> None:
            answered = time.monotonic()
            while not self._renewing.wait(RENEW_S):
                why = ""
                try:
                    if agent.request("lease", cluster=self.label, timeout=RENEW_S)["expired_at"]:
                        why = f"host {host}: the lease ran out and its agent healed the cluster's faults there"
                    answered = time.monotonic()
                except ClusterError as e:
                    if time.monotonic() - answered > LEASE_S / 2:
                        why = f"{e}; its faults heal when its lease of {LEASE_S:g} s runs out"
                if why and host not in self.lost:
                    self.lost[host] = why
                    print(f"chaosbed: swarm cluster {self.label}: {why}", file=sys.stderr)

        for host, agent in self.agents.items():
            threading.Thread(target=renew, args=(host, agent), name=f"lease-{self.label}-{host}", daemon=True).start()

    # --- members ------------------------------------------------------------------------------------------------

    def _member(self, name: str, action: str, timeout: float = STOP_TIMEOUT) -> Mapping[str, object]:
        """A member fault by the agent of its host (the request waits `timeout` for the member, and the engine)."""
        return self.agent_of(name).request("member", cluster=self.label, name=name, action=action, timeout=timeout,
                                           request_timeout=timeout + 30.0)  # fmt: skip

    def kill(self, name: str) -> None:
        m = self.members[name]
        if name not in self.running():
            raise ClusterError(f"member {name} is not running")
        self._member(name, "kill")
        m.pid = m.netns = None

    def pause(self, name: str) -> None:
        if name not in self.running():
            raise ClusterError(f"member {name} is not running")
        self._member(name, "pause")
        self.members[name].paused = True

    def resume(self, name: str) -> None:
        self._member(name, "resume")
        self.members[name].paused = False

    def leave(self, name: str) -> None:
        super().leave(name)
        self._leaving.add(name)

    def restart(self, name: str, timeout: float = 30.0) -> None:
        """A new task of the member's service (a new incarnation, on the same host)."""
        m = self.members[name]
        state = self._member(name, "state")
        if name in self._leaving:
            state = self._member(name, "term", timeout)  # it is ending by itself: wait for it
        elif state.get("state") in ("running", "paused"):
            raise ClusterError(f"member {name} is running; kill it first")
        self._leaving.discard(name)
        self.docker.services.get(f"{self.label}-{name}").force_update()
        m.incarnation += 1
        self._attach(self.placement[name], [name], time.monotonic() + max(timeout, 30.0))
        self.chaos.push(self.chaos.faults(stats=False))  # its address may be new: every host renders it again
        self._save_state()
        self.wait_ready(name, timeout)
        for other in self.running():
            if other != name and not self.members[other].paused:
                self.control(other, "incarnation", peer=name, incarnation=m.incarnation)

    def control(self, name: str, cmd: str, *, timeout: float = 10.0, **args: object) -> ControlReply:
        m = self.members[name]
        req = {"token": self.token, "cmd": cmd, **args}
        reply = self.agent_of(name).request("control", cluster=self.label, name=name, request=req,
                                            port=m.control_port, timeout=timeout)["reply"]  # fmt: skip
        if not isinstance(reply, dict) or not reply.get("ok"):
            raise ClusterError(f"member {name}: {reply.get('error') if isinstance(reply, dict) else reply}")
        return cast(ControlReply, reply)

    def running(self) -> list[str]:
        return [n for n, m in self.members.items() if m.pid is not None and n not in self._leaving]

    def stop_members(self) -> None:
        """Graceful stop of every running member (SIGTERM: each writes its `stop` event), then the histories."""
        running = self.running()
        for name in running:
            if self.members[name].paused:
                self.resume(name)
        for name, reply in self._term_all(running).items():
            if isinstance(reply, ClusterError):
                raise reply
            if reply.get("exit_code") is None and reply.get("state") != "gone":
                raise ClusterError(f"member {name} did not stop within {STOP_TIMEOUT:g}s of SIGTERM")
            self.members[name].pid = self.members[name].netns = None
        problems = self.collect_histories()
        if problems:
            raise ClusterError("; ".join(problems))

    def _term_all(self, names: list[str]) -> dict[str, Mapping[str, object] | ClusterError]:
        """SIGTERM to all of `names` at once, as on the docker backend, and their exits: one at a time, the last
        would outlive the others by a fault detector's timeout and install a view of its own after theirs."""

        def term(name: str) -> Mapping[str, object] | ClusterError:
            try:
                return self._member(name, "term")
            except ClusterError as e:
                return e

        with ThreadPoolExecutor(max_workers=max(1, len(names)), thread_name_prefix=f"term-{self.label}") as pool:
            return dict(zip(names, pool.map(term, names), strict=True))

    def collect_histories(self) -> list[str]:
        """Every member's history file from its host into workdir/history/ (on the orchestrator's clock); what
        could not be collected."""
        problems = []
        for name in self.members:
            try:
                data = self._fetch_history(name)
            except ClusterError as e:
                problems.append(f"the history of {name}: {e}")
                continue
            if data is not None:
                (self.workdir / "history" / f"{name}.jsonl").write_bytes(data)
        return problems

    def _fetch_history(self, name: str) -> bytes | None:
        agent, parts, offset = self.agent_of(name), [], 0
        for _ in range(1 << 16):  # bounded: a chunk is up to 4 MiB
            reply = agent.request("history", cluster=self.label, name=name, offset=offset, timeout=60.0)
            parts.append(str(reply["data"]).encode("utf-8", "surrogateescape"))
            offset = int(reply["next"])
            if offset >= int(reply["size"]):
                break
        if offset == 0:
            return None
        data = b"".join(parts)
        clock = self.clocks.get(self.placement[name])
        return data if clock is None or clock.offset_ns == 0 else shift_history(data, clock.offset_ns)

    # --- faults -----------------------------------------------------------------------------------------------------

    @property
    def chaos(self) -> SwarmFaultTable:
        endpoints = lambda: {n: m.ip for n, m in self.members.items() if m.ip}  # noqa: E731
        return SwarmFaultTable(self.state_dir, self.label, list(self.members), self.spec.transport, self.agents,
                               self.clocks, endpoints, self.lost)  # fmt: skip

    # --- state ----------------------------------------------------------------------------------------------------

    def _save_state(self) -> None:
        network = {
            "placement": self.placement,
            "history_dirs": self.history_dirs,
            "leaving": sorted(self._leaving),
            "clocks": {h: c.to_json() for h, c in self.clocks.items()},
        }
        self._write_state(self.token, network)

    def _restore_network(self, network: Mapping[str, object]) -> None:
        """What _save_state wrote (TypeError naming the part that is not)."""
        self.placement = _strings_by_name(network, "placement")
        self.history_dirs = _strings_by_name(network, "history_dirs")
        leaving = network.get("leaving", [])
        if not isinstance(leaving, list) or not all(isinstance(n, str) for n in leaving):
            raise TypeError(f"the swarm state's leaving is not a list of names: {leaving!r:.200}")
        self._leaving = set(leaving)
        clocks = network.get("clocks", {})
        if not isinstance(clocks, dict):
            raise TypeError(f"the swarm state's clocks are not a table: {clocks!r:.200}")
        self.clocks = {h: HostClock.from_json(c) for h, c in clocks.items()}


def _strings_by_name(network: Mapping[str, object], key: str) -> dict[str, str]:
    """A {name: string} table of the swarm state's network section ({} without it)."""
    table = network.get(key, {})
    if not isinstance(table, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in table.items()):
        raise TypeError(f"the swarm state's {key} is not a table of strings: {table!r:.200}")
    return dict(table)


def shift_history(data: bytes, offset_ns: int) -> bytes:
    """A history written on a host whose CLOCK_MONOTONIC is offset_ns ahead of the orchestrator's, on the
    orchestrator's clock: every event's `t` moved back by the offset (a cut-off last line is kept as it is)."""
    out = []
    for line in data.splitlines(keepends=True):
        try:
            event = json.loads(line)
            event["t"] = int(event["t"]) - offset_ns
        except (ValueError, KeyError, TypeError):
            out.append(line)
            continue
        out.append(json.dumps(event, separators=(",", ":")).encode() + b"\n")
    return b"".join(out)


def remove_services(client: DockerClient, label: str | None = None) -> list[str]:
    """Removes the services of one swarm cluster (or of every chaosbed cluster) and, once their tasks are gone, its
    overlay network."""
    import docker

    selector = f"{LABEL}={label}" if label else LABEL
    removed = []
    for service in client.services.list(filters={"label": selector}):
        with contextlib.suppress(docker.errors.DockerException):
            service.remove()
            removed.append(service.name)
    deadline = time.monotonic() + 30.0
    for net in client.networks.list(filters={"label": selector}):
        while time.monotonic() < deadline:  # the tasks' containers leave the network shortly after
            try:
                net.remove()
                removed.append(net.name)
                break
            except docker.errors.NotFound:
                break
            except docker.errors.APIError:
                time.sleep(0.2)  # polling the network's last endpoint away, with a deadline
    return removed

"""The swarm backend on two Docker engines in network namespaces, joined into one swarm, with a chaos agent per
engine: three members spread over the two engines form one view; a one-way partition between the hosts splits the
views exactly as on netns, and the heal merges them; the histories collected from both hosts check clean; the
agents install the faults where the receivers run and leave no rule behind, also when the orchestrator is killed
mid-run (their lease heals); a host whose agent stops answering is reported."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from analysis.reference import check_path
from chaos.faults import ChaosError
from orchestration.agent import service as agent_service
from orchestration.agent.client import AgentClient
from orchestration.backends import swarm as swarm_backend
from orchestration.backends.netns import list_namespaces
from orchestration.backends.swarm import SwarmCluster
from orchestration.backends.swarm_hosts import SwarmDescription, SwarmHost
from orchestration.cluster import ClusterError, ClusterSpec
from orchestration.host import local_swarm
from orchestration.runner import run
from orchestration.scenario import load
from tests.swarm.conftest import needs_swarm

pytestmark = needs_swarm
ROOT = Path(__file__).resolve().parents[2]

# A and C run on engine 1, B on engine 2 (members are spread over the hosts in turn): from 1 s to 5 s, A and C stop
# hearing B while B still hears them. A, the coordinator, excludes B (A and C install a view of the two), and after
# the heal the views merge into one of all three.
HOSTS_SPLIT = """
name = "hosts-split"
seed = 11
timeout = "60s"

[cluster]
members = 3
stack = "unicast3+nakack2"

[cluster.properties]
unicast3 = { xmit_interval = "200ms" }
fd = { interval = "0.5s", timeout = "2s", timeout_check_interval = "0.5s" }
merge = { min_interval = "0.5s", max_interval = "2s" }
gms = { join_timeout = "1s", discovery_timeout = "1s" }

[[workload]]
kind = "unicast"
from = "*"
to = "*"
count = 600
size = 100
rate = 200

[[workload]]
kind = "multicast"
from = ["A", "B"]
count = 600
size = 100
rate = 200

[[faults]]
at = "1s"
kind = "partition"
from = ["B"]
to = ["A", "C"]
one_way = true
for = "4s"

[checks]
fifo = true
exactly_once = true
complete = true
no_phantoms = true
views_converge = "15s"
"""


def views(out: Path, member: str, after: int) -> list[tuple[str, frozenset[str]]]:
    lines = (out / "history" / f"{member}.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    return [(e["view_id"], frozenset(e["members"])) for e in events if e["event"] == "view" and e["t"] > after]


def split_and_merge(out: Path) -> dict[str, list[frozenset[str]]]:
    """Per member, the member sets of the views it installed after the schedule's start."""
    start = json.loads((out / "faults.jsonl").read_text().splitlines()[0])
    return {m: [members for _, members in views(out, m, start["t"])] for m in "ABC"}


def test_three_members_on_two_engines_split_by_a_one_way_partition_between_the_hosts_as_on_netns(
    swarm: SwarmDescription, tmp_path: Path
) -> None:
    scenario = tmp_path / "hosts-split.toml"
    scenario.write_text(HOSTS_SPLIT)
    outcomes = {}
    for backend in ("netns", "swarm"):
        out = tmp_path / backend
        outcome = run(load(scenario), backend, out)
        (result,) = check_path(out).values()
        assert not outcome.timed_out and not result.violations, (backend, result.violations[:3])
        outcomes[backend] = split_and_merge(out)
        for m in "ABC":  # one view of all three at the end, the same everywhere
            assert views(out, m, 0)[-1][1] == {"A", "B", "C"}, (backend, m, views(out, m, 0))
        assert len({views(out, m, 0)[-1][0] for m in "ABC"}) == 1
    assert outcomes["swarm"] == outcomes["netns"], outcomes
    assert outcomes["swarm"]["A"] == [{"A", "C"}, {"A", "B", "C"}]  # the split (B excluded), then the merge
    start = json.loads((tmp_path / "swarm" / "faults.jsonl").read_text().splitlines()[0])
    assert start["backend"] == "swarm" and set(start["clocks"]) == {h.name for h in swarm.hosts}
    assert all(c["same_clock"] and c["offset_ns"] == 0 and c["rtt_ns"] > 0 for c in start["clocks"].values())


@pytest.fixture
def cluster(swarm: SwarmDescription, tmp_path: Path) -> Iterator[SwarmCluster]:
    made = SwarmCluster(ClusterSpec(["A", "B", "C"], "unicast3+nakack2", backend="swarm"), workdir=tmp_path / "run")
    try:
        yield made
    finally:
        made.down()
        left = [ns for ns in list_namespaces() if ns.startswith(f"{made.label}-")]
        assert not left, f"namespaces of {made.label} left: {left}"
        assert not handlers_of(made.label)


def handlers_of(label: str) -> list[int]:
    """NFQUEUE handler processes of this cluster still running on the machine."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"chaos.nfqueue" in cmdline and label.encode() in cmdline:
            found.append(int(pid))
    return found


def containers_by_engine(swarm: SwarmDescription, label: str) -> dict[str, set[str]]:
    out = {}
    for e in local_swarm.engines(swarm):
        listed = e.client().containers.list(filters={"label": f"chaosbed.cluster={label}"})
        out[e.name] = {c.labels["chaosbed.member"] for c in listed}
    return out


def test_faults_are_installed_where_the_receivers_run_and_none_is_left(
    swarm: SwarmDescription, cluster: SwarmCluster
) -> None:
    cluster.start()
    view = cluster.wait_for_view(timeout=60)
    assert set(view["members"]) == {"A", "B", "C"}
    assert cluster.placement == {"A": "h1", "B": "h2", "C": "h1"}
    assert containers_by_engine(swarm, cluster.label) == {"h1": {"A", "C"}, "h2": {"B"}}  # really on two engines
    chaos = cluster.chaos
    chaos.add("partition", {"from": ["A", "C"], "to": ["B"], "one_way": True})  # rules at B, on engine 2
    chaos.add("discard", {"from": ["C"], "to": ["A"], "match": "UNICAST3.ACK()", "count": 2})  # a handler at A
    installed = chaos.installed()
    assert set(installed["h2"]["rules"]["B"]) >= {"nft"} and installed["h2"]["handlers"] == []
    assert installed["h1"]["handlers"] == ["A"] and "iptables" in installed["h1"]["rules"]["A"]
    assert installed["h1"]["rules"]["C"] == {}
    cluster.control("A", "send", to="C", count=50, size=100, rate=500)  # C acknowledges: its ACKs reach A
    cluster.wait_until(lambda: sum(f.handled["dropped"] for f in chaos.faults() if f.handled) == 2, 20, "2 drops")
    cluster.control("A", "send", to="B", count=20, size=100, rate=500)  # B does not hear A: the kernel drops it
    cluster.wait_until(lambda: chaos.kernel_counters()["B"]["blocked"] > 0, 20, "packets to B blocked")
    chaos.heal()
    installed = chaos.installed()
    assert all(not rules for host in installed.values() for rules in host["rules"].values()), installed
    assert all(not host["handlers"] for host in installed.values()) and not handlers_of(cluster.label)

    def b_has_a_s_messages() -> bool:  # retransmitted after the heal
        return cluster.control("B", "stats")["counters"]["unicast_delivered"].get("A", [0, 0])[1] >= 20

    cluster.wait_until(b_has_a_s_messages, 30, "B delivering the 20 messages A sent it during the partition")
    cluster.stop_members()
    (result,) = check_path(cluster.workdir).values()
    assert not result.violations, result.violations[:3]
    assert {p.stem for p in (cluster.workdir / "history").glob("*.jsonl")} == {"A", "B", "C"}


@contextlib.contextmanager
def own_agent_on_h2(swarm: SwarmDescription, port: int) -> Iterator[tuple[AgentClient, int, str]]:
    """An agent service of the test's own with one task, on engine h2 (the session's agents stay up): its client,
    its agent's pid and the service's name; removed afterwards, waiting until its agent is gone."""
    h2 = next(h for h in swarm.hosts if h.name == "h2")
    name = f"chaosbed-agent-test-{port}-{os.getpid()}"
    pids = local_swarm.deploy_agents(swarm, local_swarm.agent_service(swarm, name, port, node_id=h2.node_id))
    try:
        yield AgentClient.of(h2, swarm.token(), port), pids["h2"], name
    finally:
        local_swarm.remove_agents(swarm, name)


def use_agent(cluster: SwarmCluster, swarm: SwarmDescription, port: int) -> None:
    """The cluster reaches host h2 through the agent on `port`."""
    hosts = [h if h.name != "h2" else SwarmHost(h.name, h.node_id, h.address, port, h.netns) for h in swarm.hosts]
    cluster._desc = SwarmDescription(swarm.manager, swarm.image, swarm.token_file, hosts, swarm.label)


def agent_lines(swarm: SwarmDescription, service_name: str) -> list[dict[str, object]]:
    """The JSON lines the service's launchers and agents wrote (`docker service logs`)."""
    manager = local_swarm.engines(swarm)[0].client()
    lines = [line.split("| ", 1)[-1] for line in agent_service.logs(manager, service_name)]
    return [json.loads(line) for line in lines if line.startswith("{")]


def test_the_agents_are_a_global_service_in_the_hosts_pid_namespace_and_their_engines_network_namespace(
    swarm: SwarmDescription,
) -> None:
    manager = local_swarm.engines(swarm)[0].client()
    service = manager.services.get(swarm.local["agent_service"])
    assert service.attrs["Spec"]["Mode"] == {"Global": {}}
    running = [t for t in service.tasks() if t["Status"]["State"] == "running"]
    assert sorted(t["NodeID"] for t in running) == sorted(h.node_id for h in swarm.hosts)
    token = swarm.token()
    for h in swarm.hosts:  # measured on each agent process, not read from the service's spec
        pid = int(AgentClient.of(h, token).request("hello")["pid"])
        assert os.readlink(f"/proc/{pid}/ns/pid") == os.readlink("/proc/self/ns/pid"), "not in the host's pid ns"
        assert os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{h.netns}").st_ino
        caps = int(next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("CapEff"))
                   .split()[1], 16)  # fmt: skip
        assert caps & (1 << 21) and caps & (1 << 12), "CAP_SYS_ADMIN and CAP_NET_ADMIN"
        engine = next(e for e in local_swarm.engines(swarm) if e.name == h.name).client()
        (agent,) = engine.containers.list(filters={"label": f"chaosbed.agent-of={service.name}"})
        assert agent.attrs["HostConfig"]["PidMode"] == "host" and agent.attrs["State"]["Pid"] == pid


def test_a_host_whose_agent_stops_answering_is_reported_and_healed_by_its_lease(
    swarm: SwarmDescription, cluster: SwarmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(swarm_backend, "LEASE_S", 4.0)
    monkeypatch.setattr(swarm_backend, "RENEW_S", 0.5)
    with own_agent_on_h2(swarm, 7791) as (client, pid, service_name):
        use_agent(cluster, swarm, 7791)
        try:
            cluster.start()
            cluster.wait_for_view(timeout=60)
            cluster.chaos.add("partition", {"from": ["A"], "to": ["B"]})  # rules at B (engine 2) and at A
            os.kill(pid, signal.SIGSTOP)  # the orchestrator loses host h2
            try:
                cluster.wait_until(lambda: "h2" in cluster.lost, 20, "host h2 reported lost")
                assert "h2" in cluster.lost["h2"] and "did not answer" in cluster.lost["h2"]
                with pytest.raises(ChaosError, match="host h2 is lost"):
                    cluster.chaos.add("loss", {"from": ["C"], "to": ["B"], "probability": 0.5})
                # the agent stays stopped for longer than its lease: that (not a race) is what the test is about
                time.sleep(swarm_backend.LEASE_S + 0.5)
            finally:
                os.kill(pid, signal.SIGCONT)
            deadline = time.monotonic() + 10
            while client.request("installed", cluster=cluster.label)["rules"]["B"] and time.monotonic() < deadline:
                time.sleep(0.1)  # the agent's watchdog heals within a quarter second of resuming
            assert client.request("installed", cluster=cluster.label)["rules"] == {"B": {}}
            healed = [h for h in agent_lines(swarm, service_name) if "healed" in h]
            assert any(h["healed"] == cluster.label and "lease" in str(h["why"]) for h in healed), healed
        finally:
            cluster.down()  # while its agent still runs: it detaches B's namespace


def test_a_killed_agent_is_replaced_by_the_service_and_the_new_agent_heals_what_it_left(
    swarm: SwarmDescription, cluster: SwarmCluster
) -> None:
    with own_agent_on_h2(swarm, 7792) as (client, pid, service_name):
        use_agent(cluster, swarm, 7792)
        try:
            cluster.start()
            cluster.wait_for_view(timeout=60)
            cluster.chaos.add("partition", {"from": ["A"], "to": ["B"]})
            assert client.request("installed", cluster=cluster.label)["rules"]["B"]
            os.kill(pid, signal.SIGKILL)  # no clean-up of any kind: B's rules stay in its namespace

            def replaced() -> bool:
                try:
                    return int(client.request("hello", timeout=2.0)["pid"]) != pid
                except ClusterError:
                    return False

            cluster.wait_until(replaced, 60, "a new agent on h2 (the service's next task)")
            assert client.request("installed", cluster=cluster.label)["rules"] == {"B": {}}
            ready = [h for h in agent_lines(swarm, service_name) if h.get("ready")]  # the tasks' lines, in any order
            assert len(ready) == 2 and [h["recovered"] for h in ready if h["pid"] != pid] == [[cluster.label]], ready
        finally:
            cluster.down()


def test_the_agents_heal_when_the_orchestrator_is_killed_mid_run(swarm: SwarmDescription, tmp_path: Path) -> None:
    scenario = tmp_path / "long-split.toml"
    scenario.write_text(
        HOSTS_SPLIT.replace('for = "4s"', 'for = "60s"').replace('timeout = "60s"', 'timeout = "120s"')
        + '\n[[faults]]\nat = "1s"\nkind = "discard"\nmatch = "UNICAST3.ACK()"\nfrom = ["C"]\nto = ["A"]\n'
    )
    state = tmp_path / "state"
    env = dict(os.environ, CHAOSBED_STATE=str(state), CHAOSBED_SWARM=str(local_swarm.swarm_dir() / "swarm.json"),
               CHAOSBED_SWARM_LEASE="4")  # fmt: skip
    out = tmp_path / "run"
    orchestrator = subprocess.Popen(
        [sys.executable, "-m", "orchestration.cli", "run", str(scenario), "--backend", "swarm", "--out", str(out)],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    label = ""
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and orchestrator.poll() is None:  # until the partition is in force
            log = out / "faults.jsonl"
            lines = log.read_text().splitlines() if log.exists() else []
            if any('"kind":"partition"' in line for line in lines):
                break
            time.sleep(0.1)
        assert orchestrator.poll() is None, orchestrator.stderr.read().decode() if orchestrator.stderr else ""
        label = next(p.name for p in state.iterdir() if p.name.startswith("cb"))
        token = Path(swarm.token_file).read_text().strip()
        agents = {h.name: AgentClient.of(h, token) for h in swarm.hosts}
        installed = {n: a.request("installed", cluster=label) for n, a in agents.items()}
        assert installed["h1"]["rules"]["A"] and installed["h1"]["rules"]["C"] and installed["h1"]["handlers"] == ["A"]
        orchestrator.kill()  # SIGKILL: no clean-up of any kind
        orchestrator.wait(10)
        deadline = time.monotonic() + 20  # the lease of 4 s, then the agents' watchdog
        while time.monotonic() < deadline:
            installed = {n: a.request("installed", cluster=label) for n, a in agents.items()}
            if not any(r for i in installed.values() for r in i["rules"].values()) and not handlers_of(label):
                break
            time.sleep(0.2)
        assert not any(r for i in installed.values() for r in i["rules"].values()), installed
        assert all(not i["handlers"] for i in installed.values()) and not handlers_of(label)
    finally:
        if orchestrator.poll() is None:
            orchestrator.kill()
            orchestrator.wait(10)
        reaped = subprocess.run([sys.executable, "-m", "orchestration.cli", "down", "--all"], env=env, cwd=ROOT,
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        assert reaped.returncode == 0, reaped.stderr
    assert label in reaped.stdout
    services = local_swarm.engines(swarm)[0].client().services.list(filters={"label": f"chaosbed.cluster={label}"})
    assert not services and not [ns for ns in list_namespaces() if ns.startswith(f"{label}-")]


def test_a_swarm_run_without_a_swarm_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAOSBED_SWARM", str(tmp_path / "nothing.json"))
    cluster = SwarmCluster(ClusterSpec(["A", "B"], backend="swarm"), workdir=tmp_path)
    with pytest.raises(ClusterError, match="chaosbed swarm up"):
        cluster.start()


def test_the_agents_of_a_described_swarm_come_and_go_with_the_swarm_agents_commands(
    swarm: SwarmDescription, tmp_path: Path
) -> None:
    """As on real hosts: a description file without the local swarm's extras, `chaosbed swarm agents up` deploys the
    service on it, `swarm status` finds every agent, `swarm agents down` removes them (and waits until they are
    gone)."""
    doc = json.loads(swarm.to_json())
    for h in doc["hosts"]:
        h["agent_port"] = 7794
    del doc["local"], doc["label"]
    described = tmp_path / "swarm.json"
    described.write_text(json.dumps(doc))
    env = dict(os.environ, CHAOSBED_SWARM=str(described))
    name = f"chaosbed-agent-cli-{os.getpid()}"
    per_host = f"{local_swarm.swarm_dir() / swarm.label}/{{{{.Node.Hostname}}}}"

    def chaosbed(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestration.cli", *args], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=180)  # fmt: skip

    up = ["swarm", "agents", "up", "--name", name, "--engine-socket", f"{per_host}/docker.sock",
          "--state", f"{per_host}/{name}"]  # fmt: skip
    try:
        done = chaosbed(*up)
        assert done.returncode == 0 and "h1: agent up" in done.stdout and "h2: agent up" in done.stdout, done
        status = chaosbed("swarm", "status")
        assert status.returncode == 0 and status.stdout.count("agent up") == 2, status.stdout
        again = chaosbed(*up)
        assert again.returncode == 2 and f"a service {name} runs already" in again.stderr, again
    finally:
        down = chaosbed("swarm", "agents", "down", "--name", name)
    assert down.returncode == 0 and f"service {name} is removed" in down.stdout, down
    status = chaosbed("swarm", "status")
    assert status.returncode == 1 and status.stdout.count("agent lost") == 2, status.stdout
    for e in local_swarm.engines(swarm):
        assert not e.client().api.containers(all=True, filters={"label": f"chaosbed.agent-of={name}"})
    # agents that cannot start: the command says why in their own words, and leaves no service behind
    wrong = chaosbed(*up, "--python", "/nowhere/python", "--timeout", "8")
    assert wrong.returncode == 2 and "did not answer within 8 s" in wrong.stderr, wrong
    assert "/nowhere/python" in wrong.stderr, wrong.stderr  # chroot's error, from the service's logs
    manager = local_swarm.engines(swarm)[0].client()
    assert not [s for s in manager.services.list() if s.name == name], "the failed service was left"

"""`chaosbed run`: executes a scenario on a backend and leaves a run folder (SCENARIO.md) for the checker.

The run folder gets `scenario.toml` (as run, seed filled in), `history/<member>.jsonl`, `faults.jsonl` (every fault
applied and removed, with its time and the seed). The run ends when every workload is sent and the cluster is
quiet (nothing unacked, no gaps), or at the scenario's timeout, which is then reported as a `timeout` violation.
"""

from __future__ import annotations

import heapq
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestration.scenario import NETWORK_FAULTS, Fault, Scenario, ScenarioError

SIM_DEFAULT_RATE = 10_000.0  # messages/s when a workload leaves `rate` out (the simulator has no flow control)


@dataclass
class RunOutcome:
    out: Path
    timed_out: bool
    extra_violations: list[dict[str, Any]] = field(default_factory=list)


def scenario_toml(sc: Scenario) -> str:
    """The scenario as run: the parsed file with the seed filled in (TOML written by hand: tomllib only reads)."""
    raw = dict(sc.raw)
    raw["seed"] = sc.seed
    return _toml(raw)


def _key(k: str) -> str:
    return k if k and all(c.isalnum() or c in "_-" for c in k) else json.dumps(k)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _toml(raw: dict[str, Any]) -> str:
    lines = []
    for k, v in raw.items():
        if not isinstance(v, dict) and not (isinstance(v, list) and v and all(isinstance(x, dict) for x in v)):
            lines.append(f"{k} = {_toml_value(v)}")
    for k, v in raw.items():
        if isinstance(v, dict):
            lines.append(f"\n[{k}]")
            lines.extend(f"{_key(kk)} = {_toml_value(vv)}" for kk, vv in v.items())
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for item in v:
                lines.append(f"\n[[{k}]]")
                lines.extend(f"{_key(kk)} = {_toml_value(vv)}" for kk, vv in item.items())
    return "\n".join(lines) + "\n"


def prepare(sc: Scenario, out: Path) -> None:
    (out / "history").mkdir(parents=True, exist_ok=True)
    (out / "scenario.toml").write_text(scenario_toml(sc))


# --- the simulator ----------------------------------------------------------------------------------------------


def run_sim(sc: Scenario, out: Path) -> RunOutcome:
    from chaos.rules import parse_match
    from orchestration.backends.sim import MessageRule, Simulation

    for f in sc.faults:
        if f.kind in ("pause", "resume"):
            raise ScenarioError(f"faults: {f.kind} is not supported by the sim backend; use process or netns")
    prepare(sc, out)
    sim = Simulation(sc.members, seed=sc.seed, stack=sc.stack, properties=sc.properties)
    last_send = 0.0
    for w in sc.workloads:
        rate = w.rate or SIM_DEFAULT_RATE
        last_send = max(last_send, w.start + w.count / rate)
        for s in w.senders:
            if w.kind == "multicast":
                sim.multicast_stream(s, w.count, rate=rate, start=w.start, size=w.size)
            else:
                for d in w.dests:
                    if d != s:
                        sim.stream(s, d, w.count, rate=rate, start=w.start, size=w.size)

    def pairs(f: Fault) -> list[tuple[str, str]]:
        src, dst = f.members("from") or sc.members, f.members("to") or sc.members
        links = [(a, b) for a in src for b in dst if a != b]
        if f.kind == "partition" and not f.args.get("one_way", False):
            links += [(b, a) for a, b in links]
        return links

    def announce_members() -> None:
        """Stacks without membership learn who is alive from the orchestrator (as a static member list would)."""
        live = [m for m in sim.members.values() if m.alive]
        for m in live:
            if m.stack.gms is None:
                m.stack.unicast.set_members({o.address for o in live})

    def apply(f: Fault) -> None:
        k, a = f.kind, f.args
        if k in ("partition", "split"):
            links = (
                pairs(f)
                if k == "partition"
                else [(x, y) for g in a["groups"] for x in g for h in a["groups"] if h is not g for y in h]
            )
            for x, y in links:
                sim.set_link(x, y, cut=True, duration=f.duration)
        elif k == "heal":
            sim.heal()
        elif k in ("loss", "reorder", "duplicate", "delay"):
            key = "loss" if k == "loss" else k
            values = {"delay": a["delay"], "jitter": a.get("jitter", 0.0)} if k == "delay" else {key: a["probability"]}
            for x, y in pairs(f):
                sim.set_link(x, y, duration=f.duration, **values)
        elif k == "discard":
            m = parse_match(a["match"])
            srcs, dsts = f.members("from") or [None], f.members("to") or [None]
            action = a.get("action", "drop")
            for x in srcs:
                for y in dsts:
                    rule = sim.add_rule(
                        MessageRule(
                            m.protocol,
                            m.header,
                            m.predicates(),
                            src=x,
                            dst=y,
                            action=action,
                            delay=a.get("delay", 0.0),
                            count=a.get("count"),
                            probability=a.get("probability", 1.0),
                        )
                    )
                    if f.duration is not None:
                        sim.at(sim.now + f.duration, lambda r=rule: r in sim.rules and sim.rules.remove(r))
        elif k == "kill":
            sim.crash(a["member"])
            announce_members()
        elif k == "restart":
            sim.restart(a["member"])
            announce_members()
        elif k == "close-connection":
            sim.close_connection(a["member"], a["peer"])
        elif k == "set":
            proto, prop = a["property"].split(".")
            sim.member(a["member"]).stack.set_property(proto, prop, a["value"])

    last_fault = 0.0
    for f in sc.faults:
        sim.at(f.at, apply, f)
        last_fault = max(last_fault, f.at + (f.duration or 0.0))
    settled = sim.run_until(lambda: sim.now >= max(last_send, last_fault) and sim.quiet(), sc.timeout, check_every=0.1)
    sim.finish()
    sim.write_run(out)
    return RunOutcome(out, not settled, [] if settled else [_timeout_violation(sc)])


def _timeout_violation(sc: Scenario) -> dict[str, Any]:
    return {
        "check": "timeout",
        "sender": None,
        "receiver": None,
        "conn_id": None,
        "seqno": None,
        "msg_id": None,
        "detail": f"the run did not finish (all sent and quiet) within the scenario's timeout of {sc.timeout:g}s",
    }


# --- real clusters ----------------------------------------------------------------------------------------------


def run_real(sc: Scenario, backend: str, out: Path) -> RunOutcome:
    from chaos.engine import ChaosError
    from node.stack import has_membership
    from orchestration.backends import backend_class
    from orchestration.cluster import ClusterSpec

    network = sorted({f.kind for f in sc.faults} & NETWORK_FAULTS)
    if network and backend != "netns":
        raise ScenarioError(
            f"faults: {', '.join(network)} need a network of the cluster's own: run with --backend netns (as root), "
            f"or --backend sim; the {backend} backend's members share the host's loopback"
        )
    prepare(sc, out)
    spec = ClusterSpec(sc.members, sc.stack, sc.transport, sc.properties, backend)
    cluster = backend_class(backend)(spec, workdir=out)
    try:
        cluster.start()
        if has_membership(sc.stack):  # the schedule starts once the group has formed
            cluster.wait_for_view(timeout=min(30.0, sc.timeout))
        t0 = time.monotonic()
        _run_schedule(cluster, sc, t0, out / "faults.jsonl")
        settled = _wait_quiet(cluster, sc, t0)
        cluster.stop_members()
        return RunOutcome(out, not settled, [] if settled else [_timeout_violation(sc)])
    except ChaosError as e:
        raise ScenarioError(f"faults: {e}") from None
    finally:
        cluster.down()


def _run_schedule(cluster: Any, sc: Scenario, t0: float, log_path: Path) -> None:
    """Starts the workloads and applies the faults at their times (after t0); a fault with `for` is removed again
    after that long. Every fault and removal goes to faults.jsonl as it happens."""
    from chaos.engine import append_log, fault_event, heal_event

    actions: list[tuple[float, int, str, Any]] = []
    for i, w in enumerate(sc.workloads):
        heapq.heappush(actions, (w.start, i, "workload", w))
    for i, f in enumerate(sc.faults):
        heapq.heappush(actions, (f.at, 1000 + i, "fault", (i, f)))
    log_path.touch()
    while actions:
        at, order, what, item = heapq.heappop(actions)
        while (wait := at - (time.monotonic() - t0)) > 0:
            time.sleep(min(wait, 0.05))  # the schedule's own clock
        if what == "workload":
            _start_workload(cluster, item)
        elif what == "remove":
            if item in {r["id"] for r in cluster.chaos.faults(stats=False)}:  # not already gone in a heal
                cluster.chaos.remove([item])
                append_log(log_path, heal_event([item], sc.seed))
        else:
            i, f = item
            if f.kind == "heal":
                cluster.chaos.heal()
                append_log(log_path, heal_event(None, sc.seed))
            elif f.kind in NETWORK_FAULTS:
                record = cluster.chaos.add(f.kind, f.args, seed=sc.seed)
                append_log(log_path, fault_event(record, f.duration))
                if f.duration is not None:
                    heapq.heappush(actions, (f.at + f.duration, order, "remove", record["id"]))
            else:
                _apply_process_fault(cluster, f)
                event = {"t": time.monotonic_ns(), "event": "fault", "seed": sc.seed, "kind": f.kind, **f.args}
                append_log(log_path, event)


def _start_workload(cluster: Any, w: Any) -> None:
    for s in w.senders:
        if w.kind == "multicast":
            cluster.control(s, "multicast", count=w.count, size=w.size, rate=w.rate)
        for d in w.dests:
            if d != s:
                cluster.control(s, "send", to=d, count=w.count, size=w.size, rate=w.rate)


def _apply_process_fault(cluster: Any, f: Fault) -> None:
    a = f.args
    if f.kind == "kill":
        cluster.kill(a["member"])
    elif f.kind == "restart":
        cluster.restart(a["member"])
    elif f.kind == "pause":
        cluster.pause(a["member"])
    elif f.kind == "resume":
        cluster.resume(a["member"])
    elif f.kind == "close-connection":
        cluster.control(a["member"], "close", peer=a["peer"])
    elif f.kind == "set":
        proto, prop = a["property"].split(".")
        cluster.control(a["member"], "set", protocol=proto, property=prop, value=a["value"])


def _wait_quiet(cluster: Any, sc: Scenario, t0: float) -> bool:
    """Every workload task done on the running members, nothing unacked to a running member and no gaps, twice in a
    row. (Messages to a killed member stay unacked: they are not waited for; the checker reports them apart.)"""
    deadline = t0 + sc.timeout
    streak = 0
    while time.monotonic() < deadline:
        quiet = True
        running = [n for n in cluster.running() if not cluster.members[n].paused]
        for name in running:
            tasks = cluster.control(name, "tasks")["tasks"]
            stats = cluster.control(name, "stats")["counters"]
            uni = stats[sc.stack.split("+")[0]]
            waiting = [p for p, n in stats["unacked_by_peer"].items() if n and p in running]
            if not all(t["done"] for t in tasks.values()) or waiting or uni.get("missing_msgs"):
                quiet = False
                break
        streak = streak + 1 if quiet else 0
        if streak >= 2:
            return True
        time.sleep(0.1)
    return False

"""A seeded simulator case: members streaming unicasts to each other under link faults and discard rules.

One seed drives the simulated network and the workload; the same options and seed replay the run event for event.
`replay_command()` gives the exact command line.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.rules import parse_match
from orchestration.backends.sim import LinkFaults, MessageRule, Simulation


@dataclass
class Discard:
    expr: str
    src: str | None = None
    dst: str | None = None
    count: int | None = None
    action: str = "drop"


@dataclass
class SimCase:
    stack: str = "unicast3"
    members: int = 3
    seed: int = 1
    count: int = 1000  # per sender and destination
    rate: float = 1000.0  # messages/s per sender and destination
    size: int = 100
    delay: float = 0.001
    jitter: float = 0.0
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    fault_for: float = 0.0  # link faults last this long (0 = the whole run); then the network heals
    discards: list[Discard] = field(default_factory=list)
    properties: dict[str, dict[str, Any]] = field(default_factory=dict)
    timeout: float = 300.0  # virtual seconds to wait for the run to settle after the workload

    def replay_command(self, out: str | None = None) -> str:
        args = ["chaosbed", "sim", "--stack", self.stack, "--members", str(self.members), "--seed", str(self.seed)]
        args += ["--count", str(self.count), "--rate", f"{self.rate:g}", "--size", str(self.size)]
        for name in ("loss", "duplicate", "reorder"):
            if getattr(self, name):
                args += [f"--{name}", f"{getattr(self, name):g}"]
        if self.delay != 0.001:
            args += ["--delay", f"{self.delay * 1000:g}ms"]
        if self.jitter:
            args += ["--jitter", f"{self.jitter * 1000:g}ms"]
        if self.fault_for:
            args += ["--fault-for", f"{self.fault_for:g}s"]
        for d in self.discards:
            args += ["--discard", d.expr]
            if d.src:
                args += ["--discard-from", d.src]
            if d.dst:
                args += ["--discard-to", d.dst]
            if d.count is not None:
                args += ["--discard-count", str(d.count)]
        for proto, props in self.properties.items():
            for k, v in props.items():
                args += ["--set", f"{proto}.{k}={v}"]
        if out:
            args += ["--out", out]
        return shlex.join(args)


@dataclass
class SimResult:
    sim: Simulation
    settled: bool
    rules: list[MessageRule]


def run_case(case: SimCase) -> SimResult:
    if case.members < 2:
        raise ValueError("members must be >= 2")
    sim = Simulation(case.members, seed=case.seed, stack=case.stack, properties=case.properties)
    names = list(sim.members)
    faults = {k: v for k, v in (("loss", case.loss), ("duplicate", case.duplicate), ("reorder", case.reorder)) if v}
    if case.jitter:
        faults["jitter"] = case.jitter
    if case.delay != 0.001:
        faults["delay"] = case.delay
    if faults:
        LinkFaults(**faults).validate()  # a clear error before anything runs
        for s in names:
            for d in names:
                if s != d:
                    sim.set_link(s, d, **faults)
    rules = []
    for disc in case.discards:
        match = parse_match(disc.expr)
        for who in (disc.src, disc.dst):
            if who is not None and who not in sim.members:
                raise ValueError(f"discard rule names member {who!r}; members: {', '.join(names)}")
        rules.append(
            sim.add_rule(
                MessageRule(
                    match.protocol,
                    match.header,
                    match.predicates(),
                    src=disc.src,
                    dst=disc.dst,
                    count=disc.count,
                    action=disc.action,
                )
            )
        )
    for s in names:
        for d in names:
            if s != d:
                sim.stream(s, d, case.count, rate=case.rate, size=case.size)
    if case.fault_for:
        sim.at(case.fault_for, sim.heal)
    settled = sim.run_until(sim.quiet, case.count / case.rate + case.fault_for + case.timeout, check_every=0.5)
    sim.finish()
    return SimResult(sim, settled, rules)


def write_case(result: SimResult, case: SimCase, out: Path) -> Path:
    """Writes the run folder of SCENARIO.md: history/, faults.jsonl and the scenario as run."""
    result.sim.write_run(out)
    (out / "scenario.toml").write_text(scenario_toml(case))
    return out


def scenario_toml(case: SimCase) -> str:
    """The case as a SCENARIO.md scenario file (backend sim), so `chaosbed check` knows which checks apply."""
    lines = [
        f'name = "sim-{case.stack}-seed{case.seed}"',
        f"seed = {case.seed}",
        "",
        "[cluster]",
        f"members = {case.members}",
        f'stack = "{case.stack}"',
        "",
        "[[workload]]",
        'kind = "unicast"',
        'from = "*"',
        'to = "*"',
        f"count = {case.count}",
        f"size = {case.size}",
        f"rate = {case.rate:g}",
        "",
        "[checks]",
        "fifo = true",
        "exactly_once = true",
        "complete = true",
        "no_phantoms = true",
        "",
    ]
    return "\n".join(lines)


def parse_set(values: list[str]) -> dict[str, dict[str, Any]]:
    """--set unicast3.xmit_interval=200ms -> {"unicast3": {"xmit_interval": "200ms"}}"""
    props: dict[str, dict[str, Any]] = {}
    for item in values:
        key, eq, value = item.partition("=")
        proto, dot, name = key.partition(".")
        if not eq or not dot or not proto or not name:
            raise ValueError(f"--set {item!r}: write PROTOCOL.PROPERTY=VALUE, e.g. unicast3.xmit_interval=200ms")
        props.setdefault(proto, {})[name] = value
    return props


@dataclass
class PairResult:
    sender: str
    receiver: str
    sent: int
    delivered: int
    duplicates: int
    missing: int
    phantoms: int
    out_of_order: int

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.missing or self.phantoms or self.out_of_order)


def pair_results(sim: Simulation) -> list[PairResult]:
    """Per sender and receiver, from the recorded sends and deliveries: exactly-once, FIFO, complete, no phantoms."""
    rows = []
    for s in sim.members:
        for d in sim.members:
            if s == d:
                continue
            sent = sim.sent(s, d)
            got = sim.delivered(d, s)
            sent_set = set(sent)
            seen: set[str | None] = set()
            unique = []
            for mid in got:
                if mid not in seen:
                    seen.add(mid)
                    unique.append(mid)
            valid = [m for m in unique if m in sent_set]
            position = {m: i for i, m in enumerate(sent)}
            running, out_of_order = -1, 0
            for m in valid:
                if position[m] < running:
                    out_of_order += 1
                running = max(running, position[m])
            rows.append(
                PairResult(
                    s,
                    d,
                    len(sent),
                    len(got),
                    len(got) - len(unique),
                    len(sent_set - seen),
                    len(unique) - len(valid),
                    out_of_order,
                )
            )
    return rows

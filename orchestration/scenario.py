"""Scenario files (../shared/SCENARIO.md): parsed, validated, with `--set` overrides.

A bad file raises ScenarioError naming the field (as a dotted path, e.g. `faults[2].kind`) and the reason.
`[[nemesis]]` entries (seeded fault schedules, chaos/nemesis.py) expand into faults, merged into `Scenario.faults`.
"""

from __future__ import annotations

import copy
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node.units import parse_duration
from orchestration.systems import CHAOSBED, System

FAULT_KINDS: dict[str, tuple[set[str], set[str]]] = {
    # kind: (required keys, optional keys) besides `at` and `kind`
    "partition": ({"from", "to"}, {"one_way", "for"}),
    "split": ({"groups"}, {"for"}),
    "heal": (set(), set()),
    "loss": ({"from", "to", "probability"}, {"for"}),
    "delay": ({"from", "to", "delay"}, {"jitter", "for"}),
    "reorder": ({"from", "to", "probability"}, {"for"}),
    "duplicate": ({"from", "to", "probability"}, {"for"}),
    "discard": ({"match"}, {"from", "to", "count", "probability", "action", "delay", "for"}),
    "kill": ({"member"}, set()),
    "restart": ({"member"}, set()),
    "pause": ({"member"}, set()),
    "resume": ({"member"}, set()),
    "close-connection": ({"member", "peer"}, set()),
    "set": ({"member", "property", "value"}, set()),
    "leave": ({"member"}, set()),
}
NETWORK_FAULTS = {"partition", "split", "heal", "loss", "delay", "reorder", "duplicate", "discard"}
CHECKS = {
    "fifo",
    "exactly_once",
    "complete",
    "no_phantoms",
    "views_converge",
    "delivered_within",
    "control_per_heal",
}
# What a bug's `violates` may name: the checks, and the runner's own `timeout`.
VIOLATIONS = CHECKS | {"timeout"}
BUG_KEYS = {"id", "title", "layer", "breaks", "source", "flawed", "fixed", "violates"}


class ScenarioError(ValueError):
    """A scenario that cannot run: names the field and the reason."""


@dataclass
class Workload:
    kind: str
    senders: list[str]
    dests: list[str]  # unicast destinations ([] for multicast)
    count: int
    size: int
    rate: float | None
    start: float


@dataclass
class Fault:
    at: float
    kind: str
    args: dict[str, Any]
    duration: float | None = None  # `for`: removed automatically after this long

    def members(self, key: str) -> list[str]:
        value = self.args.get(key)
        return [value] if isinstance(value, str) else list(value or [])


@dataclass
class Scenario:
    name: str
    seed: int
    timeout: float
    members: list[str]
    stack: str
    transport: str
    properties: dict[str, dict[str, Any]]
    workloads: list[Workload]
    faults: list[Fault]
    checks: dict[str, Any]
    raw: dict[str, Any] = field(repr=False)
    bug: Bug | None = None
    system: System = CHAOSBED  # what the members run (orchestration/systems/): chaosbed's own, or a foreign system


@dataclass
class Bug:
    """A known-bug scenario's `[bug]` table: the same schedule FAILS on the flawed variant (exactly the checks in
    `violates`) and PASSES on the fixed one. Variants are settings (dotted keys as in --set) applied to the file."""

    id: str
    title: str
    layer: str
    breaks: str
    source: str
    flawed: dict[str, Any]
    fixed: dict[str, Any]
    violates: list[str]

    def settings(self, variant: str) -> dict[str, Any]:
        if variant not in ("flawed", "fixed"):
            raise ValueError(f"variant must be flawed or fixed, not {variant!r}")
        return dict(self.flawed if variant == "flawed" else self.fixed)


def _need(cond: bool, path: str, reason: str) -> None:
    if not cond:
        raise ScenarioError(f"{path}: {reason}")


def _duration(value: Any, path: str) -> float:
    return parse_duration(value, path, non_negative=True, error=ScenarioError)


def _int(value: Any, path: str, minimum: int = 0) -> int:
    _need(isinstance(value, int) and not isinstance(value, bool), path, f"must be an integer, not {value!r}")
    _need(value >= minimum, path, f"must be >= {minimum}")
    return value


def _probability(value: Any, path: str) -> float:
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            value = float(value.strip()[:-1]) / 100
        except ValueError:
            raise ScenarioError(f"{path}: not a probability: {value!r}") from None
    _need(isinstance(value, int | float) and not isinstance(value, bool), path, f"not a probability: {value!r}")
    _need(0 <= value <= 1, path, f"must be in [0, 1] (or a percentage), not {value}")
    return float(value)


def _member_list(value: Any, path: str, members: list[str], *, allow_star: bool = True) -> list[str]:
    if value == "*" and allow_star:
        return list(members)
    names = [value] if isinstance(value, str) else value
    _need(
        isinstance(names, list) and names and all(isinstance(n, str) for n in names),
        path,
        "must be a member name, a list of names" + (', or "*"' if allow_star else ""),
    )
    for n in names:
        _need(n in members, path, f"unknown member {n!r}; members: {', '.join(members)}")
    return list(names)


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """--set a.b.c=VALUE: VALUE is parsed as TOML (numbers, booleans, strings, lists), else taken as a string."""
    settings: dict[str, Any] = {}
    for item in overrides:
        key, eq, text = item.partition("=")
        _need(bool(eq and key), f"--set {item}", "write KEY=VALUE with a dotted key, e.g. cluster.stack=unicast2")
        try:
            settings[key] = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            settings[key] = text
    return apply_settings(raw, settings, origin="--set")


def apply_settings(raw: dict[str, Any], settings: dict[str, Any], *, origin: str = "--set") -> dict[str, Any]:
    """A copy of `raw` with each dotted key set to its value. A numeric part indexes an array of tables:
    `faults.1.match` is the `match` of the second `[[faults]]` (counting from 0)."""
    data = copy.deepcopy(raw)
    for key, value in settings.items():
        where = f"{origin} {key}"
        parts = key.split(".")
        _need(all(parts), where, "a dotted key with no empty part, e.g. cluster.stack")
        node: Any = data
        for i, p in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(node, list):
                _need(p.isdigit(), where, f"{'.'.join(parts[:i])} is an array: index it with a number")
                _need(int(p) < len(node), where, f"{'.'.join(parts[:i])} has {len(node)} entries, no [{p}]")
                if last:
                    node[int(p)] = value
                else:
                    node = node[int(p)]
            elif isinstance(node, dict):
                if last:
                    node[p] = value
                else:
                    node = node.setdefault(p, {})
            else:
                _need(False, where, f"{'.'.join(parts[:i])} is not a table")
    return data


def load(
    path: str | Path,
    overrides: list[str] | None = None,
    seed: int | None = None,
    settings: dict[str, Any] | None = None,
) -> Scenario:
    """A scenario file with `settings` (dotted key -> value: matrix axes, bug variants) then `--set` overrides
    applied, and the seed if given."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except OSError as e:
        raise ScenarioError(f"{path}: cannot read: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(f"{path}: not valid TOML: {e}") from None
    if settings:
        raw = apply_settings(raw, settings, origin="setting")
    raw = apply_overrides(raw, overrides or [])
    if seed is not None:
        raw["seed"] = seed
    return parse(raw)


def parse(raw: dict[str, Any]) -> Scenario:
    known_top = {"name", "seed", "timeout", "cluster", "workload", "faults", "nemesis", "checks", "bug"}
    for key in raw:
        _need(key in known_top, key, f"unknown key; a scenario has: {', '.join(sorted(known_top))}")
    name = raw.get("name", "scenario")
    _need(isinstance(name, str) and bool(name), "name", "must be a non-empty string")
    seed = _int(raw.get("seed", 0), "seed")
    timeout = _duration(raw.get("timeout", "60s"), "timeout")
    cluster = raw.get("cluster")
    _need(isinstance(cluster, dict), "cluster", "a [cluster] table is required")
    members_raw = cluster.get("members")
    if isinstance(members_raw, int) and not isinstance(members_raw, bool):
        _need(1 <= members_raw <= 26, "cluster.members", "must be 1..26 (or a list of names)")
        members = [chr(ord("A") + i) for i in range(members_raw)]
    else:
        _need(isinstance(members_raw, list) and bool(members_raw), "cluster.members", "a number or a list of names")
        members = members_raw
        _need(
            all(isinstance(m, str) and m and "/" not in m and len(m) <= 32 for m in members),
            "cluster.members",
            "names are non-empty strings without '/'",
        )
        _need(len(set(members)) == len(members), "cluster.members", "names must be distinct")
    system, stack, transport, properties = _cluster(cluster)
    workloads = [
        _workload(w, f"workload[{i}]", members, stack, system.native) for i, w in enumerate(_list(raw, "workload"))
    ]
    faults = [_fault(f, f"faults[{i}]", members) for i, f in enumerate(_list(raw, "faults"))]
    nemeses = _list(raw, "nemesis")
    for i, n in enumerate(nemeses):
        faults.extend(_nemesis(n, f"nemesis[{i}]", i, seed, members))
    _refuse_for_system(system, raw, faults, workloads)
    if nemeses:
        faults.sort(key=lambda f: f.at)  # stable: at equal times, [[faults]] first, then the nemeses in file order
    checks = raw.get("checks", {"fifo": True, "exactly_once": True, "complete": True, "no_phantoms": True})
    _need(isinstance(checks, dict), "checks", "must be a table")
    for key, value in checks.items():
        _need(key in CHECKS, f"checks.{key}", f"unknown check; checks: {', '.join(sorted(CHECKS))}")
        if key in ("views_converge", "delivered_within") and value is not False:
            checks[key] = 10.0 if value is True else _duration(value, f"checks.{key}")
        elif key == "control_per_heal" and value is not False:
            _need(
                isinstance(value, dict) and bool(value),
                f"checks.{key}",
                "a table of history event kinds and their bound per heal, e.g. { sync = 20 }",
            )
            for event, bound in value.items():
                _int(bound, f"checks.{key}.{event}")
        else:
            _need(isinstance(value, bool), f"checks.{key}", "must be true or false")
    bug = _bug(raw["bug"]) if "bug" in raw else None
    return Scenario(
        name, seed, timeout, members, stack, transport, properties, workloads, faults, checks, raw, bug, system
    )


def _bug(b: Any) -> Bug:
    _need(isinstance(b, dict), "bug", "must be a table")
    for key in b:
        _need(key in BUG_KEYS, f"bug.{key}", f"unknown key; a [bug] table has: {', '.join(sorted(BUG_KEYS))}")
    for key in ("id", "title"):
        _need(isinstance(b.get(key), str) and bool(b.get(key)), f"bug.{key}", "a non-empty string is required")
    for key in ("layer", "breaks", "source"):
        _need(isinstance(b.get(key, ""), str), f"bug.{key}", "must be a string")
    for key in ("flawed", "fixed"):
        _need(isinstance(b.get(key), dict), f"bug.{key}", "a table of --set keys and values is required ({} for none)")
    _need(bool(b["flawed"]) or bool(b["fixed"]), "bug", "flawed and fixed must differ in at least one setting")
    violates = b.get("violates")
    _need(
        isinstance(violates, list) and bool(violates) and all(isinstance(v, str) for v in violates),
        "bug.violates",
        "a non-empty list of check names",
    )
    for v in violates:
        _need(v in VIOLATIONS, "bug.violates", f"unknown check {v!r}; checks: {', '.join(sorted(VIOLATIONS))}")
    return Bug(
        b["id"], b["title"], b.get("layer", ""), b.get("breaks", ""), b.get("source", ""),
        dict(b["flawed"]), dict(b["fixed"]), list(violates),
    )  # fmt: skip


def _list(raw: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = raw.get(key, [])
    _need(
        isinstance(value, list) and all(isinstance(v, dict) for v in value),
        key,
        f"must be an array of tables ([[{key}]])",
    )
    return value


CLUSTER_KEYS = {"members", "stack", "transport", "properties", "system", "member"}


def _cluster(cluster: dict[str, Any]) -> tuple[System, str, str, dict[str, dict[str, Any]]]:
    """The [cluster] table but its members: the system, the stack (chaosbed's, or a foreign system's free text),
    the transport and the protocol properties. Unknown keys are refused (`stak` is not silently the default stack)."""
    from node.stack import STACKS
    from orchestration.systems.definition import SystemProblem, cluster_refusals, from_cluster

    for key in cluster:
        _need(key in CLUSTER_KEYS, f"cluster.{key}", f"unknown key; [cluster] has: {', '.join(sorted(CLUSTER_KEYS))}")
    try:
        system = from_cluster(cluster)
    except SystemProblem as e:
        raise ScenarioError(str(e)) from None
    for path, reason in cluster_refusals(system, cluster):
        raise ScenarioError(f"{path}: {reason}")
    transport = cluster.get("transport", "udp")
    _need(transport in ("udp", "tcp"), "cluster.transport", "must be udp or tcp")
    if not system.native:
        return system, system.stack or system.name, transport, {}
    stack = cluster.get("stack", "unicast3")
    _need(stack in STACKS, "cluster.stack", f"unknown stack {stack!r}; stacks: {', '.join(sorted(STACKS))}")
    properties = cluster.get("properties", {})
    _need(
        isinstance(properties, dict) and all(isinstance(v, dict) for v in properties.values()),
        "cluster.properties",
        'a table of protocol tables, e.g. unicast3 = { xmit_interval = "200ms" }',
    )
    _validate_properties(stack, properties)
    return system, stack, transport, properties


def _refuse_for_system(system: System, raw: dict[str, Any], faults: list[Fault], workloads: list[Workload]) -> None:
    """What a foreign system cannot do, refused by name: workloads without control, `set`, `close-connection` and
    (without a wire profile) `discard` faults, written or made by a [[nemesis]]."""
    from orchestration.systems.definition import fault_refusal, workload_refusal

    if system.native:
        return
    if workloads and (why := workload_refusal(system)):
        raise ScenarioError(f"workload[0]: {why}")
    for i, f in enumerate(_list(raw, "faults")):
        if why := fault_refusal(system, str(f.get("kind"))):
            raise ScenarioError(f"faults[{i}].kind: {why}")
    for f in faults:  # a nemesis's faults (its kinds are all allowed today)
        if why := fault_refusal(system, f.kind):
            raise ScenarioError(f"nemesis: {why}")


def _validate_properties(stack: str, properties: dict[str, dict[str, Any]]) -> None:
    from node.stack import build_stack

    try:
        build_stack("A", stack, properties)
    except ValueError as e:
        raise ScenarioError(f"cluster.properties: {e}") from None


def _workload(w: dict[str, Any], path: str, members: list[str], stack: str, native: bool = True) -> Workload:
    allowed = {"kind", "from", "to", "count", "size", "rate", "start"}
    for key in w:
        _need(key in allowed, f"{path}.{key}", f"unknown key; a workload has: {', '.join(sorted(allowed))}")
    kind = w.get("kind")
    _need(kind in ("unicast", "multicast"), f"{path}.kind", "must be unicast or multicast")
    if kind == "multicast":
        _need("+" in stack or not native, f"{path}.kind", f"stack {stack!r} has no multicast protocol")
        _need("to" not in w, f"{path}.to", "a multicast goes to the group; leave `to` out")
    senders = _member_list(w.get("from"), f"{path}.from", members)
    dests = _member_list(w.get("to"), f"{path}.to", members) if kind == "unicast" else []
    if kind == "unicast":
        _need(
            any(s != d for s in senders for d in dests),
            f"{path}.to",
            "no destination other than the sender itself (a member does not send unicasts to itself)",
        )
    rate = w.get("rate")
    if rate is not None:
        _need(
            isinstance(rate, int | float) and not isinstance(rate, bool) and rate > 0,
            f"{path}.rate",
            "messages/s, > 0 (leave out for as fast as flow control allows)",
        )
    return Workload(
        kind,
        senders,
        dests,
        _int(w.get("count", 1), f"{path}.count"),
        _int(w.get("size", 100), f"{path}.size"),
        float(rate) if rate else None,
        _duration(w.get("start", "0s"), f"{path}.start"),
    )


def _fault(f: dict[str, Any], path: str, members: list[str]) -> Fault:
    kind = f.get("kind")
    _need(kind in FAULT_KINDS, f"{path}.kind", f"unknown fault kind {kind!r}; kinds: {', '.join(FAULT_KINDS)}")
    required, optional = FAULT_KINDS[kind]
    for key in f:
        _need(
            key in required | optional | {"at", "kind"},
            f"{path}.{key}",
            f"not a key of a {kind} fault; it takes: {', '.join(sorted(required | optional | {'at'}))}",
        )
    for key in required:
        _need(key in f, f"{path}.{key}", f"a {kind} fault needs it")
    at = _duration(f.get("at", "0s"), f"{path}.at")
    duration = _duration(f["for"], f"{path}.for") if "for" in f else None
    args = {k: v for k, v in f.items() if k not in ("at", "kind", "for")}
    for key in ("from", "to"):
        if key in args:
            args[key] = _member_list(args[key], f"{path}.{key}", members)
    for key in ("member", "peer"):
        if key in args:
            args[key] = _member_list(args[key], f"{path}.{key}", members, allow_star=False)[0]
    if "probability" in args:
        args["probability"] = _probability(args["probability"], f"{path}.probability")
    for key in ("delay", "jitter"):
        if key in args:
            args[key] = _duration(args[key], f"{path}.{key}")
    if kind == "split":
        groups = args["groups"]
        _need(isinstance(groups, list) and len(groups) >= 2, f"{path}.groups", "at least two groups of members")
        seen: set[str] = set()
        for i, g in enumerate(groups):
            names = _member_list(g, f"{path}.groups[{i}]", members, allow_star=False)
            _need(not seen & set(names), f"{path}.groups[{i}]", "a member is in one group only")
            seen |= set(names)
    if kind == "discard":
        from chaos.rules import RuleError, parse_match

        try:
            parse_match(args["match"])
        except RuleError as e:
            raise ScenarioError(f"{path}.match: {e}") from None
        if "count" in args:
            _int(args["count"], f"{path}.count", 1)
        action = args.get("action", "drop")
        _need(
            action in ("drop", "delay", "duplicate", "reorder"), f"{path}.action", "drop | delay | duplicate | reorder"
        )
    if kind == "set":
        prop = args["property"]
        _need(
            isinstance(prop, str) and prop.count(".") == 1,
            f"{path}.property",
            "PROTOCOL.PROPERTY, e.g. nakack2.xmit_interval",
        )
    if "one_way" in args:
        _need(isinstance(args["one_way"], bool), f"{path}.one_way", "must be true or false")
    return Fault(at, kind, args, duration)


NEMESIS_KEYS = {"kind", "start", "interval", "for", "rounds", "seed"}


def _nemesis(n: dict[str, Any], path: str, index: int, scenario_seed: int, members: list[str]) -> list[Fault]:
    """A `[[nemesis]]` entry expanded by chaos.nemesis into faults, each validated like a hand-written one. Without a
    `seed` the entry's seed is derived from the scenario seed and the index (so `--seed N` changes every nemesis);
    `raw` keeps the entry as written, so the scenario as run replays the same schedule."""
    from chaos import nemesis

    for key in n:
        _need(key in NEMESIS_KEYS, f"{path}.{key}", f"unknown key; a nemesis has: {', '.join(sorted(NEMESIS_KEYS))}")
    kinds = ", ".join(nemesis.KINDS)
    _need("kind" in n, f"{path}.kind", f"a nemesis needs it; kinds: {kinds}")
    kind = n["kind"]
    _need(
        isinstance(kind, str) and kind in nemesis.KINDS,
        f"{path}.kind",
        f"unknown nemesis kind {kind!r}; kinds: {kinds}",
    )
    for key in ("interval", "for"):
        _need(key in n, f"{path}.{key}", "a nemesis needs it (rounds start every `interval`; each lasts `for`)")
    start = _duration(n.get("start", "0s"), f"{path}.start")
    interval = _duration(n["interval"], f"{path}.interval")
    duration = _duration(n["for"], f"{path}.for")
    rounds = _int(n.get("rounds", 1), f"{path}.rounds", 1)
    seed = _int(n["seed"], f"{path}.seed") if "seed" in n else nemesis.derive_seed(scenario_seed, index)
    try:
        raws = nemesis.schedule(
            kind, members, seed=seed, start=start, interval=interval, duration=duration, rounds=rounds
        )
    except nemesis.NemesisError as e:
        raise ScenarioError(f"{path}.{e.key}: {e.reason}") from None
    return [_fault(f, path, members) for f in raws]

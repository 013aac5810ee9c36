"""Scenario files (docs/scenario-format.md): parsed, validated, with `--set` overrides.

A bad file raises ScenarioError naming the field (as a dotted path, e.g. `faults[2].kind`) and the reason.
`[[nemesis]]` entries (seeded fault schedules, chaos/nemesis.py) expand into faults, merged into `Scenario.faults`.
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from node import fault_kinds
from node.fault_kinds import DISCARD_ACTIONS, KINDS, ValueType
from node.units import parse_duration
from orchestration.bug_table import Bug, parse_bug
from orchestration.cluster import Properties
from orchestration.systems import CHAOSBED, System

TomlTable = dict[str, object]  # a table of a TOML file, as tomllib reads it

# The fault kinds and their keys: node/fault_kinds.py. A `heal` ends network faults, so it needs a network too.
NETWORK_FAULTS = {*fault_kinds.NETWORK, "heal"}
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
    """A fault of the file, validated: its arguments normalised as node/fault_kinds.py's value types say (member
    lists written out, one member a name, probabilities in 0..1, durations in seconds); the others as written."""

    at: float
    kind: str
    args: dict[str, object]
    duration: float | None = None  # `for`: removed automatically after this long
    nemesis: tuple[int, int] | None = None  # made by [[nemesis]] entry i in its round r (1-based): (i, r)

    def members(self, key: str) -> list[str]:
        value = self.args.get(key)
        return [value] if isinstance(value, str) else [str(v) for v in value] if isinstance(value, list) else []

    @property
    def member(self) -> str:
        """A member action's member."""
        return str(self.args["member"])


@dataclass
class Scenario:
    name: str
    seed: int
    timeout: float
    members: list[str]
    stack: str
    transport: str
    properties: Properties
    workloads: list[Workload]
    faults: list[Fault]
    checks: dict[str, object]  # check -> true/false, or its bound (seconds; control_per_heal: event -> count)
    raw: TomlTable = field(repr=False)
    bug: Bug | None = None
    system: System = CHAOSBED  # what the members run (orchestration/systems/): chaosbed's own, or a foreign system


def _need(cond: bool, path: str, reason: str) -> None:
    if not cond:
        raise ScenarioError(f"{path}: {reason}")


def _duration(value: object, path: str) -> float:
    return parse_duration(value, path, non_negative=True, error=ScenarioError)


def _int(value: object, path: str, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ScenarioError(f"{path}: must be an integer, not {value!r}")
    _need(value >= minimum, path, f"must be >= {minimum}")
    return value


def _probability(value: object, path: str) -> float:
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            value = float(value.strip()[:-1]) / 100
        except ValueError:
            raise ScenarioError(f"{path}: not a probability: {value!r}") from None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ScenarioError(f"{path}: not a probability: {value!r}")
    _need(0 <= value <= 1, path, f"must be in [0, 1] (or a percentage), not {value}")
    return float(value)


def _member_list(value: object, path: str, members: list[str], *, allow_star: bool = True) -> list[str]:
    if value == "*" and allow_star:
        return list(members)
    names = [value] if isinstance(value, str) else value
    if not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)):
        raise ScenarioError(f"{path}: must be a member name, a list of names" + (', or "*"' if allow_star else ""))
    for n in names:
        _need(n in members, path, f"unknown member {n!r}; members: {', '.join(members)}")
    return list(names)


def _table(value: object, path: str, reason: str) -> TomlTable:
    if not isinstance(value, dict):
        raise ScenarioError(f"{path}: {reason}")
    return value


def apply_overrides(raw: TomlTable, overrides: list[str]) -> TomlTable:
    """--set a.b.c=VALUE: VALUE is parsed as TOML (numbers, booleans, strings, lists), else taken as a string."""
    settings: dict[str, object] = {}
    for item in overrides:
        key, eq, text = item.partition("=")
        _need(bool(eq and key), f"--set {item}", "write KEY=VALUE with a dotted key, e.g. cluster.stack=unicast2")
        try:
            settings[key] = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            settings[key] = text
    return apply_settings(raw, settings, origin="--set")


def apply_settings(raw: TomlTable, settings: Mapping[str, object], *, origin: str = "--set") -> TomlTable:
    """A copy of `raw` with each dotted key set to its value. A numeric part indexes an array of tables:
    `faults.1.match` is the `match` of the second `[[faults]]` (counting from 0)."""
    data = copy.deepcopy(raw)
    for key, value in settings.items():
        where = f"{origin} {key}"
        parts = key.split(".")
        _need(all(parts), where, "a dotted key with no empty part, e.g. cluster.stack")
        node: object = data
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
    settings: Mapping[str, object] | None = None,
) -> Scenario:
    """A scenario file with its `[per_system]` settings for the cluster's system, then `settings` (dotted key ->
    value: matrix axes, bug variants), then `--set` overrides applied (each layer wins over the one before), and the
    seed if given."""
    file = read_raw(path)

    def layered(base: TomlTable) -> TomlTable:
        raw = apply_settings(base, settings, origin="setting") if settings else base
        return apply_overrides(raw, overrides or [])

    raw = layered(file)
    if "per_system" in file:  # the system is known only once the settings are applied
        own = _per_system(file.get("per_system"), raw.get("cluster"))
        base = {k: v for k, v in file.items() if k != "per_system"}
        raw = layered(apply_settings(base, own, origin="per_system") if own else base)
    if seed is not None:
        raw["seed"] = seed
    return parse(with_named_system(with_stack_file(raw, Path(path).parent), Path(path).parent))


def with_stack_file(raw: TomlTable, origin: Path) -> TomlTable:
    """A relative `cluster.stack` file (*.xml) that is not there from the working directory but is beside the
    scenario file (a catalogue bug's own JGroups stack, scenarios/bugs/stacks/) made absolute."""
    cluster = raw.get("cluster")
    stack = cluster.get("stack") if isinstance(cluster, dict) else None
    if not isinstance(stack, str) or not stack.endswith(".xml") or Path(stack).expanduser().is_absolute():
        return raw
    beside = origin / stack
    if Path(stack).exists() or not beside.is_file():
        return raw
    assert isinstance(cluster, dict)
    return {**raw, "cluster": {**cluster, "stack": str(beside.resolve())}}


def with_named_system(raw: TomlTable, origin: Path) -> TomlTable:
    """The scenario with the [cluster.member] table of a system named in a user's systems.toml
    (orchestration/systems/user.py) written in, so that what runs and what the run folder keeps say what it is;
    unchanged for chaosbed's own, a registered system or an inline one."""
    from orchestration.systems import named
    from orchestration.systems.definition import SystemProblem
    from orchestration.systems.user import find

    cluster = raw.get("cluster")
    if not isinstance(cluster, dict) or "member" in cluster:
        return raw
    name = cluster.get("system")
    if not isinstance(name, str) or named(name) is not None:
        return raw
    try:
        found = find(name, origin)
    except SystemProblem as e:
        raise ScenarioError(str(e)) from None
    if found is None:
        return raw  # parse says it is unknown
    return {**raw, "cluster": {**cluster, "member": found[1]}}


def read_raw(path: str | Path) -> TomlTable:
    """A scenario file's TOML table, unparsed (ScenarioError if it cannot be read or is not TOML)."""
    return read_toml(path, ScenarioError)


def read_toml(path: str | Path, error: Callable[[str], Exception]) -> TomlTable:
    """A TOML file's table; `error(message)` is raised when it cannot be read, is not UTF-8 or is not TOML."""
    try:
        return tomllib.loads(read_text(path, error))
    except tomllib.TOMLDecodeError as e:
        raise error(f"{path}: not valid TOML: {e}") from None


def read_text(path: str | Path, error: Callable[[str], Exception]) -> str:
    """A UTF-8 text file's content; `error(message)` is raised when it cannot be read or is not UTF-8."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise error(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        bad = f"byte {e.start} is {e.object[e.start]:#04x}"
        raise error(f"{path}: not UTF-8 text ({bad}); TOML files are UTF-8") from None


def _per_system(table: object, cluster: object) -> dict[str, object]:
    """The `[per_system.NAME]` settings of the cluster's system (chaosbed's when [cluster] names none): dotted keys
    as in --set, so that one file runs on several systems (a matrix's cluster.system axis)."""
    per = _table(table, "per_system", "a table of systems, each a table of dotted keys, e.g. "
                 '[per_system.chaosbed] "cluster.stack" = "unicast3"')  # fmt: skip
    system = cluster.get("system", "chaosbed") if isinstance(cluster, dict) else "chaosbed"
    for name, settings in per.items():
        _table(settings, f"per_system.{name}", "a table of dotted keys and values, as --set takes them")
    own = per.get(str(system), {})
    assert isinstance(own, dict)
    return own


def parse(raw: TomlTable) -> Scenario:
    known_top = {"name", "seed", "timeout", "cluster", "workload", "faults", "nemesis", "checks", "bug", "per_system"}
    for key in raw:
        _need(key in known_top, key, f"unknown key; a scenario has: {', '.join(sorted(known_top))}")
    if "per_system" in raw:  # parsed without load(): apply it (no settings to layer above it)
        own = _per_system(raw["per_system"], raw.get("cluster"))
        raw = apply_settings({k: v for k, v in raw.items() if k != "per_system"}, own, origin="per_system")
    name = raw.get("name", "scenario")
    if not isinstance(name, str) or not name:
        raise ScenarioError("name: must be a non-empty string")
    seed = _int(raw.get("seed", 0), "seed")
    timeout = _duration(raw.get("timeout", "60s"), "timeout")
    cluster = _table(raw.get("cluster"), "cluster", "a [cluster] table is required")
    members_raw = cluster.get("members")
    if isinstance(members_raw, int) and not isinstance(members_raw, bool):
        _need(1 <= members_raw <= 26, "cluster.members", "must be 1..26 (or a list of names)")
        members = [chr(ord("A") + i) for i in range(members_raw)]
    else:
        if not isinstance(members_raw, list) or not members_raw:
            raise ScenarioError("cluster.members: a number or a list of names")
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
    faults = [_fault(f, f"faults[{i}]", members, system.wire) for i, f in enumerate(_list(raw, "faults"))]
    nemeses = _list(raw, "nemesis")
    for i, n in enumerate(nemeses):
        faults.extend(_nemesis(n, f"nemesis[{i}]", i, seed, members))
    _refuse_for_system(system, raw, faults, workloads, transport)
    if nemeses:
        faults.sort(key=lambda f: f.at)  # stable: at equal times, [[faults]] first, then the nemeses in file order
    default_checks = {"fifo": True, "exactly_once": True, "complete": True, "no_phantoms": True}
    checks = _table(raw.get("checks", default_checks), "checks", "must be a table")
    for key, value in checks.items():
        _need(key in CHECKS, f"checks.{key}", f"unknown check; checks: {', '.join(sorted(CHECKS))}")
        if key in ("views_converge", "delivered_within") and value is not False:
            checks[key] = 10.0 if value is True else _duration(value, f"checks.{key}")
        elif key == "control_per_heal" and value is not False:
            reason = "a table of history event kinds and their bound per heal, e.g. { sync = 20 }"
            bounds = _table(value, f"checks.{key}", reason)
            _need(bool(bounds), f"checks.{key}", reason)
            for event, bound in bounds.items():
                _int(bound, f"checks.{key}.{event}")
        else:
            _need(isinstance(value, bool), f"checks.{key}", "must be true or false")
    bug = _bug(raw["bug"]) if "bug" in raw else None
    return Scenario(
        name, seed, timeout, members, stack, transport, properties, workloads, faults, checks, raw, bug, system
    )


def _bug(raw: object) -> Bug:
    return parse_bug(raw, _need, _table, VIOLATIONS)


def _list(raw: TomlTable, key: str) -> list[TomlTable]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ScenarioError(f"{key}: must be an array of tables ([[{key}]])")
    return value


CLUSTER_KEYS = {"members", "stack", "transport", "properties", "system", "member", "version"}


def _cluster(cluster: TomlTable) -> tuple[System, str, str, Properties]:
    """The [cluster] table but its members: the system, the stack (chaosbed's, or a foreign system's free text),
    the transport and the protocol properties. Unknown keys are refused (`stak` is not silently the default stack)."""
    from node.stack import STACKS
    from orchestration.systems.definition import SystemProblem, cluster_refusals, foreign_release, from_cluster

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
        try:
            system = foreign_release(system, cluster)
        except SystemProblem as e:
            raise ScenarioError(str(e)) from None
        if system.transport:
            _need(
                "transport" not in cluster or transport == system.transport,
                "cluster.transport",
                f"system {system.name!r} with stack {system.stack!r} runs over {system.transport}; leave it out",
            )
            transport = system.transport
        return system, system.stack or system.name, str(transport), {}
    stack = cluster.get("stack", "unicast3")
    if not isinstance(stack, str) or stack not in STACKS:
        raise ScenarioError(f"cluster.stack: unknown stack {stack!r}; stacks: {', '.join(sorted(STACKS))}")
    properties = cluster.get("properties", {})
    if not isinstance(properties, dict) or not all(isinstance(v, dict) for v in properties.values()):
        raise ScenarioError(
            'cluster.properties: a table of protocol tables, e.g. unicast3 = { xmit_interval = "200ms" }'
        )
    _validate_properties(stack, properties)
    return system, stack, str(transport), properties


def _refuse_for_system(
    system: System, raw: TomlTable, faults: list[Fault], workloads: list[Workload], transport: str
) -> None:
    """What a foreign system cannot do, refused by name: workloads without control, `set`, `close-connection` and
    (without a wire profile) `discard` faults, written or made by a [[nemesis]]; and a discard over TCP, for all."""
    from orchestration.systems.definition import fault_refusal, workload_refusal

    if workloads and (why := workload_refusal(system)):
        raise ScenarioError(f"workload[0]: {why}")
    for i, table in enumerate(_list(raw, "faults")):
        if why := fault_refusal(system, str(table.get("kind")), transport):
            raise ScenarioError(f"faults[{i}].kind: {why}")
    for fault in faults:  # a nemesis's faults (its kinds are all allowed today)
        if why := fault_refusal(system, fault.kind, transport):
            raise ScenarioError(f"nemesis: {why}")


def _validate_properties(stack: str, properties: Properties) -> None:
    from node.stack import build_stack

    try:
        build_stack("A", stack, properties)
    except ValueError as e:
        raise ScenarioError(f"cluster.properties: {e}") from None


def _workload(w: TomlTable, path: str, members: list[str], stack: str, native: bool = True) -> Workload:
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
    if rate is not None and (not isinstance(rate, int | float) or isinstance(rate, bool) or rate <= 0):
        raise ScenarioError(f"{path}.rate: messages/s, > 0 (leave out for as fast as flow control allows)")
    return Workload(
        str(kind),
        senders,
        dests,
        _int(w.get("count", 1), f"{path}.count"),
        _int(w.get("size", 100), f"{path}.size"),
        float(rate) if rate else None,
        _duration(w.get("start", "0s"), f"{path}.start"),
    )


def _fault(f: TomlTable, path: str, members: list[str], wire: str = "chaosbed") -> Fault:
    kind = f.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise ScenarioError(f"{path}.kind: unknown fault kind {kind!r}; kinds: {', '.join(KINDS)}")
    spec = KINDS[kind]
    for key in f:
        _need(
            key in (*spec.key_names, "at", "kind"),
            f"{path}.{key}",
            f"not a key of a {kind} fault; it takes: {', '.join(sorted({*spec.key_names, 'at'}))}",
        )
    for key in spec.required:
        _need(key in f, f"{path}.{key}", f"a {kind} fault needs it")
    at = _duration(f.get("at", "0s"), f"{path}.at")
    duration = _duration(f["for"], f"{path}.for") if "for" in f else None
    args = {k: v for k, v in f.items() if k not in ("at", "kind", "for")}
    given = [k for k in spec.keys if k.name in args]
    for k in sorted(given, key=lambda k: _VALIDATION_ORDER.index(k.type)):  # stable: the kind's key order within
        args[k.name] = _VALUES[k.type](args[k.name], f"{path}.{k.name}", members)
        if k.type is ValueType.MATCH and wire != "none":  # "none": the system refuses discards (_refuse_for_system)
            _match_in(str(args[k.name]), f"{path}.{k.name}", wire)
    return Fault(at, kind, args, duration)


def _split_groups(groups: object, path: str, members: list[str]) -> object:
    if not isinstance(groups, list) or len(groups) < 2:
        raise ScenarioError(f"{path}: at least two groups of members")
    seen: set[str] = set()
    for i, g in enumerate(groups):
        names = _member_list(g, f"{path}[{i}]", members, allow_star=False)
        _need(not seen & set(names), f"{path}[{i}]", "a member is in one group only")
        seen |= set(names)
    return groups


def _match(value: object, path: str, members: list[str]) -> object:
    if not isinstance(value, str):
        raise ScenarioError(f"{path}: a message expression (a string), e.g. UNICAST3.ACK(seqno=50), not {value!r}")
    return value


def _match_in(value: str, path: str, wire: str) -> None:
    """A discard's match read in the wire profile of the cluster's system (chaos/profiles/)."""
    from chaos.profiles import parse_match
    from chaos.rules import RuleError

    try:
        parse_match(value, wire)
    except RuleError as e:
        raise ScenarioError(f"{path}: {e} (wire profile {wire})") from None


def _action(value: object, path: str, members: list[str]) -> object:
    _need(value in DISCARD_ACTIONS, path, " | ".join(DISCARD_ACTIONS))
    return value


def _property(value: object, path: str, members: list[str]) -> object:
    _need(isinstance(value, str) and value.count(".") == 1, path, "PROTOCOL.PROPERTY, e.g. nakack2.xmit_interval")
    return value


def _flag(value: object, path: str, members: list[str]) -> object:
    _need(isinstance(value, bool), path, "must be true or false")
    return value


# A fault's values, validated (and member lists, one member, probabilities and durations normalised) type by type
# in this order, so a fault with several bad keys is always reported by the same key.
_VALUES: dict[ValueType, Callable[[object, str, list[str]], object]] = {
    ValueType.MEMBERS: _member_list,
    ValueType.MEMBER: lambda v, path, members: _member_list(v, path, members, allow_star=False)[0],
    ValueType.PROBABILITY: lambda v, path, members: _probability(v, path),
    ValueType.DURATION: lambda v, path, members: _duration(v, path),
    ValueType.GROUPS: _split_groups,
    ValueType.MATCH: _match,
    ValueType.COUNT: lambda v, path, members: _int(v, path, 1),
    ValueType.ACTION: _action,
    ValueType.PROPERTY: _property,
    ValueType.FLAG: _flag,
    ValueType.VALUE: lambda v, path, members: v,
}
_VALIDATION_ORDER = list(_VALUES)


NEMESIS_KEYS = {"kind", "start", "interval", "for", "rounds", "seed"}


def _nemesis(n: TomlTable, path: str, index: int, scenario_seed: int, members: list[str]) -> list[Fault]:
    """A `[[nemesis]]` entry expanded by chaos.nemesis into faults, each validated like a hand-written one. Without a
    `seed` the entry's seed is derived from the scenario seed and the index (so `--seed N` changes every nemesis);
    `raw` keeps the entry as written, so the scenario as run replays the same schedule."""
    from chaos import nemesis

    for key in n:
        _need(key in NEMESIS_KEYS, f"{path}.{key}", f"unknown key; a nemesis has: {', '.join(sorted(NEMESIS_KEYS))}")
    kinds = ", ".join(nemesis.KINDS)
    _need("kind" in n, f"{path}.kind", f"a nemesis needs it; kinds: {kinds}")
    kind = n["kind"]
    if not isinstance(kind, str) or kind not in nemesis.KINDS:
        raise ScenarioError(f"{path}.kind: unknown nemesis kind {kind!r}; kinds: {kinds}")
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
    faults = [_fault(f, path, members) for f in raws]
    for f in faults:  # a round's faults (and a kill's restart) start within [start + i * interval, + interval)
        f.nemesis = (index, int((f.at - start) // interval + 1e-9) + 1)
    return faults

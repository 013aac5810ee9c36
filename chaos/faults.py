"""A network fault as the fault tables hold it: `Fault` (its kind, links and parameters, normalised by
chaos/normalize.py) and `FaultRecord` (a fault in a table: its id, seed, since when, and for a planned fault its
window on the cluster's clock). `TimedFault` is what the scheduler plans: a fault with its window in seconds after t0.

Typed inside chaos/ and orchestration/; JSON only at the edges: chaos.json (the netns engine's state: `to_json` /
`from_json`), the NFQUEUE handler's rules (chaos/render.py) and faults.jsonl (orchestration/fault_log.py, which writes
`Fault.event_fields`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from node.fault_kinds import KINDS
from node.units import parse_duration

JsonObject = dict[str, object]


class ChaosError(RuntimeError):
    """A fault could not be applied; the message says what and what to do."""


@dataclass(frozen=True)
class Fault:
    """A normalised network fault: member lists written out, durations in seconds, probabilities in 0..1. Which
    parameters a kind has: node/fault_kinds.py (None: the kind has none, or it was not given)."""

    kind: str
    sources: tuple[str, ...] = ()  # `from`
    receivers: tuple[str, ...] = ()  # `to`
    groups: tuple[tuple[str, ...], ...] = ()  # split
    one_way: bool | None = None  # partition
    probability: float | None = None
    delay: float | None = None  # seconds: delay, and discard's action delay
    jitter: float | None = None  # seconds: delay
    match: str | None = None  # discard
    action: str | None = None  # discard
    count: int | None = None  # discard: None = every matching message

    def links(self) -> list[tuple[str, str]]:
        """(source, receiver) pairs the fault acts on."""
        if self.kind == "split":
            groups = self.groups
            return [(a, b) for i, g in enumerate(groups) for j, h in enumerate(groups) if i != j for a in g for b in h]
        pairs = [(a, b) for a in self.sources for b in self.receivers if a != b]
        if self.kind == "partition" and not self.one_way:
            pairs += [(b, a) for a, b in pairs if (b, a) not in pairs]
        return pairs

    @property
    def cuts(self) -> bool:
        """Nothing passes its links (partition, split)."""
        return KINDS[self.kind].cuts

    def to_json(self) -> JsonObject:
        """Its keys as the fault tables have always stored them (chaos.json), in their order: kind, then groups or
        from, to and the kind's parameters. `count` is kept when None (every match), `one_way` for a partition."""
        out: JsonObject = {"kind": self.kind}
        if self.kind == "split":
            out["groups"] = [list(g) for g in self.groups]
            return out
        out["from"], out["to"] = list(self.sources), list(self.receivers)
        if self.kind == "partition":
            out["one_way"] = bool(self.one_way)
        if self.probability is not None:
            out["probability"] = self.probability
        if self.kind == "delay":
            out["delay"], out["jitter"] = self.delay, self.jitter
        if self.kind == "discard":
            out.update(match=self.match, action=self.action, count=self.count)
            if self.delay is not None:
                out["delay"] = self.delay
        return out

    def event_fields(self) -> JsonObject:
        """Its keys as a faults.jsonl line writes them (docs/history.md): no null values, durations as the scenario
        files write them ("30ms")."""
        fields = {k: v for k, v in self.to_json().items() if k != "kind" and v is not None}
        for k in ("delay", "jitter"):
            value = fields.get(k)
            if isinstance(value, float):
                fields[k] = f"{value * 1000:g}ms"
        return fields

    @classmethod
    def from_event(cls, line: Mapping[str, object]) -> Fault:
        """From a faults.jsonl line (`event_fields`' form: durations as "30ms")."""
        return cls.from_json({k: parse_duration(v) if k in ("delay", "jitter") else v for k, v in line.items()})

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> Fault:
        """From `to_json`'s form (chaos.json)."""
        return cls(
            kind=_str(d["kind"]),
            sources=_names(d.get("from")),
            receivers=_names(d.get("to")),
            groups=tuple(_names(g) for g in _list(d.get("groups"))),
            one_way=_opt_bool(d.get("one_way")),
            probability=_opt_float(d.get("probability")),
            delay=_opt_float(d.get("delay")),
            jitter=_opt_float(d.get("jitter")),
            match=_opt_str(d.get("match")),
            action=_opt_str(d.get("action")),
            count=_opt_int(d.get("count")),
        )


@dataclass(frozen=True)
class FaultWindow:
    """When a planned fault is in force: start <= now < until, ns on the cluster's clock (CLOCK_MONOTONIC, or the
    simulator's virtual time); until None = until the cluster goes down. chaos.json: {"from": ..., "until": ...}."""

    start: int
    until: int | None

    def to_json(self) -> JsonObject:
        return {"from": self.start, "until": self.until}

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> FaultWindow:
        return cls(_int(d["from"]), _opt_int(d.get("until")))


@dataclass(frozen=True)
class FaultRecord(Mapping[str, object]):
    """A fault in a fault table: its id (f1, f2, ...), the seed of its random choices, when it was added (wall
    clock), its window if it was planned, and with `faults(stats=True)` what the NFQUEUE handler did for its rules
    (`handled`: dropped, delayed, ...). Also a read-only mapping of its JSON form (`to_json`), as the fault tables'
    records were dicts before and users' tests read `record["id"]` (docs/pytest.md)."""

    id: str
    fault: Fault
    seed: int = 0
    since: float = field(default_factory=time.time)
    window: FaultWindow | None = None
    handled: Mapping[str, int] | None = None

    @property
    def kind(self) -> str:
        return self.fault.kind

    def links(self) -> list[tuple[str, str]]:
        return self.fault.links()

    def with_handled(self, handled: Mapping[str, int]) -> FaultRecord:
        return replace(self, handled=dict(handled))

    def to_json(self) -> JsonObject:
        """chaos.json's record (and outcome.json's `handled` entries): id, the fault's keys, seed, window, since."""
        out: JsonObject = {"id": self.id, **self.fault.to_json(), "seed": self.seed}
        if self.window is not None:
            out["window"] = self.window.to_json()
        out["since"] = self.since
        if self.handled is not None:
            out["handled"] = dict(self.handled)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> FaultRecord:
        window, handled = d.get("window"), d.get("handled")
        return cls(
            id=_str(d["id"]),
            fault=Fault.from_json(d),
            seed=_int(d.get("seed", 0)),
            since=float(_number(d.get("since", 0.0))),
            window=FaultWindow.from_json(window) if isinstance(window, Mapping) else None,
            handled={str(k): _int(v) for k, v in handled.items()} if isinstance(handled, Mapping) else None,
        )

    # the read-only mapping of the JSON form
    def __getitem__(self, key: str) -> object:
        return self.to_json()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_json())

    def __len__(self) -> int:
        return len(self.to_json())


@dataclass(frozen=True)
class TimedFault:
    """A fault the scheduler plans: in force from `start` to `end` seconds after the schedule's t0 (end None: until
    the cluster goes down). Both fault tables (netns, simulator) take these in plan()."""

    id: str
    fault: Fault
    seed: int
    start: float
    end: float | None

    def record(self, t0_ns: int) -> FaultRecord:
        """Its fault-table record, with its window on the cluster's clock (t0_ns + start, t0_ns + end)."""
        until = None if self.end is None else t0_ns + round(self.end * 1e9)
        return FaultRecord(self.id, self.fault, self.seed, window=FaultWindow(t0_ns + round(self.start * 1e9), until))


def fault_order(fault_id: str) -> tuple[int, str]:
    """Sorts f2 before f10."""
    return (int(fault_id[1:]), fault_id) if fault_id[1:].isdigit() else (1 << 62, fault_id)


# --- reading JSON values (chaos.json) --------------------------------------------------------------------------------


def _str(v: object) -> str:
    if not isinstance(v, str):
        raise ValueError(f"not a string: {v!r}")
    return v


def _opt_str(v: object) -> str | None:
    return None if v is None else _str(v)


def _int(v: object) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise ValueError(f"not an integer: {v!r}")
    return v


def _opt_int(v: object) -> int | None:
    return None if v is None else _int(v)


def _number(v: object) -> int | float:
    if not isinstance(v, int | float) or isinstance(v, bool):
        raise ValueError(f"not a number: {v!r}")
    return v


def _opt_float(v: object) -> float | None:
    return None if v is None else float(_number(v))


def _opt_bool(v: object) -> bool | None:
    return None if v is None else bool(v)


def _list(v: object) -> list[object]:
    return list(v) if isinstance(v, list | tuple) else []


def _names(v: object) -> tuple[str, ...]:
    return tuple(_str(x) for x in _list(v))

"""A run's statistics: the `stats` of its verdict.json (docs/scenario-format.md, docs/analysis.md) as typed dataclasses.

`RunStats.to_json()` is exactly verdict.json's `stats` object, key for key. A RunStats is also a read-only Mapping
over that JSON, so code written against the dict it used to be (`result.run_stats["required"]["unicast"]`, in users'
tests through the pytest plugin) keeps working; code in this repository reads the attributes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from analysis.cache import RunSummary
from analysis.histogram import percentiles_from_hist
from analysis.results import RunResult

MESSAGE_KINDS = ("unicast", "multicast")
NOT_REQUIRED_REASONS = ("to_crashed", "from_crashed", "left", "excluded")
COUNTED_EVENTS = ("send", "deliver", "view", "xmit", "ack", "conn")  # per member, with control_per_heal's kinds


@dataclass(frozen=True)
class MemberStats:
    alive: bool  # alive at the end
    incarnations: int
    events: int
    counts: dict[str, int]  # events per kind: COUNTED_EVENTS and the kinds control_per_heal lists

    def count(self, kind: str) -> int:
        return self.counts.get(kind, 0)

    def to_json(self) -> dict[str, Any]:
        return {"alive": self.alive, "incarnations": self.incarnations, "events": self.events, **self.counts}


@dataclass(frozen=True)
class Delivered:
    """Messages of some class, and how many of them were delivered."""

    messages: int
    delivered: int

    def to_json(self) -> dict[str, int]:
        return {"messages": self.messages, "delivered": self.delivered}


@dataclass(frozen=True)
class Sends:
    unicast: int
    multicast: int

    def to_json(self) -> dict[str, int]:
        return {"unicast": self.unicast, "multicast": self.multicast}


@dataclass(frozen=True)
class Required:
    """The owed (message, receiver) pairs per kind, and how many were delivered."""

    unicast: Delivered
    multicast: Delivered

    def to_json(self) -> dict[str, dict[str, int]]:
        return {"unicast": self.unicast.to_json(), "multicast": self.multicast.to_json()}


@dataclass(frozen=True)
class NotRequired:
    """The pairs that were not owed, per reason (docs/analysis.md), and how many were delivered anyway."""

    to_crashed: Delivered
    from_crashed: Delivered
    left: Delivered
    excluded: Delivered

    def to_json(self) -> dict[str, dict[str, int]]:
        return {reason: getattr(self, reason).to_json() for reason in NOT_REQUIRED_REASONS}


LatencySummary = dict[str, float]  # count, p50, p90, p99, max (and mean per link), in ms; count as is


@dataclass(frozen=True)
class LatencyStats:
    per_kind: dict[str, LatencySummary]  # kind -> from the merged histograms (about 1 % error)
    per_link: dict[str, dict[str, LatencySummary]]  # "A->B" -> kind -> exact

    def to_json(self) -> dict[str, Any]:
        return {"per_kind": self.per_kind, "per_link": self.per_link}


@dataclass(frozen=True)
class SkippedLine:
    file: str
    line: int | None
    text: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "text": self.text, "reason": self.reason}


@dataclass(frozen=True)
class DeliveredWithin:
    """What delivered_within measured: owed deliveries timed, late ones, the longest time from the base (ms)."""

    bound_s: float
    checked: int
    late: int
    max_ms: float | None

    def to_json(self) -> dict[str, Any]:
        return {"bound_s": self.bound_s, "checked": self.checked, "late": self.late, "max_ms": self.max_ms}


@dataclass(frozen=True)
class ControlPerHeal:
    """What control_per_heal counted: the heals (s since the run's first event), per member and kind the events of
    each recovery interval."""

    bounds: dict[str, int]
    heals_s: list[float]
    counts: dict[str, dict[str, list[int]]]

    def to_json(self) -> dict[str, Any]:
        return {"bounds": self.bounds, "heals_s": self.heals_s, "counts": self.counts}


@dataclass(frozen=True, eq=False)
class RunStats(Mapping[str, Any]):
    """The `stats` of a run's verdict.json. Equality, iteration and indexing are those of its JSON (a Mapping)."""

    events: int
    members: dict[str, MemberStats]
    checks: dict[str, bool | float | dict[str, int]]  # as configured (CheckConfig.as_dict)
    violations: dict[str, int]  # per check
    skipped: list[SkippedLine]
    empty_history_files: list[str]
    faults: int
    sends: Sends
    deliveries: int
    duplicate_deliveries: int  # deliveries after the first of a message at a receiver incarnation
    phantom_deliveries: int  # every delivery of a phantom (never sent by its sender, or not so)
    out_of_order_deliveries: int  # first deliveries not above their stream's running maximum seqno
    required: Required
    not_required: NotRequired
    xmit: int
    ack: int
    latency_ms: LatencyStats
    notes: list[str] = field(default_factory=list)
    delivered_within: DeliveredWithin | None = None  # when configured
    control_per_heal: ControlPerHeal | None = None  # when configured

    @property
    def skipped_lines(self) -> int:
        return len(self.skipped)

    @property
    def ok(self) -> bool:
        return not self.violations

    def configures(self, check: str) -> bool:
        """Whether the run's scenario configures `check` (the bounds appear only when set)."""
        return check in self.checks

    def is_on(self, check: str) -> bool:
        return self.configures(check) and self.checks[check] is not False

    def to_json(self) -> dict[str, Any]:
        """verdict.json's `stats`, key for key."""
        return dict(self._json)

    @cached_property
    def _json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "events": self.events,
            "members": {m: s.to_json() for m, s in self.members.items()},
            "checks": self.checks,
            "violations": self.violations,
            "skipped_lines": self.skipped_lines,
            "skipped": [s.to_json() for s in self.skipped],
            "empty_history_files": self.empty_history_files,
            "faults": self.faults,
            "sends": self.sends.to_json(),
            "deliveries": self.deliveries,
            "duplicate_deliveries": self.duplicate_deliveries,
            "phantom_deliveries": self.phantom_deliveries,
            "out_of_order_deliveries": self.out_of_order_deliveries,
            "required": self.required.to_json(),
            "not_required": self.not_required.to_json(),
            "xmit": self.xmit,
            "ack": self.ack,
            "latency_ms": self.latency_ms.to_json(),
            "notes": self.notes,
        }
        if self.delivered_within is not None:
            doc["delivered_within"] = self.delivered_within.to_json()
        if self.control_per_heal is not None:
            doc["control_per_heal"] = self.control_per_heal.to_json()
        return doc

    def __getitem__(self, key: str) -> Any:
        return self._json[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._json)

    def __len__(self) -> int:
        return len(self._json)


# ---- from a run's results ---------------------------------------------------------------------------------------


def _ms(d: Mapping[str, float]) -> LatencySummary:
    return {k: (round(v / 1e6, 3) if k != "count" else v) for k, v in d.items()}


def _members(res: RunResult) -> dict[str, MemberStats]:
    info = res.info
    counted = dict.fromkeys((*COUNTED_EVENTS, *info.checks.control_kinds))
    out = {}
    for m in info.members:
        evs = info.counters.get(m, {})
        counts = {k: evs.get(k, 0) for k in counted}
        out[m] = MemberStats(bool(info.alive.get(m)), info.final_inc(m) + 1, sum(evs.values()), counts)
    return out


def _latency(res: RunResult) -> LatencyStats:
    per_link: dict[str, dict[str, LatencySummary]] = {}
    for (s, r, kind), lat in sorted(res.latency.items(), key=lambda kv: tuple(map(str, kv[0]))):
        per_link.setdefault(f"{s}->{r}", {})[kind] = _ms(lat)
    per_kind = {k: _ms(percentiles_from_hist(h)) for k, h in sorted(res.hist.items())}
    return LatencyStats(per_kind, per_link)


def _delivered_within(res: RunResult) -> DeliveredWithin | None:
    bound = res.info.checks.delivery_bound
    if bound is None:
        return None
    worst = round(res.recovery_max / 1e6, 3) if res.recovery_max >= 0 else None
    return DeliveredWithin(bound, res.counters["within_checked"], res.counters["within_late"], worst)


def _control_per_heal(res: RunResult) -> ControlPerHeal | None:
    info = res.info
    if not info.checks.control_bounds:
        return None
    heals = info.heals()
    counts = {
        m: {k: res.control.get((m, k), [0] * (len(heals) + 1)) for k in info.checks.control_kinds} for m in info.members
    }
    heals_s = [round((h - info.t_min) / 1e9, 6) for h in heals]
    return ControlPerHeal(dict(info.checks.control_bounds), heals_s, counts)


def run_stats(res: RunResult, summary: RunSummary, skipped: list[SkippedLine], fault_lines_skipped: int) -> RunStats:
    """The statistics of a run: from its results, its ingest summary and the lines skipped in its history files and
    (cut off at the end) in faults.jsonl."""
    c = res.counters
    members = _members(res)
    violations: dict[str, int] = {}
    for v in res.violations:
        violations[v.check] = violations.get(v.check, 0) + 1
    cut = [SkippedLine("faults.jsonl", None, "", "last line cut off")] * fault_lines_skipped
    return RunStats(
        events=summary.events,
        members=members,
        checks=res.info.checks.as_dict(),
        violations=violations,
        skipped=skipped + cut,
        empty_history_files=summary.empty_files,
        faults=len(res.info.faults),
        sends=Sends(c["sends_unicast"], c["sends_multicast"]),
        deliveries=c["deliveries"],
        duplicate_deliveries=c["duplicates"],
        phantom_deliveries=c["phantoms"],
        out_of_order_deliveries=c["reordered"],
        required=Required(*(Delivered(c[f"required_{k}"], c[f"required_delivered_{k}"]) for k in MESSAGE_KINDS)),
        not_required=NotRequired(
            *(Delivered(c[f"not_required_{r}"], c[f"not_required_{r}_delivered"]) for r in NOT_REQUIRED_REASONS)
        ),
        xmit=sum(m.count("xmit") for m in members.values()),
        ack=sum(m.count("ack") for m in members.values()),
        latency_ms=_latency(res),
        notes=res.notes,
        delivered_within=_delivered_within(res),
        control_per_heal=_control_per_heal(res),
    )

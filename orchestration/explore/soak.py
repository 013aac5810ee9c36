"""A soak: `chaosbed explore FILE --soak --backend netns|docker|process --budget 10m` runs one long random nemesis
against FILE's workload on real members, checks the run and says what the cluster held up to.

Where the simulator's search runs many short schedules, a soak runs one: FILE's cluster, its paced workloads
stretched to send for the whole budget, and a [[nemesis]] (combined by default) whose rounds fill it; killed members
are restarted by the nemesis and resume their share of the workload (orchestration/workloads.py), so the load holds
as the run goes on. The run folder is an ordinary one (`chaosbed check DIR`, report.html with a lane per member);
soak.json and the summary add what a soak is for: messages sent and delivered, faults applied, retransmissions, the
send rate over the run (first and last tenth: did the load hold?) and the members' peak RSS."""

from __future__ import annotations

import json
import math
import re
import tomllib
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from chaos.nemesis import KINDS, MIN_MEMBERS
from node.atomic import write_atomic
from node.units import parse_duration
from orchestration.explore.tables import (
    JsonObject,
    TomlTable,
    as_members,
    as_table,
    integer,
    opt_table,
    tables,
    text,
    workloads_of,
)
from orchestration.scenario import ScenarioError

SETTLE_S = 15.0  # the workload and the nemesis end this long before the budget: the last heal's recovery
ROUND_S = 10.0  # default: a nemesis round every 10 s, its faults in force for half of it
FIRST_ROUND_S = 2.0
TIMEOUT_SLACK_S = 120.0  # the run's timeout past the budget (the runner waits for the cluster to go quiet)
BUCKETS = 10
_SEND = re.compile(rb'"event"\s*:\s*"send"')
_STOP = re.compile(rb'"event"\s*:\s*"stop"')
_T = re.compile(rb'"t"\s*:\s*(\d+)')


@dataclass(frozen=True)
class SoakPlan:
    seconds: float  # the budget
    nemesis: str = "combined"
    interval: float = ROUND_S
    seed: int = 0

    @property
    def sending(self) -> float:
        """How long the workloads send (and the nemesis acts)."""
        return self.seconds - SETTLE_S

    @property
    def rounds(self) -> int:
        return math.floor((self.sending - FIRST_ROUND_S) / self.interval + 1e-9)


def soak_scenario(base: Mapping[str, object], plan: SoakPlan) -> TomlTable:
    """The soak's scenario: `base` (load_base: no faults of its own) with its paced workloads sending for the whole
    run and one [[nemesis]] of plan.nemesis filling it. Raises ScenarioError naming what cannot be soaked."""
    if plan.nemesis not in KINDS:
        known = ", ".join(sorted(KINDS))
        raise ScenarioError(f"--nemesis {plan.nemesis!r}: a soak runs one nemesis kind: {known}")
    if plan.interval <= 0:
        raise ScenarioError(f"--interval: a nemesis round needs a duration > 0, not {plan.interval:g}s")
    if plan.rounds < 1:
        need = SETTLE_S + FIRST_ROUND_S + plan.interval
        raise ScenarioError(
            f"--budget: a soak needs at least {need:g}s (one {plan.interval:g}s round and the settling)"
        )
    raw = as_table(json.loads(json.dumps(base)), "scenario")  # a deep copy of plain TOML values
    members = opt_table(raw, "cluster").get("members", [])
    count = members if isinstance(members, int) else len(as_members(members, "cluster.members"))
    if count < MIN_MEMBERS.get(plan.nemesis, 1):
        raise ScenarioError(f"cluster.members: the {plan.nemesis} nemesis needs {MIN_MEMBERS[plan.nemesis]} members")
    workloads = workloads_of(raw)
    if not workloads:
        raise ScenarioError("workload: a soak needs a workload to hold (a paced [[workload]] with a rate)")
    for i, w in enumerate(workloads):
        rate = w.get("rate")
        if not isinstance(rate, int | float) or isinstance(rate, bool):
            raise ScenarioError(
                f"workload[{i}].rate: a soak stretches paced workloads over its budget; give this one a rate "
                f"(messages/s per sender), e.g. --set workload.{i}.rate=100"
            )
        start = parse_duration(w.get("start", 0), f"workload[{i}].start", error=ScenarioError)
        w["count"] = max(1, math.ceil(rate * (plan.sending - start)))
    interval = f"{plan.interval:g}s"
    raw["nemesis"] = [
        {
            "kind": plan.nemesis,
            "start": f"{FIRST_ROUND_S:g}s",
            "interval": interval,
            "for": f"{plan.interval / 2:g}s",
            "rounds": plan.rounds,
            "seed": plan.seed,
        }
    ]
    raw["timeout"] = f"{plan.seconds + TIMEOUT_SLACK_S:g}s"
    raw["name"] = f"{raw.get('name', 'scenario')}-soak"
    raw["seed"] = plan.seed
    return raw


@dataclass
class SoakSummary:
    """What a soak held up to (soak.json)."""

    backend: str
    members: int
    nemesis: str
    seconds: float
    rounds: int
    faults: dict[str, int]  # applied, by kind (heals not counted)
    sent: int
    delivered: int
    retransmissions: int | None  # the members' xmit events; None: the system does not report them (a foreign one)
    verdict: str  # PASS, FAIL, UNREADABLE
    violated: list[str]
    send_rate: list[float] = field(default_factory=list)  # messages/s over the run, in BUCKETS equal parts
    peak_rss_kib: dict[str, int] = field(default_factory=dict)  # members alive at the end (ru_maxrss)
    sending: float = 0.0  # seconds of the budget the workloads send and the nemesis acts (the rest: recovery)
    elapsed: float | None = None  # seconds from the schedule's start to the members' stop, as run

    def held(self) -> float | None:
        """The last tenth's send rate over the first's (1.0: the load held)."""
        if len(self.send_rate) < 2 or self.send_rate[0] <= 0:
            return None
        return self.send_rate[-1] / self.send_rate[0]

    def lines(self) -> list[str]:
        faults = ", ".join(f"{n} {kind}" for kind, n in sorted(self.faults.items(), key=lambda kv: -kv[1]))
        xmits = "not reported" if self.retransmissions is None else f"{self.retransmissions:,}"
        ran = f"; ran {self.elapsed:.1f} s" if self.elapsed is not None else ""
        out = [
            f"soak: a {self.seconds:g} s budget on {self.backend} ({self.sending:g} s of load and faults, then up to "
            f"{self.seconds - self.sending:g} s to recover: the run ends once the cluster is quiet{ran}), "
            f"{self.members} members, {self.nemesis} nemesis: {self.rounds} rounds, {sum(self.faults.values())} "
            f"faults applied ({faults or 'none'})",
            f"messages: {self.sent:,} sent, {self.delivered:,} delivered; retransmissions: {xmits}",
        ]
        if self.send_rate:
            held = self.held()
            rates = " ".join(f"{r:,.0f}" for r in self.send_rate)
            out.append(f"send rate (msgs/s, each tenth of the run): {rates}" + (f"; held {held:.0%}" if held else ""))
        if self.peak_rss_kib:
            member, kib = max(self.peak_rss_kib.items(), key=lambda kv: kv[1])
            out.append(f"peak RSS: {kib / 1024:.1f} MiB ({member}; the members alive at the end)")
        out.append(f"verdict: {self.verdict}" + (f" ({', '.join(self.violated)})" if self.violated else ""))
        return out


def summarize(out: Path, plan: SoakPlan, backend: str, members: int, code: int) -> SoakSummary:
    """The soak's summary from its run folder: verdict.json's counts, faults.jsonl, outcome.json's usage and the
    histories' send events (streamed: a soak's histories are large)."""
    verdict = _json(out / "verdict.json")
    per_member = [as_table(m, "stats.members") for m in opt_table(opt_table(verdict, "stats"), "members").values()]
    faults: dict[str, int] = {}
    started: int | None = None
    for line in _lines(out / "faults.jsonl"):
        event = as_table(json.loads(line), "faults.jsonl")
        if event.get("event") == "start":
            started = integer(event, "t", 0)
        if event.get("event") == "fault" and event.get("kind") != "heal":
            kind = text(event, "kind")
            faults[kind] = faults.get(kind, 0) + 1
    usage = opt_table(_json(out / "outcome.json"), "usage")
    stopped = _last_stop(out / "history")
    return SoakSummary(
        backend=backend,
        members=members,
        nemesis=plan.nemesis,
        seconds=plan.seconds,
        rounds=plan.rounds,
        faults=faults,
        sent=sum(integer(m, "send", 0) for m in per_member),
        delivered=sum(integer(m, "deliver", 0) for m in per_member),
        retransmissions=sum(integer(m, "xmit", 0) for m in per_member) if _native(out) else None,
        verdict={0: "PASS", 1: "FAIL"}.get(code, "UNREADABLE"),
        violated=sorted({text(v, "check") for v in tables(verdict, "violations")}),
        send_rate=send_rate(out / "history", plan.sending),
        peak_rss_kib=_peak_rss(usage),
        sending=plan.sending,
        elapsed=(stopped - started) / 1e9 if started is not None and stopped is not None else None,
    )


def _native(out: Path) -> bool:
    """Whether the run's members are chaosbed's own (they write `xmit` events; a foreign system need not)."""
    try:
        cluster = tomllib.loads((out / "scenario.toml").read_text()).get("cluster", {})
    except (OSError, ValueError):
        return False
    return isinstance(cluster, dict) and cluster.get("system", "chaosbed") == "chaosbed"


def _last_stop(history: Path) -> int | None:
    """The latest `t` of the members' `stop` events (the end of the run as the members saw it)."""
    last = None
    for path in sorted(history.glob("*.jsonl")):
        with path.open("rb") as f:
            for line in f:
                if _STOP.search(line) and (m := _T.search(line)):
                    last = max(last or 0, int(m.group(1)))
    return last


def write_summary(out: Path, summary: SoakSummary) -> None:
    write_atomic(out / "soak.json", json.dumps(asdict(summary), indent=1) + "\n")


def send_rate(history: Path, sending: float, buckets: int = BUCKETS) -> list[float]:
    """Messages sent per second in `buckets` equal parts of the sending time, from the first send on."""
    times = array("q", _send_times(history))  # 8 bytes a send: a 10-minute soak sends ~10^7
    if not times:
        return []
    first = min(times)
    width = sending * 1e9 / buckets
    counts = [0] * buckets
    for t in times:
        counts[min(buckets - 1, int((t - first) // width))] += 1
    return [n / (width / 1e9) for n in counts]


def _send_times(history: Path) -> Iterator[int]:
    for path in sorted(history.glob("*.jsonl")):
        with path.open("rb") as f:
            for line in f:
                if _SEND.search(line) and (m := _T.search(line)):
                    yield int(m.group(1))


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def _peak_rss(usage: JsonObject) -> dict[str, int]:
    """outcome.json's `usage`: each member's ru_maxrss (KiB), for the members that report one."""
    out = {}
    for member, u in usage.items():
        rss = as_table(u, f"usage.{member}").get("max_rss_kib")
        if isinstance(rss, int):
            out[member] = rss
    return out


def _json(path: Path) -> JsonObject:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}

"""What a schedule reached on real members, read from its run folder with nothing from the system's code: the wire
tap's counts (`wire.jsonl`, chaos/wiretap.py), the faults as applied (`faults.jsonl`) and the members' histories
(views, suspicions, retransmissions: events every system's member writes, docs/history.md).

A feature is a short string; the guided search (guide.py) keeps a schedule that reached one no earlier schedule did.
Features are about roles, never member names, so that the same behaviour between other members is not new:

- `wire <kind> <phase> <cut|rest> <ucast|mcast> <key> <n>`: a message type (`UNICAST3.ACK`, `GMS.VIEW`, ...) sent while
  a fault of that kind was in force (`during`) or in the HEAL_S after it ended (`heal`), on a link the fault cuts
  (or a member it acts on) or on another, with its count's order of magnitude (`n` = digits of the count: 1, 2, 3+);
- `view <change> <when>`: a view change (`join`, `merge`, `shrink`, `grow`, `replace`) during a fault kind, in the
  HEAL_S after it, later (`<kind>-after`: the fault that ended last), or `quiet`; `suspect <when>` likewise;
- `xmit <when> <n>`: retransmissions, by order of magnitude.

`targets` are the unicast (sender, receiver, key) seen on the wire: a mutation can retarget a discard at one of them.
`tails` are where a burst ended on a link: a message type sent at least TAIL_BURST times within TAIL_QUIET_S, then
not for TAIL_QUIET_S (or not again in the run), with the instant of its last bin on the schedule's clock and the
burst's size (its datagrams within TAIL_QUIET_S before the last). The last messages of a burst are the ones a
lost-last-message bug needs lost (nothing after them shows the gap), and a random fault covers them rarely: the
guide's `tail` mutation aims a cut at them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from chaos.wiretap import WIRE_FILE

HEAL_S = 2.0
TAIL_QUIET_S = 0.5  # a burst has ended when its message type is not seen on the link for this long
TAIL_BURST = 3  # datagrams of the type within TAIL_QUIET_S before the last: a burst, not a periodic message
MAX_TAILS = 12  # the largest bursts' tails are kept
Tail = tuple[str, str, str, float, int]  # (sender, receiver or "*", key, seconds on the schedule's clock, burst size)
NETWORK_ACTIONS = {"kill": "restart", "pause": "resume"}  # a member action's window ends at its counterpart
POINT_ACTIONS = ("leave", "close-connection")  # no counterpart: the window is HEAL_S after the action


@dataclass(frozen=True)
class Window:
    """A fault as applied: its kind, when it was in force (CLOCK_MONOTONIC ns; `end` None: to the end of the run),
    the directed links it cuts and the members it acts on."""

    kind: str
    start: int
    end: int | None
    links: frozenset[tuple[str, str]] = frozenset()
    members: frozenset[str] = frozenset()

    def touches(self, src: str, dst: str) -> bool:
        if src in self.members or dst in self.members:
            return True
        if dst == "*":
            return any(a == src for a, _ in self.links)
        return (src, dst) in self.links


@dataclass
class Coverage:
    features: frozenset[str] = frozenset()
    targets: tuple[tuple[str, str, str], ...] = ()
    datagrams: int = 0
    tapped: bool = False  # a wire tap's file was there
    tails: tuple[Tail, ...] = ()


def read_jsonl(path: Path) -> Iterator[dict[str, object]]:
    if not path.is_file():
        return
    for line in path.read_text(errors="replace").splitlines():
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut off by a killed writer
        if isinstance(doc, dict):
            yield doc


def _names(v: object) -> list[str]:
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []


def _links(doc: dict[str, object]) -> frozenset[tuple[str, str]]:
    kind = doc.get("kind")
    if kind == "split":
        raw = doc.get("groups")
        groups = [_names(g) for g in raw] if isinstance(raw, list) else []
        return frozenset((a, b) for g in groups for h in groups if g is not h for a in g for b in h)
    src, dst = _names(doc.get("from")), _names(doc.get("to"))
    out = {(a, b) for a in src for b in dst if a != b}
    if kind == "partition" and not doc.get("one_way"):
        out |= {(b, a) for a, b in out}
    return frozenset(out)


def windows(faults: Iterable[dict[str, object]]) -> list[Window]:
    """The faults of a faults.jsonl as windows (its `start` line and unknown lines left out)."""
    open_net: dict[str, tuple[str, int, frozenset[tuple[str, str]]]] = {}
    open_member: dict[tuple[str, str], int] = {}
    out: list[Window] = []
    for doc in faults:
        kind, t = doc.get("kind"), doc.get("t")
        if doc.get("event") != "fault" or not isinstance(kind, str) or not isinstance(t, int):
            continue
        member = doc.get("member")
        if kind == "heal":
            ids = _names(doc.get("faults")) if "faults" in doc else list(open_net)
            for i in ids:
                if i in open_net:
                    k, t0, links = open_net.pop(i)
                    out.append(Window(k, t0, t, links))
        elif isinstance(doc.get("id"), str):
            open_net[str(doc["id"])] = (kind, t, _links(doc))
        elif isinstance(member, str) and kind in NETWORK_ACTIONS:
            open_member[(kind, member)] = t
        elif isinstance(member, str) and kind in NETWORK_ACTIONS.values():
            began = next((k for k, v in NETWORK_ACTIONS.items() if v == kind), "")
            if (began, member) in open_member:
                t0 = open_member.pop((began, member))
                out.append(Window(began, t0, t, members=frozenset({member})))
        elif isinstance(member, str) and kind in POINT_ACTIONS:
            out.append(Window(kind, t, t + int(HEAL_S * 1e9), members=frozenset({member})))
    out += [Window(k, t0, None, links) for k, t0, links in open_net.values()]
    out += [Window(k, t0, None, members=frozenset({m})) for (k, m), t0 in open_member.items()]
    return out


def phases(ws: list[Window], t: int) -> list[tuple[Window, str]]:
    """The windows in force at t (`during`) or that ended at most HEAL_S before it (`heal`)."""
    heal_ns = int(HEAL_S * 1e9)
    out = []
    for w in ws:
        if w.start <= t and (w.end is None or t < w.end):
            out.append((w, "during"))
        elif w.end is not None and w.end <= t < w.end + heal_ns:
            out.append((w, "heal"))
    return out


def magnitude(n: int) -> str:
    return str(min(len(str(n)), 3))


def when(ws: list[Window], t: int) -> list[str]:
    """Where t falls against the faults: `<kind>-during` / `<kind>-heal` for each fault in force or just ended, else
    `<kind>-after` for the fault that ended last (a merge comes seconds after a heal), else `quiet`."""
    now = [f"{w.kind}-{phase}" for w, phase in phases(ws, t)]
    if now:
        return now
    ended = [w for w in ws if w.end is not None and w.end <= t]
    return [f"{max(ended, key=lambda w: w.end or 0).kind}-after"] if ended else ["quiet"]


def wire_features(
    rows: list[dict[str, object]], bin_ns: int, ws: list[Window]
) -> tuple[set[str], Counter[tuple[str, ...]], int]:
    """The wire features, the unicast (src, dst, key) counts, and the datagrams counted (from wire_rows)."""
    per: Counter[tuple[str, ...]] = Counter()
    targets: Counter[tuple[str, ...]] = Counter()
    total = 0
    for doc in rows:
        src, dst, key, n = str(doc["src"]), str(doc["dst"]), str(doc["key"]), doc.get("n")
        count = n if isinstance(n, int) else 1
        total += count
        t = int(doc["bin"]) * bin_ns + bin_ns // 2  # type: ignore[call-overload]
        cast = "mcast" if dst == "*" else "ucast"
        if dst != "*":
            targets[(src, dst, key)] += count
        for w, phase in phases(ws, t):
            per[(w.kind, phase, "cut" if w.touches(src, dst) else "rest", cast, key)] += count
    features = {f"wire {' '.join(k)} {magnitude(n)}" for k, n in per.items()}
    return features, targets, total


def wire_rows(lines: Iterable[dict[str, object]]) -> tuple[list[dict[str, object]], int]:
    """The count lines of a wire.jsonl and its bin width in ns."""
    bin_ns, rows = 100_000_000, []
    for doc in lines:
        if doc.get("event") == "end":
            if isinstance(doc.get("bin_ms"), int):
                bin_ns = int(doc["bin_ms"]) * 1_000_000  # type: ignore[call-overload]
        elif all(isinstance(doc.get(k), str) for k in ("src", "dst", "key")) and isinstance(doc.get("bin"), int):
            rows.append(doc)
    return rows, bin_ns


def tails_of(rows: list[dict[str, object]], bin_ns: int, start: int) -> list[Tail]:
    """Where bursts ended (the module's docstring), at most MAX_TAILS, the largest bursts', in time order; `start`:
    the instant the schedule's clock reads 0."""
    per: dict[tuple[str, str, str], Counter[int]] = {}
    for doc in rows:
        n = doc.get("n")
        link = (str(doc["src"]), str(doc["dst"]), str(doc["key"]))
        per.setdefault(link, Counter())[int(doc["bin"])] += n if isinstance(n, int) else 1  # type: ignore[call-overload]
    quiet = max(1, round(TAIL_QUIET_S * 1e9 / bin_ns))
    found: list[Tail] = []
    for (src, dst, key), counts in per.items():
        if key == "tcp":
            continue
        bins = sorted(counts)
        for i, b in enumerate(bins):
            if i + 1 < len(bins) and bins[i + 1] - b < quiet:
                continue
            burst = sum(counts[x] for x in bins[max(0, i - quiet) : i + 1] if x > b - quiet)
            if burst >= TAIL_BURST:
                found.append((src, dst, key, round((b * bin_ns - start) / 1e9, 3), burst))
    kept = sorted(found, key=lambda t: (-t[4], t))[:MAX_TAILS]
    return sorted(kept, key=lambda t: (t[3], t))


def schedule_start(faults: Iterable[dict[str, object]]) -> int | None:
    """The instant the schedule's clock reads 0 (faults.jsonl's start line)."""
    for doc in faults:
        if doc.get("event") == "start" and isinstance(doc.get("t"), int):
            return int(doc["t"])  # type: ignore[call-overload]
    return None


def history_features(history: Path, ws: list[Window]) -> set[str]:
    """View changes, suspicions and retransmissions, placed against the faults."""
    out: set[str] = set()
    xmits: Counter[str] = Counter()
    for path in sorted(history.glob("*.jsonl")) if history.is_dir() else []:
        last: set[str] | None = None
        for line in path.read_text(errors="replace").splitlines():
            if '"view"' not in line and '"suspect"' not in line and '"xmit"' not in line and '"start"' not in line:
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                continue
            ev, t = doc.get("event"), doc.get("t")
            if not isinstance(t, int):
                continue
            if ev == "start":
                last = None  # a new incarnation's first view is a join
            elif ev == "view":
                members = set(_names(doc.get("members")))
                change = view_change(last, members, doc.get("merge") is True)
                last = members
                out |= {f"view {change} {w}" for w in when(ws, t)}
            elif ev == "suspect":
                out |= {f"suspect {w}" for w in when(ws, t)}
            elif ev == "xmit":
                xmits.update(when(ws, t))
    out |= {f"xmit {w} {magnitude(n)}" for w, n in xmits.items()}
    return out


def view_change(before: set[str] | None, after: set[str], merge: bool) -> str:
    if merge:
        return "merge"
    if before is None:
        return "join"
    if after < before:
        return "shrink"
    if after > before:
        return "grow"
    return "same" if after == before else "replace"


def coverage_of(run: Path) -> Coverage:
    """The features a run folder shows (empty, `tapped` False, when it has no wire.jsonl: the run had no tap)."""
    faults = list(read_jsonl(run / "faults.jsonl"))
    ws = windows(faults)
    tapped = (run / WIRE_FILE).is_file()
    rows, bin_ns = wire_rows(read_jsonl(run / WIRE_FILE))
    features, targets, total = wire_features(rows, bin_ns, ws) if tapped else (set(), Counter(), 0)
    features |= history_features(run / "history", ws)
    start = schedule_start(faults)
    tails = tails_of(rows, bin_ns, start) if tapped and start is not None else []
    return Coverage(frozenset(features), tuple(sorted(targets)), total, tapped, tuple(tails))  # type: ignore[arg-type]

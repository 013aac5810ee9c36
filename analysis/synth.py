"""Synthetic run folders in the docs/scenario-format.md history format, with injectable faults and violations.

Used by the tests (one violation of each kind, found exactly once) and by the checker benchmark (millions of
events). Each member's file is written in its own time order, as a real member appends it.

Injections (`inject=[...]`, each at most once per run):
  gap[:multicast]        one delivery in the middle of the A->B stream is dropped      -> fifo
  reorder[:multicast]    two consecutive deliveries of the A->B stream are swapped     -> fifo
  duplicate[:multicast]  one A->B message is delivered twice                           -> exactly_once
  phantom[:multicast]    B delivers a message A never sent                              -> no_phantoms
  missing[:multicast]    the last A->B message is never delivered (lost tail)          -> complete
  diverge                B ends in a view without the last member                       -> views_converge
  crash                  the last member is killed; messages to it are lost             -> nothing
  truncated              crash, and its history ends in a cut-off line                  -> nothing (1 skipped line)
  restart                the last member is killed, restarted and rejoins               -> nothing
  partition              split in two halves, separate views, heal and merge            -> nothing

Addresses (`addresses=True`; by default in runs with an odd seed): unicast sends carry `dest_address`, the receiver's
incarnation they are addressed to, as real members write it. In a `restart` run the senders then also keep sending to
the victim's old incarnation between its restart record and its rejoining (on the old connection; never delivered,
and not owed), as senders on a real cluster do until they learn the new address.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import tomli_w

from node.addresses import make_address

T0 = 1_000_000_000  # ns; the first round
ROUND = 100_000  # ns between workload rounds
VIEW_LAG = 2_000_000  # ns from a fault to the next view
MSG_KINDS = ("unicast", "multicast")
MESSAGE_INJECTIONS = ("gap", "reorder", "duplicate", "phantom", "missing")
RUN_INJECTIONS = ("diverge", "crash", "truncated", "restart", "partition")


@dataclass(frozen=True)
class Expected:
    """A violation the generator injected (what a correct checker must report, once)."""

    check: str
    sender: str | None
    receiver: str | None
    conn_id: str | None = None
    seqno: int | None = None
    msg_id: str | None = None


@dataclass
class Truth:
    """What was generated: the expected violations and a few counts to compare with the checker's stats."""

    path: Path
    events: int = 0
    expected: list[Expected] = field(default_factory=list)
    skipped_lines: int = 0
    killed: list[str] = field(default_factory=list)
    addresses: bool = False  # unicast sends carry dest_address
    stale_sends: int = 0  # unicasts sent to a restarted member's old incarnation after its restart record


@dataclass
class _Plan:
    """The rounds at which the run injections happen (None: not in this run)."""

    kill: int | None = None
    restart: int | None = None
    partition: int | None = None
    heal: int | None = None
    diverge: int | None = None


def member_names(n: int) -> list[str]:
    return [chr(ord("A") + i) if n <= 26 else f"M{i}" for i in range(n)]


def _parse_injection(spec: str) -> tuple[str, str]:
    what, _, kind = spec.partition(":")
    kind = kind or "unicast"
    if what not in MESSAGE_INJECTIONS + RUN_INJECTIONS or kind not in MSG_KINDS:
        raise ValueError(f"unknown injection {spec!r}")
    return what, kind


class _Run:
    """Generates one run. Events are tuples (t, order, line-or-fields) per member, formatted at write time."""

    def __init__(
        self,
        names: list[str],
        rounds: int,
        rng: random.Random,
        inject: list[str],
        unicast: bool,
        multicast: bool,
        addresses: bool = False,
    ) -> None:
        self.names = names
        self.addresses = addresses
        self.stale: dict[tuple[str, str], list[int]] = {}  # (sender, victim) -> [conn, seqno] of the old incarnation
        self.stale_sends = 0
        self.rounds = rounds
        self.rng = rng
        self.unicast = unicast
        self.multicast = multicast
        self.events: dict[str, list[tuple]] = {m: [] for m in names}
        self.faults: list[dict] = []
        self.order = 0
        self.inc = dict.fromkeys(names, 0)
        self.conn: dict[tuple[str, str], int] = {}
        self.useq: dict[tuple[str, str], int] = {}
        self.mseq = dict.fromkeys(names, 0)
        self.nmsg = dict.fromkeys(names, 0)
        self.last_deliver: dict[tuple, int] = {}
        self.views: dict[str, list[tuple[int, frozenset[str]]]] = {m: [] for m in names}
        self.down: tuple[int, int] | None = None  # the victim's planned (kill, restart) times
        self.expected: list[Expected] = []
        self.skipped = 0
        self.inj = dict(_parse_injection(s) for s in inject)
        if len(self.inj) != len(inject):
            raise ValueError("each injection at most once per run")
        self.victim = names[-1]
        self.targets: dict[str, tuple[int, str]] = {}  # injection -> (round, kind)
        spots = {"gap": 0.30, "reorder": 0.45, "duplicate": 0.55, "phantom": 0.65, "missing": 1.0}
        for what, kind in self.inj.items():
            if what in spots:
                self.targets[what] = (min(rounds - 1, int(rounds * spots[what])), kind)
        self.joined_at: int | None = None
        self.reorder_first: tuple | None = None
        self.vid = 1  # the number in the next view id

    # ---- emitting -------------------------------------------------------------------------------------------------
    def _push(self, member: str, t: int, item: tuple | str) -> int:
        self.order += 1
        lst = self.events[member]
        lst.append((t, self.order, item))
        return len(lst) - 1

    def view(self, member: str, t: int, view_id: str, members: list[str], merge: bool = False) -> None:
        self.views[member].append((t, frozenset(members)))
        line = json.dumps(
            {"t": t, "member": member, "event": "view", "view_id": view_id, "members": members, "merge": merge},
            separators=(",", ":"),
        )
        self._push(member, t, line)

    def view_at(self, m: str, t: int) -> frozenset[str]:
        current: frozenset[str] = frozenset()
        for tv, members in self.views[m]:
            if tv <= t:
                current = members
        return current

    def alive(self, m: str, t: int) -> bool:
        return m != self.victim or self.down is None or not self.down[0] <= t < self.down[1]

    def receives(self, m: str, t_send: int, t_deliver: int) -> bool:
        """The incarnation of m running at t_send (a joined one) is still running at t_deliver."""
        if not (self.alive(m, t_send) and self.alive(m, t_deliver)):
            return False
        if m != self.victim or self.down is None:
            return True
        if self.joined_at is not None and self.down[1] <= t_send < self.joined_at:
            return False
        return (t_send < self.down[0]) == (t_deliver < self.down[0])

    def _deliver_time(self, key: tuple, t_send: int, not_before: int = 0) -> int:
        lat = 150_000 + int(self.rng.expovariate(1 / 250_000))
        t = max(t_send + lat, self.last_deliver.get(key, 0) + 1, not_before)
        self.last_deliver[key] = t
        return t

    # ---- workload -------------------------------------------------------------------------------------------------
    def _addr(self, address: str | None) -> tuple:
        """The dest_address element of a send item (none at all when the run writes no addresses)."""
        return (address,) if self.addresses else ()

    def send_unicast(self, s: str, d: str, t: int, rnd: int, hold_until: int = 0) -> None:
        ck = (s, d)
        conn = self.conn.setdefault(ck, 1)
        seq = self.useq.get(ck, 0) + 1
        self.useq[ck] = seq
        self.nmsg[s] += 1
        mid = f"{s}.{self.inc[s]}.{self.nmsg[s]}"
        f = ("unicast", s, d, conn, seq, mid)
        self._push(s, t, ("send", s, *f, *self._addr(make_address(d, self.inc[d] + 1))))
        td = self._deliver_time(("u", s, d, conn), t, hold_until)
        if not self.receives(d, t, td):
            return
        self._deliver(d, td, f, rnd, "unicast", s, d)

    def send_multicast(self, s: str, t: int, rnd: int, reach: frozenset[str] | None = None) -> None:
        seq = self.mseq[s] + 1
        self.mseq[s] = seq
        self.nmsg[s] += 1
        mid = f"{s}.{self.inc[s]}.{self.nmsg[s]}"
        f = ("multicast", s, None, None, seq, mid)
        self._push(s, t, ("send", s, *f, *self._addr(None)))
        for r in sorted(self.view_at(s, t)):
            if reach is not None and r not in reach:
                continue
            td = self._deliver_time(("m", s, r, self.inc[s], self.inc[r]), t)
            if self.receives(r, t, td):
                self._deliver(r, td, f, rnd, "multicast", s, r)

    def send_stale(self, s: str, d: str, t: int) -> None:
        """A unicast to d's previous incarnation (d has restarted, s does not know yet): on the old connection,
        addressed to the old incarnation, never delivered."""
        old = self.stale.get((s, d))
        if old is None:
            return
        old[1] += 1
        self.nmsg[s] += 1
        f = ("unicast", s, d, old[0], old[1], f"{s}.{self.inc[s]}.{self.nmsg[s]}")
        self._push(s, t, ("send", s, *f, *self._addr(make_address(d, self.inc[d]))))
        self.stale_sends += 1

    def _deliver(self, r: str, td: int, f: tuple, rnd: int, kind: str, s: str, d: str) -> None:
        """Delivers, applying a message injection when this is its target message (stream A->B)."""
        if s == self.names[0] and d == self.names[1]:
            for what, (target_round, target_kind) in self.targets.items():
                if target_kind != kind:
                    continue
                conn = None if f[3] is None else str(f[3])
                if what == "reorder" and rnd in (target_round, target_round + 1):
                    idx = self._push(r, td, ("deliver", r, *f))
                    if rnd == target_round:
                        self.reorder_first = (idx, td, f)
                        self.expected.append(Expected("fifo", s, d, conn, f[4], f[5]))
                    elif self.reorder_first is not None:  # swap the delivery times of the two messages
                        i0, t0, f0 = self.reorder_first
                        lst = self.events[r]
                        lst[i0] = (td, lst[i0][1], ("deliver", r, *f0))
                        lst[idx] = (t0, lst[idx][1], ("deliver", r, *f))
                    return
                if rnd != target_round:
                    continue
                if what == "gap":
                    self.expected.append(Expected("fifo", s, d, conn, f[4], f[5]))
                    return
                if what == "duplicate":
                    self._push(r, td, ("deliver", r, *f))
                    self._push(r, td + 3 * ROUND, ("deliver", r, *f))
                    self.expected.append(Expected("exactly_once", s, d, conn, f[4], f[5]))
                    return
                if what == "phantom":
                    pf = (kind, s, d if kind == "unicast" else None, f[3], 10**9, f"{s}.phantom")
                    self._push(r, td + 1, ("deliver", r, *pf))
                    pconn = None if pf[3] is None else str(pf[3])
                    self.expected.append(Expected("no_phantoms", s, d, pconn, pf[4], pf[5]))
                if what == "missing" and self._is_last_round(rnd):
                    self.expected.append(Expected("complete", s, d, conn, f[4], f[5]))
                    return
        self._push(r, td, ("deliver", r, *f))

    def _is_last_round(self, rnd: int) -> bool:
        return rnd == self.rounds - 1

    # ---- the run --------------------------------------------------------------------------------------------------
    def plan(self) -> _Plan:
        """The rounds of the run injections; sets the victim's planned downtime."""
        plan = _Plan()
        if any(k in self.inj for k in ("crash", "truncated", "restart")):
            plan.kill = int(self.rounds * 0.4)
            self.down = (T0 + plan.kill * ROUND, 1 << 62)
        if "restart" in self.inj:
            plan.restart = int(self.rounds * 0.6)
            self.down = (T0 + int(self.rounds * 0.4) * ROUND, T0 + plan.restart * ROUND)
        if "partition" in self.inj:
            plan.partition, plan.heal = int(self.rounds * 0.4), int(self.rounds * 0.6)
        if "diverge" in self.inj:
            plan.diverge = int(self.rounds * 0.9)
        return plan

    def generate(self) -> None:
        names = self.names
        for m in names:
            self.view(m, T0 - 1_000_000, f"{names[0]}|1", names)
        plan = self.plan()
        half = names[: len(names) // 2]
        other = [m for m in names if m not in half]
        side = {m: frozenset(half if m in half else other) for m in names}
        for rnd in range(self.rounds):
            t = T0 + rnd * ROUND
            self.faults_at(rnd, t, plan, half, other)
            split = plan.partition is not None and plan.heal is not None and plan.partition <= rnd < plan.heal
            heal_t = T0 + (plan.heal or 0) * ROUND
            for s in names:
                self.workload_of(s, t + names.index(s) * 7, rnd, side if split else None, heal_t)
            if rnd % 50 == 49:  # a few protocol counters, as members would log them
                for m in names:
                    if self.alive(m, t):
                        self._push(m, t + 3, ("xmit",))
                        self._push(m, t + 4, ("ack",))
        t_end = T0 + self.rounds * ROUND + 2_000_000
        for m in names:
            if self.alive(m, t_end):  # last, after a delivery that a long latency put past t_end
                self._push(m, max([t_end, *(e[0] + 1 for e in self.events[m])]), ("stop",))

    def faults_at(self, rnd: int, t: int, plan: _Plan, half: list[str], other: list[str]) -> None:
        """The run injections of round `rnd`: their fault records and the views they lead to."""
        names, victim = self.names, self.victim
        if rnd == plan.kill:
            self.faults.append({"t": t, "event": "fault", "kind": "kill", "member": victim})
            self.vid += 1
            for m in names:
                if m != victim:
                    self.view(m, t + VIEW_LAG, f"{names[0]}|{self.vid}", [x for x in names if x != victim])
        if rnd == plan.restart:
            self.restart(t)
        if rnd == plan.partition and plan.heal is not None:
            dur = (plan.heal - rnd) * ROUND
            self.faults.append(
                {"t": t, "event": "fault", "kind": "split", "groups": [half, other], "for": f"{dur // 1000}us"}
            )
            for grp in (half, other):
                for m in grp:
                    self.view(m, t + VIEW_LAG, f"{grp[0]}|{self.vid + 1}", grp)
            self.vid += 1
        if rnd == plan.heal:
            self.vid += 1
            for m in names:
                self.view(m, t + VIEW_LAG, f"{names[0]}|{self.vid}", names, merge=True)
        if rnd == plan.diverge:
            self.view(names[1], t, f"{names[1]}|{self.vid + 10}", [x for x in names if x != victim])

    def restart(self, t: int) -> None:
        """The victim's new incarnation: new connections to and from it, and a view with it once it has joined."""
        victim = self.victim
        self.faults.append({"t": t, "event": "fault", "kind": "restart", "member": victim})
        self.inc[victim] += 1
        self.mseq[victim] = 0
        self.stale = {k: [self.conn[k], self.useq[k]] for k in self.conn if k[1] == victim}
        for k in list(self.conn):
            if victim in k:
                self.conn[k] += 1
                self.useq[k] = 0
        self.joined_at = t + VIEW_LAG
        self.vid += 1
        for m in self.names:
            self.view(m, self.joined_at, f"{self.names[0]}|{self.vid}", self.names)

    def workload_of(self, s: str, ts: int, rnd: int, side: dict[str, frozenset[str]] | None, heal_t: int) -> None:
        """Sender s's messages of one round: a unicast to every other member and a multicast. `side`: the halves of
        a split in force (unicasts across it are held until `heal_t`, multicasts reach s's half only)."""
        joined_at, victim = self.joined_at, self.victim
        if not self.alive(s, ts) or (joined_at is not None and s == victim and ts <= joined_at):
            return
        if self.unicast:
            for d in self.names:
                if self.addresses and joined_at is not None and d == victim and s != d and ts < joined_at:
                    self.send_stale(s, d, ts + 1)  # the victim restarted, s still addresses the old one
                    continue
                if d == s or (joined_at is not None and d == victim and ts <= joined_at + ROUND):
                    continue
                hold = heal_t if side is not None and side[s] != side[d] else 0
                self.send_unicast(s, d, ts + 1, rnd, hold)
        if self.multicast:
            self.send_multicast(s, ts + 2, rnd, side[s] if side is not None else None)

    # ---- output ---------------------------------------------------------------------------------------------------
    def write(self, run_dir: Path, seed: int, scenario_checks: dict | None) -> int:
        hist = run_dir / "history"
        hist.mkdir(parents=True, exist_ok=True)
        n = 0
        for m, evs in self.events.items():
            evs.sort(key=lambda e: (e[0], e[1]))
            lines = [_format(m, t, item) for t, _, item in evs]
            if m == self.victim and "truncated" in self.inj:
                lines.append(f'{{"t":{evs[-1][0] + 1},"member":"{m}","event":"deliv')
                self.skipped = 1
            n += len(evs)
            text = "\n".join(lines)
            if not (m == self.victim and "truncated" in self.inj):
                text += "\n"
            (hist / f"{m}.jsonl").write_text(text)
        if self.faults:
            for f in self.faults:
                f["seed"] = seed
            (run_dir / "faults.jsonl").write_text("".join(json.dumps(f) + "\n" for f in self.faults))
        if scenario_checks is not None:
            # tomli-w directly: orchestration/toml_text.py is the project's writer, but analysis cannot import it
            scenario = {"name": "synthetic", "seed": seed, "cluster": {"members": len(self.names)}}
            (run_dir / "scenario.toml").write_text(tomli_w.dumps({**scenario, "checks": scenario_checks}))
        if "diverge" in self.inj:
            self.expected.append(Expected("views_converge", None, self.names[1]))
        return n


def _format(member: str, t: int, item: tuple | str) -> str:
    if isinstance(item, str):
        return item
    ev = item[0]
    if ev in ("send", "deliver"):
        _, m, kind, s, d, conn, seq, mid, *address = item  # a send may carry dest_address (null: a multicast)
        dest = "null" if d is None else f'"{d}"'
        if address:
            dest += ',"dest_address":' + ("null" if address[0] is None else f'"{address[0]}"')
        cid = "null" if conn is None else conn
        return (
            f'{{"t":{t},"member":"{m}","event":"{ev}","kind":"{kind}","sender":"{s}","dest":{dest},'
            f'"conn_id":{cid},"seqno":{seq},"msg_id":"{mid}","size":100}}'
        )
    return f'{{"t":{t},"member":"{member}","event":"{ev}"}}'


def write_run(
    run_dir: str | Path,
    *,
    members: int = 3,
    rounds: int = 40,
    inject: list[str] | tuple[str, ...] = (),
    seed: int = 0,
    unicast: bool = True,
    multicast: bool = True,
    checks: dict | None = None,
    addresses: bool | None = None,
) -> Truth:
    """Writes one run folder; returns what a correct checker must find. `checks` writes a scenario.toml;
    `addresses` (default: for odd seeds) gives unicast sends a `dest_address`."""
    run_dir = Path(run_dir)
    names = member_names(members)
    if members < 3 and any(_parse_injection(s)[0] in RUN_INJECTIONS for s in inject):
        raise ValueError("run injections need at least 3 members")
    addresses = seed % 2 == 1 if addresses is None else addresses
    gen = _Run(names, rounds, random.Random(seed), list(inject), unicast, multicast, addresses)
    gen.generate()
    n = gen.write(run_dir, seed, checks)
    killed = [gen.victim] if gen.down else []
    return Truth(run_dir, n, gen.expected, gen.skipped, killed, addresses, gen.stale_sends)


def rounds_for(events: int, members: int) -> int:
    """Rounds giving about `events` events per run (unicast to every other member plus one multicast)."""
    per_round = members * (2 * (members - 1) + 1 + members) + members * 2 / 50
    return max(4, round(events / per_round))


def write_matrix(
    root: str | Path, *, runs: int = 2, events: int = 1_000_000, members: int = 5, inject: tuple[str, ...] = ()
) -> list[Truth]:
    """A matrix folder of `runs` runs holding about `events` events in total; injections go to the first run."""
    root = Path(root)
    rounds = rounds_for(events // runs, members)
    return [
        write_run(root / f"run-{i}", members=members, rounds=rounds, inject=inject if i == 0 else (), seed=i)
        for i in range(runs)
    ]

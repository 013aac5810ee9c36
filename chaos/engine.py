"""The network faults in force on one running netns cluster, and their application to the members' namespaces.

A fault (partition, split, loss, delay, reorder, duplicate, discard) is a set of links (source, receiver). The
engine keeps the faults of a cluster in its state directory (`chaos.json`, under a file lock, so `chaosbed fault`
commands from separate processes and a running scenario see the same table) and, after every change, renders what
each receiving namespace must have and installs it:

- kernel rules (chaos/kernel.py): partitions and loss as nft sets and numgen drops, stateless DISCARD rules as u32
  drops, and NFQUEUE targets for the rest, all replaced in one transaction per namespace;
- netem shaping (chaos/netem.py) for delay, jitter, reorder and duplicate where the kernel has netem;
- otherwise, and for stateful DISCARD rules, the rules of that namespace's NFQUEUE handler (chaos/nfqueue/),
  a process started on demand and stopped when no rule needs it. The handler gets new rules before the kernel sends
  it packets, and is stopped (releasing what it holds) only after the kernel stopped sending.

Counts (`count = 1`: the first matching message) are per link, as in the simulator.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos import kernel, netem
from chaos.nfqueue import HandlerClient, HandlerProcess, HandlerStartError, default_max_len
from chaos.rules import RuleError, parse_match
from node import fault_kinds
from node.fault_kinds import DISCARD_ACTIONS, SHAPING
from node.jsonl import PeerClosed
from node.units import parse_duration

LINK_FAULTS = fault_kinds.NETWORK  # the kinds a fault table takes (node/fault_kinds.py)
PEAK_PACKETS_PER_S = 150_000  # raw UDP datagrams/s one receiver takes on this machine kind (bench_network)
HANDLER_START_TIMEOUT = 15.0


class ChaosError(RuntimeError):
    """A fault could not be applied; the message says what and what to do."""


@dataclass(frozen=True)
class QueueBypass:
    """What one member's NFQUEUE handler missed. The queue is fail-open (chaos/nfqueue/netlink.py): a packet that
    finds the queue full (`full_queue`; the kernel counts it nowhere, so it is the queue rules' packet count minus
    what the kernel numbered) or the handler's socket buffer full (`overflowed`, numbered but never read) is
    accepted, not dropped: it escapes every handler rule. `dropped`: a full queue on kernels without fail-open.
    Packets in flight when it is asked (numbered, not yet read) count as overflowed: a handful at most."""

    member: str
    queued: int  # packets the queue rules took since they were last installed
    full_queue: int
    overflowed: int
    dropped: int
    faults: list[str]  # the faults with rules at this member

    IN_FLIGHT = 16  # packets numbered but not yet read when asked: below this, overflowed is not a bypass

    @property
    def bypassed(self) -> int:
        return self.full_queue + (self.overflowed if self.overflowed > self.IN_FLIGHT else 0)

    def warning(self) -> str | None:
        """What a run says about it (None: every packet was judged)."""
        faults = ", ".join(self.faults) or "its rules"
        parts = []
        if self.bypassed:
            share = f" ({100 * self.bypassed / self.queued:.1f}%)" if self.queued >= self.bypassed else ""
            parts.append(
                f"the NFQUEUE handler at {self.member} could not keep up: {self.bypassed:,} of {self.queued:,} packets"
                f"{share} bypassed the protocol-aware rules ({faults}; its queue or socket buffer was full, and the "
                "kernel lets such packets through rather than drop them), so those faults acted on fewer packets "
                "than planned. A less busy machine or a lower workload rate avoids it"
            )
        if self.dropped:
            parts.append(
                f"the NFQUEUE handler at {self.member} could not keep up: its full queue dropped {self.dropped:,} "
                f"packets that no rule of {faults} dropped (this kernel has no fail-open for queues)"
            )
        return "; ".join(parts) or None


def _fault_order(fault_id: str) -> tuple[int, str]:
    """f2 before f10."""
    return (int(fault_id[1:]), fault_id) if fault_id[1:].isdigit() else (1 << 62, fault_id)


@dataclass(frozen=True)
class Endpoint:
    name: str
    ip: str
    ns: str


class Chaos:
    """The fault table of one cluster. Cheap to construct: all state is in `state_dir/chaos.json`."""

    PLAN_AHEAD = True  # plan() may start handler processes: the scheduler installs a plan dormant first

    def __init__(self, state_dir: Path, tag: str, members: dict[str, Endpoint], *, transport: str = "udp") -> None:
        self.state_dir = Path(state_dir)
        self.tag = tag  # appears in every handler's command line: the cluster label
        self.members = members
        self.transport = transport
        self._state_path = self.state_dir / "chaos.json"
        self._procs: dict[str, HandlerProcess] = {}  # the handlers this process started

    # --- public API -----------------------------------------------------------------------------------------------

    def add(self, kind: str, args: dict[str, Any], *, seed: int = 0) -> dict[str, Any]:
        """Applies one fault; returns its record (with its id). Raises ChaosError for a bad fault."""
        record = self.normalize(kind, args)
        with self._locked() as state:
            state["next"] += 1
            record = {"id": f"f{state['next']}", **record, "seed": seed, "since": time.time()}
            state["faults"].append(record)
            try:
                self._apply(state)
            except Exception:
                state["faults"].remove(record)
                self._apply(state)
                raise
        return record

    def remove(self, ids: list[str]) -> list[dict[str, Any]]:
        """Removes the faults with these ids (unknown ids are an error); returns their records."""
        with self._locked() as state:
            known = {f["id"] for f in state["faults"]}
            unknown = [i for i in ids if i not in known]
            if unknown:
                in_force = ", ".join(sorted(known)) or "none"
                raise ChaosError(f"no fault {', '.join(unknown)} in force; in force: {in_force}")
            gone = [f for f in state["faults"] if f["id"] in ids]
            state["faults"] = [f for f in state["faults"] if f["id"] not in ids]
            self._apply(state)
            self._stop_timers(state, ids)
        return gone

    def heal(self) -> list[dict[str, Any]]:
        """Removes every fault; returns their records."""
        with self._locked() as state:
            gone, state["faults"] = state["faults"], []
            self._apply(state)
            self._stop_timers(state, [f["id"] for f in gone])
        return gone

    def plan(self, faults: list[dict[str, Any]], t0_ns: int) -> None:
        """Installs scheduled faults ahead of time, each switched on and off by the clock at its window: a fault is
        a normalized record with its `id`, `seed`, `start` and `end` (seconds after t0_ns, end None = until the
        cluster goes down); t0_ns is on CLOCK_MONOTONIC. Calling it again with the same ids replaces their windows
        (the scheduler first installs everything far in the future, which starts the handlers, then moves the
        windows to the real t0, which only rewrites rules). Nothing is switched at the planned instants."""
        ids = {f["id"] for f in faults}
        with self._locked() as state:
            # one sample of CLOCK_REALTIME - CLOCK_MONOTONIC for the whole plan: nft compares real time
            state["clock_offset"] = time.time_ns() - time.monotonic_ns()
            state["faults"] = [f for f in state["faults"] if f["id"] not in ids]
            state["faults"].extend(planned_record(f, t0_ns) for f in faults)
            self._apply(state)

    def clock_offset(self) -> int | None:
        """CLOCK_REALTIME - CLOCK_MONOTONIC as sampled by the last plan() (None if nothing was planned)."""
        return self._load().get("clock_offset")

    def add_timer(self, fault_id: str, pid: int) -> None:
        """Records the process that will remove fault_id when its time is up (stopped with the fault or cluster)."""
        with self._locked() as state:
            state.setdefault("timers", {})[fault_id] = pid

    def _stop_timers(self, state: dict[str, Any], ids: list[str]) -> None:
        timers = state.setdefault("timers", {})
        for fid in ids:
            pid = timers.pop(fid, None)
            if pid is not None and pid != os.getpid() and _alive(pid, self.tag, b"orchestration"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)

    def faults(self, *, stats: bool = True) -> list[dict[str, Any]]:
        """The faults in force, each with the handler's counters for its rules (matched, dropped, ...)."""
        state = self._load()
        records = [dict(f) for f in state["faults"]]
        if stats:
            per_rule: dict[str, dict[str, int]] = {}
            for member, h in state["handlers"].items():
                with contextlib.suppress(OSError, ChaosError, ValueError):
                    for rule_id, counters in self._request(member, h, {"cmd": "stats"})["stats"]["rules"].items():
                        fid = rule_id.split(":", 1)[0]
                        total = per_rule.setdefault(fid, {})
                        for k, v in counters.items():
                            total[k] = total.get(k, 0) + v
            for f in records:
                if f["id"] in per_rule:
                    f["handled"] = per_rule[f["id"]]
        return records

    def kernel_counters(self) -> dict[str, dict[str, int]]:
        """Per receiving member, the packets its kernel rules blocked, lost, dropped and queued so far."""
        return {name: kernel.counters(ep.ns) for name, ep in self.members.items()}

    def handler_stats(self) -> dict[str, dict[str, Any]]:
        """Each running handler's full counters, by receiving member."""
        state = self._load()
        return {m: self._request(m, h, {"cmd": "stats"})["stats"] for m, h in state["handlers"].items()}

    def queue_bypass(self) -> dict[str, QueueBypass]:
        """Per receiving member with a handler: the packets its queue rules took since they were last installed, and
        how many of them no handler rule judged because the handler fell behind (see QueueBypass)."""
        state = self._load()
        out: dict[str, QueueBypass] = {}
        for member, h in state["handlers"].items():
            # the kernel's rule counters first, the handler's numbering after: a packet arriving in between is
            # counted by the handler only, so it can never look bypassed
            queued = kernel.counters(self.members[member].ns)["queued"]
            try:
                stats = self._request(member, h, {"cmd": "stats"})["stats"]
            except (OSError, ChaosError, ValueError):
                continue
            kq = stats["queue"]
            numbered = kq.get("id_sequence")
            if numbered is None:  # the queue is not bound (the handler is stopping)
                continue
            out[member] = QueueBypass(
                member=member,
                queued=queued,
                full_queue=max(0, queued - (numbered - h.get("numbered_at_apply", 0))),
                overflowed=stats["missed_ids"],
                dropped=kq.get("queue_dropped", 0) + kq.get("queue_user_dropped", 0),
                faults=sorted({rule_id.split(":", 1)[0] for rule_id in stats["rules"]}, key=_fault_order),
            )
        return out

    def shutdown(self) -> None:
        """Stops every handler without touching rules (the namespaces are about to be deleted). Idempotent."""
        if not self._state_path.exists():
            return
        with self._locked() as state:
            self._stop_timers(state, list(state.get("timers", {})))
            for member in list(state["handlers"]):
                self._stop_handler(state, member)

    # --- validation ---------------------------------------------------------------------------------------------

    def normalize(self, kind: str, args: dict[str, Any]) -> dict[str, Any]:
        """Checks a fault's arguments against the members; returns the stored form (member lists, seconds)."""
        return normalize(kind, args, list(self.members), self.transport)

    # --- links and rendering ----------------------------------------------------------------------------------------

    @staticmethod
    def links(fault: dict[str, Any]) -> list[tuple[str, str]]:
        return links(fault)

    def render(
        self, faults: list[dict[str, Any]], use_netem: bool, *, time_gates: bool = True, clock_offset: int = 0
    ) -> dict[str, tuple[Any, ...]]:
        """member -> (kernel.NamespaceRules, [netem.Shaping], [handler rule dicts], max held delay in ms).

        A fault with a `window` (a planned fault: CLOCK_MONOTONIC ns `from`/`until`) is installed ahead of time and
        gated by time: partitions and loss as nft rules bounded by `meta time` (CLOCK_REALTIME = monotonic +
        clock_offset) when `time_gates`, else as link rules of the handler; delay, reorder, duplicate and every
        discard as handler rules with active_from_ns/active_until_ns, on every kernel (netem cannot be switched by
        time, and a u32 drop has no window)."""
        out: dict[str, tuple[Any, ...]] = {}
        for name in self.members:
            rules, handler_rules = kernel.NamespaceRules(), []
            shaping: dict[str, netem.Shaping] = {}
            max_delay_ms = 0.0
            for f in faults:
                window = f.get("window")
                for src, dst in self.links(f):
                    if dst != name:
                        continue
                    ip, kind, rule_id = self.members[src].ip, f["kind"], f"{f['id']}:{src}"
                    if kind in ("partition", "split", "loss") and window and not time_gates:
                        rules.queue_all.add(ip)
                        handler_rules.append(_handler_rule(rule_id, ip, f, None, "drop", name))
                    elif kind in ("partition", "split"):
                        if window:
                            rules.timed_blocks.append((ip, _real_window(window, clock_offset)))
                        else:
                            rules.blocked.add(ip)
                    elif kind == "loss":
                        if window:
                            rules.timed_losses.append((ip, f["probability"], _real_window(window, clock_offset)))
                        else:
                            rules.losses.append((ip, f["probability"]))
                    elif kind in SHAPING and use_netem and not window:
                        shaping[ip] = _merge_shaping(shaping.get(ip, netem.Shaping(ip)), f)
                    elif kind in SHAPING:
                        rules.queue_all.add(ip)
                        handler_rules.append(_handler_rule(rule_id, ip, f, None, kind, name))
                        max_delay_ms = max(max_delay_ms, 1000 * (f.get("delay", 0.0) + f.get("jitter", 0.0)))
                    else:  # discard
                        match = parse_match(f["match"])
                        p = f.get("probability", 1.0)
                        stateless = f["action"] == "drop" and f["count"] is None and not window
                        if stateless and kernel.compiles_to_kernel(match):
                            rules.header_drops.append(kernel.HeaderDrop(ip, match, p))
                            rules.queue_batches.add(ip)
                        else:
                            rules.queue_ours.add(ip)
                        handler_rules.append(_handler_rule(rule_id, ip, f, f["match"], f["action"], name))
                        max_delay_ms = max(max_delay_ms, 1000 * f.get("delay", 0.0))
            out[name] = (rules, list(shaping.values()), handler_rules, max_delay_ms)
        return out

    # --- applying -------------------------------------------------------------------------------------------------

    def _apply(self, state: dict[str, Any]) -> None:
        use_netem = netem.available()
        planned = any(f.get("window") for f in state["faults"])
        gates = kernel.time_gates()[0] if planned else True
        rendered = self.render(state["faults"], use_netem, time_gates=gates, clock_offset=state.get("clock_offset", 0))
        for name, (rules, shapings, handler_rules, max_delay_ms) in rendered.items():
            ep = self.members[name]
            if handler_rules:
                self._ensure_handler(state, name, max_delay_ms, handler_rules)
            try:
                kernel.apply(ep.ns, rules)
            except kernel.KernelError as e:
                raise ChaosError(str(e)) from None
            if use_netem or netem.installed(ep.ns):
                try:
                    netem.apply(ep.ns, shapings)
                except netem.NetemError as e:
                    raise ChaosError(str(e)) from None
            if not handler_rules and name in state["handlers"]:
                self._stop_handler(state, name)

    def _ensure_handler(self, state: dict[str, Any], name: str, max_delay_ms: float, rules: list[dict]) -> None:
        need = default_max_len(PEAK_PACKETS_PER_S, max_delay_ms, 0.0)
        h = state["handlers"].get(name)
        if h is not None and (h["max_len"] < need or not _alive(h["pid"], self.tag)):
            rules = self._carry_counts(name, h, rules)
            self._stop_handler(state, name)
            h = None
        if h is None:
            h = self._start_handler(name, need)
            state["handlers"][name] = h
        reply = self._request(name, h, {"cmd": "rules", "rules": rules})
        # asked before kernel.apply resets the queue rules' counters: queue_bypass compares the two from here on
        h["numbered_at_apply"] = reply.get("numbered", 0)

    def _carry_counts(self, name: str, h: dict[str, Any], rules: list[dict]) -> list[dict]:
        """A handler restarted for a bigger queue keeps what its count rules have left."""
        try:
            counters = self._request(name, h, {"cmd": "stats"})["stats"]["rules"]
        except (OSError, ChaosError, ValueError):
            return rules
        out = []
        for r in rules:
            acted = counters.get(r["id"], {})
            done = sum(acted.get(k, 0) for k in ("dropped", "delayed", "duplicated", "reordered"))
            if not r.get("count"):
                out.append(r)
            elif r["count"] > done:
                out.append({**r, "count": r["count"] - done})
        return out

    def _start_handler(self, name: str, max_len: int) -> dict[str, Any]:
        ep = self.members[name]
        sock = self.state_dir / f"nfq-{name}.sock"
        try:
            handler = HandlerProcess.start(
                ep.ns,
                kernel.QUEUE_NUM,
                str(sock),
                max_len=max_len,
                local_ip=ep.ip,
                tag=self.tag,
                timeout=HANDLER_START_TIMEOUT,
                log=self.state_dir / f"nfq-{name}.log",
                new_session=True,  # it outlives this process (a CLI command) and its terminal's signals
                cwd=_root(),
            )
        except HandlerStartError as e:
            raise ChaosError(f"the NFQUEUE handler for {name} did not start: {e.reason}") from None
        self._procs[name] = handler
        return {"pid": handler.pid, "socket": str(sock), "max_len": max_len}

    def _stop_handler(self, state: dict[str, Any], name: str) -> None:
        h = state["handlers"].pop(name, None)
        if h is None:
            return
        with contextlib.suppress(OSError, ChaosError, ValueError):
            self._request(name, h, {"cmd": "stop"}, timeout=5.0)
        deadline = time.monotonic() + 5.0
        while _alive(h["pid"], self.tag) and time.monotonic() < deadline:
            handler = self._procs.get(name)
            if handler is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    handler.proc.wait(0.05)
            else:
                time.sleep(0.02)  # not our child (another CLI started it): poll its /proc entry with a deadline
        if _alive(h["pid"], self.tag):
            with contextlib.suppress(ProcessLookupError):
                os.kill(h["pid"], signal.SIGKILL)
        handler = self._procs.pop(name, None)
        if handler is not None:
            handler.proc.wait(5)

    def _request(self, name: str, h: dict[str, Any], req: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        try:
            reply = HandlerClient(h["socket"]).request(req, timeout)
        except PeerClosed as e:
            reply = {"ok": False, "error": str(e)}
        if not reply.get("ok"):
            raise ChaosError(f"the NFQUEUE handler of {name} refused {req.get('cmd')}: {reply.get('error')}")
        return reply

    # --- state ----------------------------------------------------------------------------------------------------

    def _load(self) -> dict[str, Any]:
        try:
            return json.loads(self._state_path.read_text())
        except FileNotFoundError:
            return {"next": 0, "faults": [], "handlers": {}}

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / "chaos.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self._load()
            try:
                yield state
            finally:
                tmp = self._state_path.with_suffix(".tmp")
                tmp.write_text(json.dumps(state, indent=1))
                tmp.replace(self._state_path)


def normalize(kind: str, args: dict[str, Any], names: list[str], transport: str = "udp") -> dict[str, Any]:
    """Checks a fault's arguments against the members; returns the stored form (member lists, seconds)."""
    if kind not in LINK_FAULTS:
        raise ChaosError(f"unknown network fault {kind!r}; network faults: {', '.join(LINK_FAULTS)}")
    out: dict[str, Any] = {"kind": kind}

    def member_list(key: str) -> list[str]:
        value = args.get(key)
        if value in (None, "*", ["*"]):
            return names
        items = [value] if isinstance(value, str) else list(value)
        bad = [m for m in items if m not in names]
        if bad or not items:
            raise ChaosError(f"{kind}: {key} names unknown members {bad or '(none)'}; members: {', '.join(names)}")
        return items

    if kind == "split":
        groups = [member_list_of(g, names, "split: groups") for g in args.get("groups") or []]
        if len(groups) < 2:
            raise ChaosError("split: give at least two groups, e.g. A,B C,D")
        seen: set[str] = set()
        for g in groups:
            if seen & set(g):
                raise ChaosError(f"split: {sorted(seen & set(g))} in more than one group")
            seen |= set(g)
        out["groups"] = groups
        return out
    out["from"], out["to"] = member_list("from"), member_list("to")
    if kind == "partition":
        out["one_way"] = bool(args.get("one_way", False))
    if kind in ("loss", "reorder", "duplicate") or "probability" in args:
        p = float(args.get("probability", 1.0 if kind == "discard" else -1))
        if not 0.0 <= p <= 1.0:
            raise ChaosError(f"{kind}: probability must be within 0..1 (20% = 0.2), not {args.get('probability')}")
        out["probability"] = p
    if kind == "delay":
        out["delay"] = _seconds(args.get("delay"), "delay: delay")
        out["jitter"] = _seconds(args.get("jitter", 0.0), "delay: jitter")
    if kind == "discard":
        if transport != "udp":
            raise ChaosError(
                "discard rules act on datagrams; this cluster uses transport tcp, where the kernel retransmits a "
                "dropped segment. Use partition, loss or delay, or transport udp"
            )
        try:
            out["match"] = str(parse_match(str(args.get("match", ""))))
        except RuleError as e:
            raise ChaosError(f"discard: {e}") from None
        action = args.get("action", "drop")
        if action not in DISCARD_ACTIONS:
            raise ChaosError(f"discard: action must be one of {', '.join(DISCARD_ACTIONS)}, not {action!r}")
        out["action"] = action
        count = args.get("count")
        if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 1):
            raise ChaosError(f"discard: count must be a whole number >= 1, not {count!r}")
        out["count"] = count
        if action == "delay":
            out["delay"] = _seconds(args.get("delay", 0.0), "discard: delay")
            if out["delay"] <= 0:
                raise ChaosError("discard: action delay needs a delay, e.g. 50ms")
        elif args.get("delay"):
            raise ChaosError(f"discard: a delay goes with action delay, not {action}")
    return out


def links(fault: dict[str, Any]) -> list[tuple[str, str]]:
    """(source, receiver) pairs the fault acts on."""
    if fault["kind"] == "split":
        groups = fault["groups"]
        return [(a, b) for g in groups for h in groups if h is not g for a in g for b in h]
    pairs = [(a, b) for a in fault["from"] for b in fault["to"] if a != b]
    if fault["kind"] == "partition" and not fault.get("one_way"):
        pairs += [(b, a) for a, b in pairs if (b, a) not in pairs]
    return pairs


def fault_event(record: dict[str, Any], duration: float | None = None) -> dict[str, Any]:
    """The faults.jsonl line (SCENARIO.md history format) of an applied fault: its keys, id, seed and `for`."""
    keys = {k: v for k, v in record.items() if k not in ("since", "kind", "seed", "id") and v is not None}
    for k in ("delay", "jitter"):  # durations as the scenario files write them
        if k in keys:
            keys[k] = f"{keys[k] * 1000:g}ms"
    event = {"t": time.monotonic_ns(), "event": "fault", "seed": record.get("seed", 0), "kind": record["kind"]}
    event.update(id=record["id"], **keys)
    if duration is not None:
        event["for"] = f"{duration:g}s"
    return event


def heal_event(ids: list[str] | None, seed: int = 0) -> dict[str, Any]:
    """A heal: of every fault (ids None), or of just the faults `ids` (a partial heal, e.g. a `for` running out)."""
    event: dict[str, Any] = {"t": time.monotonic_ns(), "event": "fault", "seed": seed, "kind": "heal"}
    if ids is not None:
        event["faults"] = ids
    return event


def append_log(path: Path, event: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(event, separators=(",", ":")) + "\n")


def member_list_of(value: Any, names: list[str], what: str) -> list[str]:
    items = [value] if isinstance(value, str) else list(value or [])
    bad = [m for m in items if m not in names]
    if bad or not items:
        raise ChaosError(f"{what}: unknown members {bad or '(none)'}; members: {', '.join(names)}")
    return items


def _seconds(value: Any, what: str) -> float:
    return parse_duration(value, what, non_negative=True, error=ChaosError)


def _merge_shaping(s: netem.Shaping, f: dict[str, Any]) -> netem.Shaping:
    kind = f["kind"]
    return netem.Shaping(
        s.source,
        s.delay_ms + (1000 * f["delay"] if kind == "delay" else 0.0),
        max(s.jitter_ms, 1000 * f.get("jitter", 0.0)),
        max(s.reorder, f["probability"] if kind == "reorder" else 0.0),
        max(s.duplicate, f["probability"] if kind == "duplicate" else 0.0),
    )


def planned_record(fault: dict[str, Any], t0_ns: int) -> dict[str, Any]:
    """A planned fault (`start`/`end` in seconds after t0_ns, end None = no end) as a fault-table record with its
    `window`: CLOCK_MONOTONIC (or virtual) ns `from`/`until`. Both fault tables (netns, simulator) store this."""
    start, end = fault["start"], fault.get("end")
    record = {k: v for k, v in fault.items() if k not in ("start", "end")}
    window = {"from": t0_ns + round(start * 1e9), "until": None if end is None else t0_ns + round(end * 1e9)}
    return {**record, "window": window, "since": time.time()}


def _real_window(window: dict[str, int | None], clock_offset: int) -> kernel.Window:
    """A planned fault's window (CLOCK_MONOTONIC ns) on CLOCK_REALTIME, which nft's `meta time` reads."""
    start, end = window["from"], window["until"]
    return kernel.Window(None if start is None else start + clock_offset, None if end is None else end + clock_offset)


def _handler_rule(
    rule_id: str, ip: str, f: dict[str, Any], match: str | None, action: str, receiver: str
) -> dict[str, Any]:
    window = f.get("window") or {}
    return {
        "id": rule_id,
        "sources": [ip],
        "match": match,
        "action": action,
        "probability": f.get("probability", 1.0),
        "count": f.get("count"),
        "delay_ms": 1000 * f.get("delay", 0.0),
        "jitter_ms": 1000 * f.get("jitter", 0.0),
        "seed": _rule_seed(f.get("seed", 0), f"{rule_id}>{receiver}"),
        **({"active_from_ns": window.get("from"), "active_until_ns": window.get("until")} if window else {}),
    }


def _rule_seed(seed: int, rule_id: str) -> int:
    """Each rule's own random stream, fixed by the run's seed and the rule (fault id and source)."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{rule_id}".encode()).digest()[:8], "big")


def _alive(pid: int, tag: str, module: bytes = b"chaos.nfqueue") -> bool:
    """True if pid runs `module` for this cluster (its command line names both), so a recycled pid is never hit."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return tag.encode() in cmdline and module in cmdline


def _root() -> str:
    """The directory holding the chaos package, so the handler imports this checkout's code."""
    return str(Path(__file__).resolve().parent.parent)

"""The netns fault engine: the network faults in force on one running cluster of network namespaces (the netns,
docker and compose backends), applied to the members' namespaces.

A fault (partition, split, loss, delay, reorder, duplicate, discard) is a set of links (source, receiver). The
engine keeps the faults of a cluster in its state directory (`chaos.json`, under a file lock, so `chaosbed fault`
commands from separate processes and a running scenario see the same table) and, after every change, renders what
each receiving namespace must have (chaos/render.py) and installs it:

- kernel rules (chaos/kernel.py): partitions and loss as nft sets and numgen drops, stateless DISCARD rules as u32
  drops, and NFQUEUE targets for the rest, all replaced in one transaction per namespace;
- netem shaping (chaos/netem.py) for delay, jitter, reorder and duplicate where the kernel has netem;
- otherwise, and for stateful DISCARD rules, the rules of that namespace's NFQUEUE handler (chaos/nfqueue/),
  a process started on demand and stopped when no rule needs it. The handler gets new rules before the kernel sends
  it packets, and is stopped (releasing what it holds) only after the kernel stopped sending.

Counts (`count = 1`: the first matching message) are per link, as in the simulator. Discard rules are read in the
cluster's wire profile (`wire`: chaosbed's own, or a foreign system's such as jgroups-2.12, chaos/profiles/).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from chaos import kernel, netem
from chaos.engine_state import (
    STATE_FILE,
    EngineState,
    HandlerState,
    HandlerStats,
    handler_stats,
    load_state,
    locked_state,
)
from chaos.fault_table import FaultTable, QueueBypass
from chaos.faults import ChaosError, Fault, FaultRecord, TimedFault, fault_order
from chaos.nfqueue import HandlerClient, HandlerProcess, HandlerStartError, default_max_len
from chaos.normalize import normalize
from chaos.render import Endpoint, HandlerRule, Rendered, render
from node.jsonl import PeerClosed

PEAK_PACKETS_PER_S = 150_000  # raw UDP datagrams/s one receiver takes on this machine kind (bench_network)
HANDLER_START_TIMEOUT = 15.0


class NetnsFaultEngine:
    """The fault table of one cluster of network namespaces. Cheap to construct: all state is in
    `state_dir/chaos.json`."""

    plan_ahead = True  # plan() may start handler processes: the scheduler installs a plan dormant first

    def __init__(
        self, state_dir: Path, tag: str, members: dict[str, Endpoint], *, transport: str = "udp", wire: str = "chaosbed"
    ) -> None:
        self.state_dir = Path(state_dir)
        self.tag = tag  # appears in every handler's command line: the cluster label
        self.members = members
        self.transport = transport
        self.wire = wire
        self._state_path = self.state_dir / STATE_FILE
        self._procs: dict[str, HandlerProcess] = {}  # the handlers this process started

    # --- the fault table ------------------------------------------------------------------------------------------

    def normalize(self, kind: str, args: Mapping[str, object]) -> Fault:
        """Checks a fault's arguments against the members (chaos/normalize.py)."""
        return normalize(kind, args, list(self.members), self.transport, self.wire)

    def add(self, kind: str, args: Mapping[str, object], *, seed: int = 0) -> FaultRecord:
        """Applies one fault; returns its record (with its id). Raises ChaosError for a bad fault."""
        fault = self.normalize(kind, args)
        with self._locked() as state:
            state.next += 1
            record = FaultRecord(f"f{state.next}", fault, seed)
            state.faults.append(record)
            try:
                self._apply(state)
            except Exception:
                state.faults.remove(record)
                self._apply(state)
                raise
        return record

    def remove(self, ids: Sequence[str]) -> list[FaultRecord]:
        """Removes the faults with these ids (unknown ids are an error); returns their records."""
        with self._locked() as state:
            known = {f.id for f in state.faults}
            unknown = [i for i in ids if i not in known]
            if unknown:
                in_force = ", ".join(sorted(known)) or "none"
                raise ChaosError(f"no fault {', '.join(unknown)} in force; in force: {in_force}")
            gone = [f for f in state.faults if f.id in ids]
            state.faults = [f for f in state.faults if f.id not in ids]
            self._apply(state)
            self._stop_timers(state, list(ids))
        return gone

    def heal(self) -> list[FaultRecord]:
        """Removes every fault; returns their records."""
        with self._locked() as state:
            gone, state.faults = state.faults, []
            self._apply(state)
            self._stop_timers(state, [f.id for f in gone])
        return gone

    def plan(self, faults: Sequence[TimedFault], t0_ns: int) -> None:
        """Installs scheduled faults ahead of time, each switched on and off by the clock at its window (seconds
        after t0_ns, on CLOCK_MONOTONIC). Calling it again with the same ids replaces their windows (the scheduler
        first installs everything far in the future, which starts the handlers, then moves the windows to the real
        t0, which only rewrites rules). Nothing is switched at the planned instants."""
        ids = {f.id for f in faults}
        with self._locked() as state:
            # one sample of CLOCK_REALTIME - CLOCK_MONOTONIC for the whole plan: nft compares real time
            state.clock_offset = time.time_ns() - time.monotonic_ns()
            state.faults = [f for f in state.faults if f.id not in ids]
            state.faults.extend(f.record(t0_ns) for f in faults)
            self._apply(state)

    def faults(self, *, stats: bool = True) -> list[FaultRecord]:
        """The faults in force, each with the handler's counters for its rules (matched, dropped, ...)."""
        state = self._load()
        if not stats:
            return list(state.faults)
        per_fault: dict[str, dict[str, int]] = {}

        def add(fault_id: str, counters: dict[str, int]) -> None:
            total = per_fault.setdefault(fault_id, {})
            for k, v in counters.items():
                total[k] = total.get(k, 0) + v

        for member, h in state.handlers.items():
            with contextlib.suppress(OSError, ChaosError, ValueError):
                for rule_id, counters in self._stats(member, h)["rules"].items():
                    add(rule_id.split(":", 1)[0], counters)
        if any(f.window for f in state.faults):  # planned partitions and losses: the kernel's rules, one per fault
            for endpoint in self.members.values():
                with contextlib.suppress(OSError, kernel.KernelError):
                    for fault_id, counters in kernel.fault_counters(endpoint.ns).items():
                        add(fault_id, counters)
        return [f.with_handled(per_fault[f.id]) if f.id in per_fault else f for f in state.faults]

    def clock_offset(self) -> int | None:
        """CLOCK_REALTIME - CLOCK_MONOTONIC as sampled by the last plan() (None if nothing was planned)."""
        return self._load().clock_offset

    def queue_bypass(self) -> dict[str, QueueBypass]:
        """Per receiving member with a handler: the packets its queue rules took since they were last installed, and
        how many of them no handler rule judged because the handler fell behind (see QueueBypass)."""
        state = self._load()
        out: dict[str, QueueBypass] = {}
        for member, h in state.handlers.items():
            # the kernel's rule counters first, the handler's numbering after: a packet arriving in between is
            # counted by the handler only, so it can never look bypassed
            queued = kernel.counters(self.members[member].ns)["queued"]
            try:
                stats = self._stats(member, h)
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
                faults=sorted({rule_id.split(":", 1)[0] for rule_id in stats["rules"]}, key=fault_order),
                unknown_shapes=stats.get("unknown_shapes", 0),
            )
        return out

    def shutdown(self) -> None:
        """Stops every handler without touching rules (the namespaces are about to be deleted). Idempotent."""
        if not self._state_path.exists():
            return
        with self._locked() as state:
            self._stop_timers(state, list(state.timers))
            for member in list(state.handlers):
                self._stop_handler(state, member)

    # --- the netns engine's own -------------------------------------------------------------------------------------

    def add_timer(self, fault_id: str, pid: int) -> None:
        """Records the process that will remove fault_id when its time is up (stopped with the fault or cluster)."""
        with self._locked() as state:
            state.timers[fault_id] = pid

    def kernel_counters(self) -> dict[str, dict[str, int]]:
        """Per receiving member, the packets its kernel rules blocked, lost, dropped and queued so far."""
        return {name: kernel.counters(ep.ns) for name, ep in self.members.items()}

    def handler_stats(self) -> dict[str, HandlerStats]:
        """Each running handler's full counters, by receiving member."""
        return {m: self._stats(m, h) for m, h in self._load().handlers.items()}

    def handlers(self) -> dict[str, HandlerState]:
        """The handler processes running now, by receiving member (pid, control socket, queue length)."""
        return dict(self._load().handlers)

    def render(
        self, faults: Sequence[FaultRecord], use_netem: bool, *, time_gates: bool = True, clock_offset: int = 0
    ) -> dict[str, Rendered]:
        """member -> what its namespace must have for these faults (chaos/render.py)."""
        return render(self.members, faults, use_netem, time_gates=time_gates, clock_offset=clock_offset, wire=self.wire)

    # --- applying -------------------------------------------------------------------------------------------------

    def _apply(self, state: EngineState) -> None:
        use_netem = netem.available()
        planned = any(f.window for f in state.faults)
        gates = kernel.time_gates()[0] if planned else True
        rendered = self.render(state.faults, use_netem, time_gates=gates, clock_offset=state.clock_offset or 0)
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
            if not handler_rules and name in state.handlers:
                self._stop_handler(state, name)

    def _stop_timers(self, state: EngineState, ids: list[str]) -> None:
        for fid in ids:
            pid = state.timers.pop(fid, None)
            if pid is not None and pid != os.getpid() and _alive(pid, self.tag, b"orchestration"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)

    def _ensure_handler(self, state: EngineState, name: str, max_delay_ms: float, rules: list[HandlerRule]) -> None:
        need = default_max_len(PEAK_PACKETS_PER_S, max_delay_ms, 0.0)
        h = state.handlers.get(name)
        if h is not None and (h["max_len"] < need or not _alive(h["pid"], self.tag)):
            rules = self._carry_counts(name, h, rules)
            self._stop_handler(state, name)
            h = None
        if h is None:
            h = self._start_handler(name, need)
            state.handlers[name] = h
        reply = self._request(name, h, {"cmd": "rules", "rules": rules})
        # asked before kernel.apply resets the queue rules' counters: queue_bypass compares the two from here on
        numbered = reply.get("numbered", 0)
        h["numbered_at_apply"] = numbered if isinstance(numbered, int) else 0

    def _carry_counts(self, name: str, h: HandlerState, rules: list[HandlerRule]) -> list[HandlerRule]:
        """A handler restarted for a bigger queue keeps what its count rules have left."""
        try:
            counters = self._stats(name, h)["rules"]
        except (OSError, ChaosError, ValueError):
            return rules
        out: list[HandlerRule] = []
        for r in rules:
            acted = counters.get(r["id"], {})
            done = sum(acted.get(k, 0) for k in ("dropped", "delayed", "duplicated", "reordered"))
            count = r["count"]
            if not count:
                out.append(r)
            elif count > done:
                out.append({**r, "count": count - done})
        return out

    def _start_handler(self, name: str, max_len: int) -> HandlerState:
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
        return HandlerState(pid=handler.pid, socket=str(sock), max_len=max_len)

    def _stop_handler(self, state: EngineState, name: str) -> None:
        h = state.handlers.pop(name, None)
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

    def _stats(self, name: str, h: HandlerState) -> HandlerStats:
        return handler_stats(self._request(name, h, {"cmd": "stats"}))

    def _request(
        self, name: str, h: HandlerState, req: Mapping[str, object], timeout: float = 10.0
    ) -> dict[str, object]:
        try:
            reply = HandlerClient(h["socket"]).request(dict(req), timeout)
        except PeerClosed as e:
            reply = {"ok": False, "error": str(e)}
        if not reply.get("ok"):
            raise ChaosError(f"the NFQUEUE handler of {name} refused {req.get('cmd')}: {reply.get('error')}")
        return reply

    # --- state ----------------------------------------------------------------------------------------------------

    def _load(self) -> EngineState:
        return load_state(self.state_dir)

    def _locked(self) -> contextlib.AbstractContextManager[EngineState]:
        return locked_state(self.state_dir)


def _is_a_fault_table(engine: NetnsFaultEngine) -> FaultTable:
    return engine  # mypy checks that the netns engine implements the protocol


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

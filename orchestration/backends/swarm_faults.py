"""The fault table of a swarm cluster (chaos/fault_table.py's FaultTable), on the orchestrator's side: it keeps the
cluster's faults (`chaos.json` in the cluster's state folder, under a file lock, as the netns engine does) and, after
every change, sends the whole table to the chaos agent of every host (orchestration/agent/), each of which renders
and installs its members' share with the netns engine. A planned fault's window is on the orchestrator's
CLOCK_MONOTONIC; each agent moves it by its host's offset (0 on one kernel), and its kernel's clock switches it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from chaos.engine_state import EngineState, load_state, locked_state
from chaos.fault_table import FaultTable, QueueBypass
from chaos.faults import ChaosError, Fault, FaultRecord, TimedFault
from chaos.normalize import normalize
from orchestration.agent.client import AgentClient, HostClock
from orchestration.agent.replies import StatsReply
from orchestration.cluster import ClusterError

R = TypeVar("R")


class SwarmFaultTable:
    """The faults of one swarm cluster, pushed to its hosts' agents."""

    plan_ahead = True  # the agents start NFQUEUE handlers: the scheduler installs a plan dormant first

    def __init__(
        self,
        state_dir: Path,
        label: str,
        members: list[str],
        transport: str,
        agents: Mapping[str, AgentClient],
        clocks: Mapping[str, HostClock],
        endpoints: Callable[[], dict[str, str]],
        lost: Mapping[str, str] | None = None,
    ) -> None:
        self.state_dir, self.label, self.members, self.transport = Path(state_dir), label, members, transport
        self.agents, self.clocks, self.endpoints = agents, clocks, endpoints
        self.lost = lost if lost is not None else {}  # host -> why: the orchestrator's lease renewal gave it up

    # --- the fault table ------------------------------------------------------------------------------------------

    def normalize(self, kind: str, args: Mapping[str, object]) -> Fault:
        return normalize(kind, args, self.members, self.transport)

    def add(self, kind: str, args: Mapping[str, object], *, seed: int = 0) -> FaultRecord:
        fault = self.normalize(kind, args)
        with self._locked() as state:
            state.next += 1
            record = FaultRecord(f"f{state.next}", fault, seed)
            state.faults.append(record)
            try:
                self.push(state.faults)
            except Exception:
                state.faults.remove(record)
                with contextlib.suppress(ChaosError):
                    self.push(state.faults)
                raise
        return record

    def remove(self, ids: Sequence[str]) -> list[FaultRecord]:
        with self._locked() as state:
            known = {f.id for f in state.faults}
            unknown = [i for i in ids if i not in known]
            if unknown:
                in_force = ", ".join(sorted(known)) or "none"
                raise ChaosError(f"no fault {', '.join(unknown)} in force; in force: {in_force}")
            gone = [f for f in state.faults if f.id in ids]
            state.faults = [f for f in state.faults if f.id not in ids]
            self.push(state.faults)
        return gone

    def heal(self) -> list[FaultRecord]:
        with self._locked() as state:
            gone, state.faults = state.faults, []
            self.push(state.faults)
        return gone

    def plan(self, faults: Sequence[TimedFault], t0_ns: int) -> None:
        ids = {f.id for f in faults}
        with self._locked() as state:
            state.clock_offset = time.time_ns() - time.monotonic_ns()  # the orchestrator's: its wall-clock check
            state.faults = [f for f in state.faults if f.id not in ids]
            state.faults.extend(f.record(t0_ns) for f in faults)
            self.push(state.faults)

    def faults(self, *, stats: bool = True) -> list[FaultRecord]:
        """The faults in force, with what the handlers of every host did for their rules (summed over hosts)."""
        records = self._load().faults
        if not stats:
            return list(records)
        handled: dict[str, dict[str, int]] = {}
        for reply in self._stats().values():
            for f in map(FaultRecord.from_json, reply["faults"]):
                for k, v in (f.handled or {}).items():
                    total = handled.setdefault(f.id, {})
                    total[k] = total.get(k, 0) + v
        return [r.with_handled(handled[r.id]) if r.id in handled else r for r in records]

    def clock_offset(self) -> int | None:
        return self._load().clock_offset

    def queue_bypass(self) -> dict[str, QueueBypass]:
        out: dict[str, QueueBypass] = {}
        for reply in self._stats().values():
            for member, b in reply["bypass"].items():
                out[str(member)] = QueueBypass(**b)
        return out

    def shutdown(self) -> None:
        """Nothing runs on the orchestrator's side: each agent stops its handlers when the cluster is released."""

    # --- the swarm's own ----------------------------------------------------------------------------------------------

    def push(self, records: Sequence[FaultRecord]) -> None:
        """The whole table to every host's agent, concurrently; ChaosError naming the hosts that failed. A host the
        lease renewal already lost fails at once (its agent heals it when the lease runs out): a stopped agent would
        hold the push for its whole timeout, and the undo's push again."""
        endpoints = self.endpoints()
        docs = [r.to_json() for r in records]
        generation = time.monotonic_ns()  # an agent ignores a push that arrives after a later one

        def one(host: str) -> str | None:
            shift = self.clocks[host].offset_ns if host in self.clocks else 0
            try:
                self.agents[host].request("faults", cluster=self.label, endpoints=endpoints, records=docs,
                                          shift_ns=shift, generation=generation, timeout=60.0)  # fmt: skip
            except ClusterError as e:
                return str(e)
            return None

        lost = {
            h: why if why.startswith(f"host {h} is lost") else f"host {h} is lost: {why}"
            for h, why in self.lost.items()
        }
        with ThreadPoolExecutor(max(1, len(self.agents))) as pool:
            failed = [*lost.values(), *(e for e in pool.map(one, [h for h in self.agents if h not in lost]) if e)]
        if failed:
            raise ChaosError("; ".join(failed))

    def kernel_counters(self) -> dict[str, dict[str, int]]:
        """Per receiving member (on every host), the packets its kernel rules acted on."""
        out: dict[str, dict[str, int]] = {}
        for reply in self._stats().values():
            out.update(reply["kernel"])
        return out

    def installed(self) -> dict[str, Mapping[str, object]]:
        """Per host: the kernel rules left in its members' namespaces and its running handlers."""
        return self._each(lambda agent: agent.request("installed", cluster=self.label))

    def _stats(self) -> dict[str, StatsReply]:
        return self._each(lambda agent: agent.request("stats", cluster=self.label))

    def _each(self, ask: Callable[[AgentClient], R]) -> dict[str, R]:
        try:
            return {host: ask(agent) for host, agent in self.agents.items()}
        except ClusterError as e:
            raise ChaosError(str(e)) from None

    def _load(self) -> EngineState:
        return load_state(self.state_dir)

    def _locked(self) -> contextlib.AbstractContextManager[EngineState]:
        return locked_state(self.state_dir)


def _is_a_fault_table(table: SwarmFaultTable) -> FaultTable:
    return table  # mypy checks that the swarm's table implements the protocol

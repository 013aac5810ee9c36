"""The fault table of one cluster's members on ONE host of a swarm: the netns fault engine (chaos/netns_engine.py)
restricted to the receivers that run here. It renders every fault of the cluster exactly as the netns engine does
(chaos/render.py: a fault acts where its packets arrive, keyed by the source's address, so the sources on other
hosts are named by their overlay addresses) and installs the share of the local receivers only: the same nft rules
with their `meta time` gates, the same iptables queue targets and NFQUEUE handlers, in the member containers'
network namespaces (attached on this host as `<cluster>-<member>`). No second fault engine: the records the
orchestrator sends replace the table's faults, and the netns engine's own apply does the rest."""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import replace
from pathlib import Path

from chaos import kernel
from chaos.faults import FaultRecord, FaultWindow
from chaos.netns_engine import NetnsFaultEngine
from chaos.render import Endpoint, Rendered


class HostFaultEngine(NetnsFaultEngine):
    """The netns engine of the members in `local` (a subset of `members`, every member of the cluster)."""

    def __init__(
        self, state_dir: Path, tag: str, members: dict[str, Endpoint], local: Collection[str], *, transport: str
    ) -> None:
        super().__init__(state_dir, tag, members, transport=transport)
        self.local = frozenset(local)

    def render(
        self, faults: Sequence[FaultRecord], use_netem: bool, *, time_gates: bool = True, clock_offset: int = 0
    ) -> dict[str, Rendered]:
        rendered = super().render(faults, use_netem, time_gates=time_gates, clock_offset=clock_offset)
        return {name: share for name, share in rendered.items() if name in self.local}

    def kernel_counters(self) -> dict[str, dict[str, int]]:
        return {name: kernel.counters(self.members[name].ns) for name in sorted(self.local)}

    def install(self, records: Sequence[FaultRecord], shift_ns: int) -> None:
        """Makes `records` the faults in force (the orchestrator's whole table), their windows moved by `shift_ns`
        (this host's CLOCK_MONOTONIC minus the orchestrator's: 0 on the orchestrator's own kernel). The offset of
        CLOCK_REALTIME that the nft time gates compare with is sampled here, as the netns engine's plan() does."""
        moved = [r if r.window is None else replace(r, window=_shift(r.window, shift_ns)) for r in records]
        with self._locked() as state:
            state.clock_offset = time.time_ns() - time.monotonic_ns()
            state.faults = moved
            state.next = max([state.next, *(int(r.id[1:]) for r in moved if r.id[1:].isdigit())])
            self._apply(state)

    def installed(self) -> dict[str, dict[str, str]]:
        """What the kernel holds in each local member's namespace (chaos/kernel.py `installed`): the nft table and
        the iptables chain, empty when no rule is left."""
        return {name: kernel.installed(self.members[name].ns) for name in sorted(self.local)}


def _shift(window: FaultWindow, shift_ns: int) -> FaultWindow:
    return FaultWindow(window.start + shift_ns, None if window.until is None else window.until + shift_ns)

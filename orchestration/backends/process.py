"""Members as plain processes on loopback addresses 127.77.X.(10+i): no root needed, no network faults (every member
shares the host's loopback, so there is no per-link place to apply them; use the netns backend for chaos)."""

from __future__ import annotations

from collections.abc import Mapping

from orchestration.backends.real import RealCluster, state_str
from orchestration.cluster import MemberInfo
from orchestration.host import claims

DATA_PORT = 47_000


class ProcessCluster(RealCluster):
    backend_name = "process"

    def _place(self, names: list[str]) -> None:
        subnet = 1 + claims.claim(self.label, "process", 250, self.state_dir)  # no other live cluster has it
        self._group = f"239.77.{subnet}.1"
        for i, name in enumerate(names):
            self.members[name] = MemberInfo(name, f"127.77.{subnet}.{10 + i}", DATA_PORT)

    def _extra_config(self) -> dict[str, object]:
        return {"mcast_group": self._group, "mcast_loop": True}

    def _network_state(self) -> dict[str, object]:
        return {"group": getattr(self, "_group", None)}

    def _restore_network(self, network: Mapping[str, object]) -> None:
        self._group = state_str(network, "group") or ""

"""Members as plain processes on loopback addresses 127.77.X.(10+i): no root needed, no network faults (every member
shares the host's loopback, so there is no per-link place to apply them; use the netns backend for chaos)."""

from __future__ import annotations

import socket
from collections.abc import Mapping

from orchestration.backends.real import RealCluster, state_str
from orchestration.cluster import MemberInfo
from orchestration.host import claims

DATA_PORT = 47_000
CLAIM_TRIES = 5  # subnets tried before giving up on finding one whose addresses are free


class ProcessCluster(RealCluster):
    backend_name = "process"

    def _place(self, names: list[str]) -> None:
        for _ in range(CLAIM_TRIES):
            subnet = 1 + claims.claim(self.label, "process", 250, self.state_dir)  # no other live cluster has it
            ips = [f"127.77.{subnet}.{10 + i}" for i in range(len(names))]
            if all(_free(ip) for ip in ips):  # a member left by a killed run may still hold a lapsed claim's ports
                break
        self._group = f"239.77.{subnet}.1"
        for name, ip in zip(names, ips, strict=True):
            self.members[name] = MemberInfo(name, ip, DATA_PORT)

    def _extra_config(self) -> dict[str, object]:
        return {"mcast_group": self._group, "mcast_loop": True}

    def _network_state(self) -> dict[str, object]:
        return {"group": getattr(self, "_group", None)}

    def _restore_network(self, network: Mapping[str, object]) -> None:
        self._group = state_str(network, "group") or ""


def _free(ip: str) -> bool:
    """Whether a member can bind ip: its UDP data port and TCP control port (DATA_PORT + 1) are free."""
    for kind, port in ((socket.SOCK_DGRAM, DATA_PORT), (socket.SOCK_STREAM, DATA_PORT + 1)):
        with socket.socket(socket.AF_INET, kind) as s:
            if kind == socket.SOCK_STREAM:  # as the member's control server binds: a TIME_WAIT does not count
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((ip, port))
            except OSError:
                return False
    return True

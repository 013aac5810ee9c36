"""The orchestrator's side of a chaos agent: requests over TCP (JSON lines, the token), made from inside a network
namespace when the agent's host is one (the engines of the local test swarm, orchestration/host/swarm_engines.py),
and the clock offset of its host."""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, overload

from node import jsonl
from orchestration.agent.replies import AttachReply, HelloReply, HistoryReply, StatsReply
from orchestration.backends.netns import _socket_in_namespace
from orchestration.cluster import ClusterError

if TYPE_CHECKING:
    from orchestration.backends.swarm_hosts import SwarmHost

CLOCK_SAMPLES = 7


def local_boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class HostClock:
    """A host's CLOCK_MONOTONIC against the orchestrator's: `offset_ns` = host - orchestrator. Exactly 0 on the
    orchestrator's own kernel (same boot id: one clock), else estimated from the round trip with the least delay
    (`rtt_ns`), with an error of at most rtt_ns / 2. `measured_ns` is that estimate even on one kernel: what the
    measurement's error is there."""

    offset_ns: int
    rtt_ns: int
    same_clock: bool
    measured_ns: int

    def to_json(self) -> dict[str, object]:
        return {"offset_ns": self.offset_ns, "rtt_ns": self.rtt_ns, "same_clock": self.same_clock,
                "measured_ns": self.measured_ns}  # fmt: skip

    @classmethod
    def from_json(cls, d: object) -> HostClock:
        """From to_json's form (a swarm cluster's state file); TypeError when it is not that."""
        if not isinstance(d, dict) or set(d) != {"offset_ns", "rtt_ns", "same_clock", "measured_ns"}:
            raise TypeError(f"not a host clock: {d!r}")
        offset, rtt, same, measured = d["offset_ns"], d["rtt_ns"], d["same_clock"], d["measured_ns"]
        if not (
            isinstance(offset, int) and isinstance(rtt, int) and isinstance(same, bool) and isinstance(measured, int)
        ):
            raise TypeError(f"not a host clock: {d!r}")
        return cls(offset, rtt, same, measured)


class AgentLost(ClusterError):
    """The agent of a host did not answer: the host is lost to the orchestrator (its lease heals its faults)."""


class AgentClient:
    """Requests to one host's agent."""

    def __init__(self, host: str, address: str, port: int, token: str, netns: str | None = None) -> None:
        self.host, self.address, self.port, self.token, self.netns = host, address, port, token, netns

    @classmethod
    def of(cls, host: SwarmHost, token: str, port: int | None = None) -> AgentClient:
        """The client of a swarm host's agent (on `port` instead of the host's agent_port: another agent service)."""
        return cls(host.name, host.address, host.agent_port if port is None else port, token, host.netns)

    def _connect(self, timeout: float) -> socket.socket:
        if self.netns:
            return _socket_in_namespace(self.netns, (self.address, self.port), timeout)
        return socket.create_connection((self.address, self.port), timeout=timeout)

    @overload
    def request(
        self, cmd: Literal["hello"], *, timeout: float = 15.0, request_timeout: float | None = None, **args: object
    ) -> HelloReply: ...

    @overload
    def request(
        self, cmd: Literal["attach"], *, timeout: float = 15.0, request_timeout: float | None = None, **args: object
    ) -> AttachReply: ...

    @overload
    def request(
        self, cmd: Literal["history"], *, timeout: float = 15.0, request_timeout: float | None = None, **args: object
    ) -> HistoryReply: ...

    @overload
    def request(
        self, cmd: Literal["stats"], *, timeout: float = 15.0, request_timeout: float | None = None, **args: object
    ) -> StatsReply: ...

    @overload
    def request(
        self, cmd: str, *, timeout: float = 15.0, request_timeout: float | None = None, **args: object
    ) -> Mapping[str, object]: ...

    def request(
        self, cmd: str, *, timeout: float = 15.0, request_timeout: float | None = None, **args: object
    ) -> Mapping[str, object]:
        """The agent's reply (ok); AgentLost when it does not answer within `request_timeout` (default: `timeout`,
        which is also passed to the agent as the request's own), ClusterError when it refuses. The replies the
        orchestrator reads field by field have their types (replies.py: the agent builds them as those)."""
        req: dict[str, object] = {"token": self.token, "cmd": cmd, "timeout": timeout, **args}
        wait = request_timeout or timeout + 5.0
        try:
            reply = jsonl.request(lambda: self._connect(wait), req, wait, peer=f"the agent of host {self.host}")
        except (OSError, ValueError) as e:
            raise AgentLost(f"host {self.host} is lost: its agent at {self.address}:{self.port} did not answer "
                            f"{cmd!r} ({e})") from None  # fmt: skip
        if not reply.get("ok"):
            raise ClusterError(f"host {self.host}: {reply.get('error')}")
        return reply

    def clock(self) -> HostClock:
        """This host's clock against ours (see HostClock)."""
        best: tuple[int, int] | None = None
        boot = ""
        for _ in range(CLOCK_SAMPLES):
            sent = time.monotonic_ns()
            reply = self.request("hello")
            received = time.monotonic_ns()
            boot = str(reply.get("boot_id", ""))
            rtt, offset = received - sent, int(reply["mono_ns"]) - (sent + received) // 2
            if best is None or rtt < best[0]:
                best = (rtt, offset)
        assert best is not None
        same = bool(boot) and boot == local_boot_id()
        return HostClock(0 if same else best[1], best[0], same, best[1])

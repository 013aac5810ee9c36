"""The agent's replies that the orchestrator reads field by field (server.py's docstring lists every request). The
agent builds them as these types (server.py, host.py) and JSON keeps their shape, so client.py hands them to the
orchestrator as these types too; the other replies are plain JSON objects."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from chaos.fault_table import QueueBypass
from chaos.faults import JsonObject


class HelloReply(TypedDict):
    host: str
    boot_id: str  # the kernel's: hosts that share it share CLOCK_MONOTONIC
    mono_ns: int  # the host's CLOCK_MONOTONIC
    real_ns: int  # and CLOCK_REALTIME when it answered
    pid: int  # the agent's, in its host's pid namespace


class AttachedMember(TypedDict):
    ip: str  # on the cluster's network
    pid: int  # the member process, in the host's pid namespace
    container: str  # the first 12 characters of its container's id


class AttachReply(TypedDict):
    members: dict[str, AttachedMember]


class HistoryReply(TypedDict):
    data: str  # a chunk of the history file (utf-8, surrogateescape)
    size: int  # of the whole file
    next: int  # the offset after the chunk


class BypassReply(TypedDict):
    """A QueueBypass's fields."""

    member: str
    queued: int
    full_queue: int
    overflowed: int
    dropped: int
    faults: list[str]
    unknown_shapes: NotRequired[int]


class StatsReply(TypedDict):
    faults: list[JsonObject]  # FaultRecord.to_json of each fault in force, with what its handler rules did
    kernel: dict[str, dict[str, int]]  # per local member, the packets its kernel rules acted on
    bypass: dict[str, BypassReply]  # per local member


def bypass_reply(b: QueueBypass) -> BypassReply:
    return {"member": b.member, "queued": b.queued, "full_queue": b.full_queue, "overflowed": b.overflowed,
            "dropped": b.dropped, "faults": b.faults, "unknown_shapes": b.unknown_shapes}  # fmt: skip

"""What a discard did on real JGroups 5 members, seen three ways (tests/foreign/test_jgroups5_discards.py): what reached
the receiving member's interface (an AF_PACKET capture in its namespace, before the kernel's rules, decoded by the
profile), what the rule says it did (the handler's matched and dropped, the kernel's DROP counter), and what the
member's JGroups counted (the taps below its reliable protocols: messages received per header type, and the jar's own
managed attributes)."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.faults import FaultRecord
from chaos.profiles import jgroups5 as wire
from chaos.profiles import jgroups5_rules as rules
from chaos.profiles import parse_match
from foreign.jgroups.wire_capture import Capture
from orchestration.backends.netns import NetnsCluster

TAPPED = {"udp": ("UNICAST3", "NAKACK2"), "nakack4": ("UNICAST4", "NAKACK4")}


def events(cluster: NetnsCluster, name: str) -> list[dict[str, Any]]:
    out = []
    for line in (Path(cluster.workdir) / "history" / f"{name}.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def delivered(cluster: NetnsCluster, name: str) -> list[str]:
    """The msg_ids member `name` delivered, in order."""
    return [e["msg_id"] for e in events(cluster, name) if e["event"] == "deliver"]


def last_seqno(cluster: NetnsCluster, sender: str, kind: str, dest: str | None = None) -> int:
    """The seqno of the last message of this kind the sender's history says it sent (to dest)."""
    sends = [e for e in events(cluster, sender) if e["event"] == "send" and e["kind"] == kind]
    sends = [e for e in sends if dest is None or e["dest"] == dest]
    assert sends, f"{sender} sent no {kind}"
    return int(sends[-1]["seqno"])


def counters(cluster: NetnsCluster, name: str) -> dict[str, Any]:
    """The member's counters: JGroups' own per protocol, and under "wire" its taps' per protocol."""
    reply = cluster.control(name, "stats")
    result: dict[str, Any] = reply["counters"]
    return result


@dataclass
class Snapshot:
    """A quiet instant: how many datagrams the capture had, and what the members' counters said."""

    index: int
    t: int
    counters: dict[str, dict[str, Any]]


@dataclass
class Frame:
    t: int
    src: str
    dgram: wire.Datagram


@dataclass
class Watch:
    """A capture at `receiver`'s interface for the test's length, and the quiet instants taken."""

    cluster: NetnsCluster
    receiver: str
    stack: str = "udp"
    cap: Capture = field(init=False)

    def __post_init__(self) -> None:
        self.cap = Capture(self.cluster.member_ns(self.receiver), reassemble=True)

    def stop(self) -> None:
        self.cap.stop()

    def frames(self, start: int = 0, end: int | None = None) -> list[Frame]:
        by_ip = {m.ip: n for n, m in self.cluster.members.items()}
        with self.cap.lock:
            found = list(self.cap.datagrams[start:end])
        return [Frame(d["t"], by_ip.get(d["src_ip"], d["src_ip"]), wire.decode(d["payload"])) for d in found]

    def quiet(self, seconds: float = 1.5, timeout: float = 30.0) -> Snapshot:
        """Waits until nothing of the tapped protocols reached the receiver for `seconds` and the members' tap
        counters stood still meanwhile; returns that instant."""
        protocols = TAPPED[self.stack]
        names = self.cluster.running()
        deadline = time.monotonic() + timeout
        while True:
            before = {n: counters(self.cluster, n) for n in names}
            index = len(self.frames())
            time.sleep(seconds)  # a quiet period is what is measured here: no tapped message for this long
            after = {n: counters(self.cluster, n) for n in names}
            new = self.frames(index)
            tapped = [f for f in new if any(h.protocol in protocols for m in f.dgram.messages for h in m.headers)]
            if not tapped and all(before[n]["wire"] == after[n]["wire"] for n in names):
                return Snapshot(index, time.monotonic_ns(), after)
            assert time.monotonic() < deadline, f"no quiet {seconds:g} s at {self.receiver} within {timeout:g} s"


def messages(frames: list[Frame], key: str, src: str | None = None) -> int:
    """How many messages of these frames carry a header `key` (UNICAST3.ACK, GMS.VIEW)."""
    return sum(1 for f in frames if src in (None, f.src) for m in f.dgram.messages for h in m.headers if h.key == key)


def hits(frames: list[Frame], expr: str, src: str) -> list[bool]:
    """Per message from src, in arrival order, whether the rule's match holds (the decoder's reading)."""
    spec = rules.spec_of(parse_match(expr, "jgroups-5"))
    fields = dict(parse_match(expr, "jgroups-5").fields)
    out = []
    for f in frames:
        if f.src != src:
            continue
        for m in f.dgram.messages:
            out.append(any(_holds(h, spec, fields) for h in m.headers))
    return out


def _holds(h: wire.Header, spec: rules.RuleSpec, fields: dict[str, Any]) -> bool:
    if (h.id, h.magic, h.type) != (spec.header.id, spec.header.magic, spec.type_code):
        return False
    for name, want in fields.items():
        lo, hi = want if isinstance(want, tuple) else (want, want)
        if not lo <= int(h.fields[name]) <= hi:
            return False
    return True


def tap_delta(s1: Snapshot, s2: Snapshot, member: str, protocol: str, direction: str = "received") -> Counter[str]:
    a = s1.counters[member]["wire"][protocol][direction]
    b = s2.counters[member]["wire"][protocol][direction]
    return Counter({k: b[k] - a.get(k, 0) for k in b if b[k] - a.get(k, 0)})


def jar_delta(s1: Snapshot, s2: Snapshot, member: str, protocol: str, attr: str) -> int:
    return int(s2.counters[member][protocol][attr]) - int(s1.counters[member][protocol][attr])


def handled(cluster: NetnsCluster, record: FaultRecord, source: str, receiver: str) -> dict[str, int]:
    """The handler's counters of the rule at the receiver (matched, dropped)."""
    result: dict[str, int] = cluster.chaos.handler_stats()[receiver]["rules"][f"{record.id}:{source}"]
    return result


def wait(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(0.05)  # polling a condition with a deadline
    return value


def dropped_messages(frames: list[Frame], expr: str, src: str, count: int) -> list[wire.Message]:
    """The messages a rule with this count dropped: the first `count` from src that match, in arrival order (the
    handler judges in the order the capture saw them)."""
    spec = rules.spec_of(parse_match(expr, "jgroups-5"))
    fields = dict(parse_match(expr, "jgroups-5").fields)
    out = []
    for f in frames:
        for m in f.dgram.messages if f.src == src else ():
            if len(out) < count and any(_holds(h, spec, fields) for h in m.headers):
                out.append(m)
    return out


def expected_tap(frames: list[Frame], protocol: str, gone: list[wire.Message]) -> Counter[str]:
    """What the receiver's tap below `protocol` must have counted: every message of the frames with a `protocol`
    header, by type, but those the rule dropped."""
    counts: Counter[str] = Counter()
    for f in frames:
        for m in f.dgram.messages:
            counts.update(h.type_name or "" for h in m.headers if h.protocol == protocol)
    for m in gone:
        counts.subtract(h.type_name or "" for h in m.headers if h.protocol == protocol)
    return +counts

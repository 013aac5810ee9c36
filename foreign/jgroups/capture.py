"""Golden datagrams: captures what three real JGroups 2.12.2 members put on the wire, and writes it as fixtures
(tests/fixtures/jgroups212/) with its known meaning, as the jar itself reads it.

Root only (network namespaces). Three members A, B, C (the system jgroups-2.12 on the netns backend, started through
the Cluster API as `chaosbed run` starts it, the capture hooked in before the first member starts) run the
unicast2-fast stack with UNICAST2's stable_interval at 1 s (so that UNICAST2 STABLE shows up in seconds). A raw
AF_PACKET socket in the switch namespace sees every frame as it enters the bridge from a member's veth (frames leaving
the bridge and the bridge's own copies are skipped), so each datagram is captured once, at its sender. The run:

 1. A starts, then B joins, then C joins: discovery (PING), JOIN_REQ/JOIN_RSP, VIEW, VIEW_ACK;
 2. unicasts B -> C (the first message of a connection opened by application data, first=true) and A -> B;
 3. multicasts: a burst from A (bundled: LIST datagrams with several messages) and three paced ones from C;
 4. STABLE gossip and STABILITY (pbcast.STABLE) and UNICAST2 STABLE, waited for on the wire;
 5. a NAKACK XMIT_REQ: C drops A's multicasts (iptables in C's namespace) while A multicasts one message, then A
    multicasts another, C sees the gap and asks, A multicasts the missing one again;
 6. a UNICAST2 XMIT_REQ: B drops A's unicasts for one message, the next one shows B the gap;
 7. a split of C from A and B until both sides install their own views, then the heal and MERGE2's merge
    (MERGE_REQ/RSP, INSTALL_MERGE_VIEW with a MergeView);
 8. SIGTERM to all three.

A second, shorter run (`--only unicast` runs it alone) captures the ack-based UNICAST of the stock udp.xml (the
fixed variant of the UNICAST2 bugs) into the subfolder unicast/: A starts, B joins, unicasts both ways (DATA and
ACK), one of A's unicasts dropped at B and retransmitted by A's own timer, and two multicasts.

Every step waits on a condition (a history line, a datagram on the wire) with a deadline. Then the jar's own reader
(chaosbed.jgroups.Decode) decodes every datagram, and the fixture folder gets:
- datagrams.jsonl: one line per datagram kept: n (capture order), t (CLOCK_MONOTONIC ns, the histories' clock), src
  and dst (member names, "*" for multicast), src_port, dst_port, hex (the UDP payload) and jgroups (the jar's decoding:
  form, addresses, messages with offsets, headers with their fields). Periodic traffic (FD_ALL heartbeats, MERGE2
  probes, UNICAST2 STABLE) is thinned to the first 3 of each kind per sender; everything else is kept;
- capture.json: the run's cluster name, addresses, multicast group and port, members (ip, port, UUID), stack, what
  was captured and kept per kind, and the steps with their instants;
- history/A.jsonl, B.jsonl, C.jsonl: the members' histories of the run.

    python -m foreign.jgroups.capture --out tests/fixtures/jgroups212
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos.profiles import jgroups212 as wire
from foreign import jgroups
from foreign.jgroups.wire_capture import Capture
from orchestration.backends.netns import NetnsCluster
from orchestration.backends.real import RealCluster
from orchestration.cluster import ClusterError, MemberInfo

NAMES = ["A", "B", "C"]
CLUSTER = "cbgold"
THINNED = ("FD_ALL", "PING.GET_MBRS_REQ", "UNICAST2.STABLE")  # periodic: only the first few per sender are kept
KEEP_PER_SENDER = 3


class LaunchError(RuntimeError):
    """The capture's cluster could not be started or did not do what a step waits for."""


def wait_until(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Polls `condition` until it returns a true value (returned) or `timeout` seconds pass (LaunchError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise LaunchError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


class CaptureCluster:
    """The capture's members: a netns cluster of the 2.12 member with the capture's stack file and the fixed JGroups
    cluster name CLUSTER (the fixtures name it), through the Cluster API. start() creates the network, calls
    `on_network(switch namespace)` before the first member starts, then starts them one by one (each joined before
    the next). The rest is what the capture's steps ask of it: histories, control replies, iptables in a member's
    namespace."""

    def __init__(self, names: list[str], *, stack: str, workdir: Path) -> None:
        import dataclasses

        from orchestration.systems import SYSTEMS
        from orchestration.systems.clusters import new_cluster, spec_of

        system = dataclasses.replace(SYSTEMS["jgroups-2.12"], stacks=(stack,), stack=stack,
                                     member_config={"cluster": CLUSTER})  # fmt: skip
        cluster = new_cluster(spec_of(system, names, "netns", stack=stack), workdir=workdir)
        assert isinstance(cluster, NetnsCluster) and isinstance(cluster, RealCluster)
        self.c = cluster
        self.cluster = CLUSTER
        self.workdir = workdir
        self.mcast_group, self.mcast_port = "", 0

    def start(self, on_network: Callable[[str], None]) -> None:
        self.c.before_members = lambda _: on_network(self.c.switch_ns)
        try:
            self.c.start(timeout=60)
            self.c.wait_for_view(timeout=30)
        except ClusterError as e:
            raise LaunchError(str(e)) from None
        config = json.loads(Path(next(iter(self.members.values())).config).read_text())  # gone after close()
        self.mcast_group, self.mcast_port = str(config["mcast_group"]), int(config["mcast_port"])

    @property
    def members(self) -> dict[str, MemberInfo]:
        return self.c.members

    def history(self, name: str) -> list[dict[str, Any]]:
        out = []
        for raw in Path(self.members[name].history).read_bytes().split(b"\n"):
            try:
                e = json.loads(raw)
            except ValueError:
                continue
            if isinstance(e, dict):
                out.append(e)
        return out

    def control(self, name: str, cmd: str, **args: Any) -> dict[str, Any]:
        return dict(self.c.control(name, cmd, **args))

    def ns_run(self, name: str, *argv: str) -> None:
        ns = self.members[name].netns or self.c.member_ns(name)
        proc = subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True)
        if proc.returncode != 0:
            raise LaunchError(f"{' '.join(argv)} in {ns} failed: {proc.stderr.strip()}")

    def wait_view(self, names: list[str] | None = None, timeout: float = 30.0) -> dict[str, Any]:
        """Waits until the members `names` (default: all) share one view of exactly them."""
        want = sorted(names or self.members)

        def agreed() -> dict[str, Any] | None:
            views = [self.control(n, "view")["view"] for n in want]
            first = views[0]
            if first is None or sorted(first["members"]) != want:
                return None
            return first if all(v == first for v in views) else None

        return dict(wait_until(agreed, timeout, f"one view of {want}"))

    def stop_all(self) -> None:
        self.c.stop_members()

    def close(self) -> None:
        self.c.down()


def decode_with_jar(payloads: list[bytes]) -> list[dict[str, Any]]:
    """The jar's own decoding of each datagram (chaosbed.jgroups.Decode), in order."""
    argv = ["java", *jgroups.JVM_OPTIONS, "-cp", f"{jgroups.jar()}:{jgroups.CLASSES}", jgroups.DECODER]
    proc = subprocess.run(
        argv, input="".join(p.hex() + "\n" for p in payloads), capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the decoder failed: {proc.stderr[-2000:]}")
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    if len(out) != len(payloads):
        raise RuntimeError(f"the decoder answered {len(out)} lines for {len(payloads)} datagrams")
    return out


def _delivered_all(c: CaptureCluster, name: str, msg_ids: set[str]) -> bool:
    return deliveries(c, name, msg_ids) == msg_ids


def deliveries(c: CaptureCluster, name: str, msg_ids: set[str]) -> set[str]:
    return {str(e.get("msg_id")) for e in c.history(name) if e["event"] == "deliver"} & msg_ids


def _check() -> None:
    from orchestration.backends.netns import check_netns_available

    try:
        check_netns_available()
    except ClusterError as e:
        raise SystemExit(f"capture: needs network namespaces: {e}") from None
    if problem := jgroups.missing():
        raise SystemExit(f"capture: {problem}")
    jgroups.build()


def run(out: Path, workdir: Path) -> None:
    _check()
    stack = workdir / "capture-stack.xml"
    fast = (jgroups.STACKS_DIR / "unicast2-fast.xml").read_text()
    assert "<UNICAST2/>" in fast
    stack.write_text(fast.replace("<UNICAST2/>", '<UNICAST2 stable_interval="1000"/>'))
    steps: list[dict[str, Any]] = []

    def step(what: str) -> None:
        steps.append({"t": time.monotonic_ns(), "step": what})
        print(f"capture: {what}", flush=True)

    c = CaptureCluster(NAMES, stack=str(stack), workdir=workdir)
    caps: list[Capture] = []
    try:
        step("A starts, then B and C join one at a time")
        c.start(lambda sw: caps.append(Capture(sw)))
        cap = caps[0]
        ip = {n: m.ip for n, m in c.members.items()}

        _traffic(c, cap, step)
        _retransmissions(c, cap, step, ip)
        _split_and_merge(c, step, ip)
        step("SIGTERM to all")
        c.stop_all()
    finally:
        for one in caps:
            one.stop()
        c.close()

    write_fixtures(out, c, caps[0], steps, stack)


def run_unicast(out: Path, workdir: Path) -> None:
    """The UNICAST (ack-based) capture: two members of the unicast-fast stack, into out (see the docstring)."""
    _check()
    stack = jgroups.STACKS_DIR / "unicast-fast.xml"
    steps: list[dict[str, Any]] = []

    def step(what: str) -> None:
        steps.append({"t": time.monotonic_ns(), "step": what})
        print(f"capture: {what}", flush=True)

    c = CaptureCluster(["A", "B"], stack=str(stack), workdir=workdir)
    caps: list[Capture] = []
    try:
        step("A starts, then B joins")
        c.start(lambda sw: caps.append(Capture(sw)))
        cap = caps[0]
        step("unicasts A -> B and B -> A: UNICAST DATA and ACK")
        c.control("A", "send", to="B", count=3, size=100, rate=20)
        c.control("B", "send", to="A", count=2, size=100, rate=20)
        wait_until(lambda: deliveries(c, "B", {"A>B#1", "A>B#2", "A>B#3"}) == {"A>B#1", "A>B#2", "A>B#3"}, 20, "B")
        wait_until(lambda: deliveries(c, "A", {"B>A#1", "B>A#2"}) == {"B>A#1", "B>A#2"}, 20, "A to deliver B's")
        wait_until(lambda: cap.keys()["UNICAST.ACK"], 10, "a UNICAST ACK on the wire")
        step("B drops A's unicasts for one message: A's UNICAST resends it until acked")
        rule = ["-s", c.members["A"].ip, "-p", "udp", "--dport", str(c.members["B"].port), "-j", "DROP"]
        c.ns_run("B", "iptables", "-I", "INPUT", *rule)
        try:
            c.control("A", "send", to="B", count=1, size=100)
            wait_until(lambda: cap.carries(b"A>B#4\0"), 10, "A>B#4 on the wire (B drops it)")
        finally:
            c.ns_run("B", "iptables", "-D", "INPUT", *rule)
        wait_until(lambda: deliveries(c, "B", {"A>B#4"}), 30, "B to get A>B#4 from A's retransmission")
        step("multicasts: 2 from A")
        c.control("A", "multicast", count=2, size=100, rate=20)
        want = {"A>*#1", "A>*#2"}
        for name in ("A", "B"):
            wait_until(functools.partial(_delivered_all, c, name, want), 20, f"{name} to deliver the multicasts")
        step("SIGTERM to both")
        c.stop_all()
    finally:
        for one in caps:
            one.stop()
        c.close()
    write_fixtures(out, c, caps[0], steps, stack, "the stock udp.xml's UNICAST (stacks/unicast-fast.xml)")


Step = Callable[[str], None]


def _traffic(c: CaptureCluster, cap: Capture, step: Step) -> None:
    """Unicasts (the first message of a connection among them), bundled and paced multicasts, STABLE rounds."""
    step("unicasts B -> C (first message of a connection) and A -> B")
    c.control("B", "send", to="C", count=3, size=100, rate=20)
    c.control("A", "send", to="B", count=3, size=100, rate=20)
    want = {"B>C#1", "B>C#2", "B>C#3"}
    wait_until(lambda: deliveries(c, "C", want) == want, 20, "C to deliver B's unicasts")
    want = {"A>B#1", "A>B#2", "A>B#3"}
    wait_until(lambda: deliveries(c, "B", want) == want, 20, "B to deliver A's unicasts")

    step("multicasts: a burst of 10 from A (bundled), 3 paced from C")
    c.control("A", "multicast", count=10, size=100)
    c.control("C", "multicast", count=3, size=100, rate=20)
    want = {f"A>*#{i}" for i in range(1, 11)} | {"C>*#1", "C>*#2", "C>*#3"}
    for name in NAMES:
        wait_until(functools.partial(_delivered_all, c, name, want), 20, f"{name} to deliver the multicasts")

    step("STABLE gossip, STABILITY and UNICAST2 STABLE on the wire")
    wanted = ("STABLE.STABLE_GOSSIP", "STABLE.STABILITY", "UNICAST2.STABLE")
    wait_until(lambda: all(cap.keys()[k] for k in wanted), 30, f"{', '.join(wanted)} on the wire")


def _retransmissions(c: CaptureCluster, cap: Capture, step: Step, ip: dict[str, str]) -> None:
    """A NAKACK and a UNICAST2 XMIT_REQ, each caused by dropping one message with a short iptables rule."""
    step("NAKACK XMIT_REQ: C drops A's multicasts for one message")
    rule = ["-s", ip["A"], "-p", "udp", "--dport", str(c.mcast_port), "-j", "DROP"]
    c.ns_run("C", "iptables", "-I", "INPUT", *rule)
    try:
        c.control("A", "multicast", count=1, size=100)
        wait_until(lambda: deliveries(c, "B", {"A>*#11"}), 20, "B to deliver A>*#11")
    finally:
        c.ns_run("C", "iptables", "-D", "INPUT", *rule)
    c.control("A", "multicast", count=1, size=100)
    wait_until(lambda: deliveries(c, "C", {"A>*#11", "A>*#12"}) == {"A>*#11", "A>*#12"}, 30, "C to recover")
    wait_until(lambda: cap.keys()["NAKACK.XMIT_REQ"], 10, "a NAKACK XMIT_REQ on the wire")

    step("UNICAST2 XMIT_REQ: B drops A's unicasts for one message")
    rule = ["-s", ip["A"], "-p", "udp", "--dport", str(c.members["B"].port), "-j", "DROP"]
    c.ns_run("B", "iptables", "-I", "INPUT", *rule)
    try:
        c.control("A", "send", to="B", count=1, size=100)
        wait_until(lambda: cap.carries(b"A>B#4\0"), 10, "A>B#4 on the wire (B drops it)")
    finally:
        c.ns_run("B", "iptables", "-D", "INPUT", *rule)
    c.control("A", "send", to="B", count=1, size=100)
    wait_until(lambda: deliveries(c, "B", {"A>B#4", "A>B#5"}) == {"A>B#4", "A>B#5"}, 30, "B to recover A>B#4")
    wait_until(lambda: cap.keys()["UNICAST2.XMIT_REQ"], 10, "a UNICAST2 XMIT_REQ on the wire")


def _split_and_merge(c: CaptureCluster, step: Step, ip: dict[str, str]) -> None:
    """C split from A and B until both sides have views of their own, then the heal and MERGE2's merge view."""
    step("split C from A and B, until both sides have their own views")
    rules = [("C", ip["A"]), ("C", ip["B"]), ("A", ip["C"]), ("B", ip["C"])]
    for member, src in rules:
        c.ns_run(member, "iptables", "-I", "INPUT", "-s", src, "-p", "udp", "-j", "DROP")
    try:
        c.wait_view(["A", "B"], timeout=30)
        c.wait_view(["C"], timeout=30)
    finally:
        for member, src in rules:
            c.ns_run(member, "iptables", "-D", "INPUT", "-s", src, "-p", "udp", "-j", "DROP")
    step("heal: MERGE2 merges the two views")
    view = c.wait_view(timeout=60)
    assert view["merge"], f"the view after the heal is not a merge view: {view}"


def write_fixtures(
    out: Path,
    c: CaptureCluster,
    cap: Capture,
    steps: list[dict[str, Any]],
    stack: Path,
    stack_text: str = 'unicast2-fast with <UNICAST2 stable_interval="1000"/>',
) -> None:
    by_ip = {m.ip: n for n, m in c.members.items()}
    captured = cap.datagrams
    decoded = decode_with_jar([d["payload"] for d in captured])
    seen: collections.Counter[tuple[str, str]] = collections.Counter()
    kinds_all: collections.Counter[str] = collections.Counter()
    kinds_kept: collections.Counter[str] = collections.Counter()
    uuids: dict[str, list[int]] = {}
    lines = []
    for n, (d, jar) in enumerate(zip(captured, decoded, strict=True)):
        ours = wire.decode(d["payload"])
        kind = wire.describe(ours)
        src = by_ip.get(d["src_ip"], d["src_ip"])
        kinds_all[kind] += 1
        sender_uuid = jar.get("src") or (jar["messages"][0]["src"] if jar.get("messages") else None)
        if sender_uuid and "uuid" in sender_uuid:
            uuids.setdefault(src, sender_uuid["uuid"])
        keys = {h.key for m in ours.messages for h in m.headers}
        periodic = next((k for k in THINNED if k in keys), None)
        if periodic is not None and len(ours.messages) == 1:
            seen[(src, periodic)] += 1
            if seen[(src, periodic)] > KEEP_PER_SENDER:
                continue
        kinds_kept[kind] += 1
        dst = "*" if d["dst_ip"].startswith(("224.", "239.")) else by_ip.get(d["dst_ip"], d["dst_ip"])
        lines.append(
            {
                "n": n,
                "t": d["t"],
                "src": src,
                "dst": dst,
                "src_port": d["src_port"],
                "dst_port": d["dst_port"],
                "kind": kind,
                "hex": d["payload"].hex(),
                "jgroups": jar,
            }
        )
    if out.exists():
        for old in (out / "datagrams.jsonl", out / "capture.json", out / "stack.xml", out / "README.md"):
            old.unlink(missing_ok=True)
        shutil.rmtree(out / "history", ignore_errors=True)
    (out / "history").mkdir(parents=True)
    with open(out / "datagrams.jsonl", "w") as f:
        for line in lines:
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
    for name, m in c.members.items():
        assert m.history is not None
        shutil.copy(m.history, out / "history" / f"{name}.jsonl")
    meta = {
        "cluster": c.cluster,
        "jgroups": "2.12.2.Final (Debian libjgroups-java)",
        "stack": f"stack.xml: {stack_text}",
        "mcast_group": c.mcast_group,
        "mcast_port": c.mcast_port,
        "members": {n: {"ip": m.ip, "port": m.port, "uuid": uuids.get(n)} for n, m in c.members.items()},
        "captured": len(captured),
        "kept": len(lines),
        "ip_fragments_skipped": cap.fragments,
        "thinned": {"kinds": list(THINNED), "kept_per_sender": KEEP_PER_SENDER},
        "kinds_captured": dict(sorted(kinds_all.items())),
        "kinds_kept": dict(sorted(kinds_kept.items())),
        "steps": steps,
    }
    (out / "capture.json").write_text(json.dumps(meta, indent=1) + "\n")
    shutil.copy(stack, out / "stack.xml")
    (out / "README.md").write_text(readme(meta))
    print(f"capture: {len(captured)} datagrams captured, {len(lines)} kept in {out}")
    for kind, count in sorted(kinds_all.items()):
        print(f"  {count:4d} {kind}")


def readme(meta: dict[str, Any]) -> str:
    """The fixture folder's README: what the run did and what its datagrams are."""
    rows = "\n".join(
        f"| {meta['kinds_captured'][k]} | {meta['kinds_kept'].get(k, 0)} | `{k}` |" for k in meta["kinds_captured"]
    )
    steps = "\n".join(f"{i + 1}. {s['step']}" for i, s in enumerate(meta["steps"]))
    return f"""# Golden JGroups 2.12.2 datagrams

Captured, not typed: written by `python -m foreign.jgroups.capture --out tests/fixtures/jgroups212` (root), which
runs real members of Debian's JGroups 2.12.2 jar (foreign/jgroups/) in network namespaces on a bridge and records
every UDP datagram as it enters the bridge: the UNICAST2 run in tests/fixtures/jgroups212/, the UNICAST run in its
unicast/ (`--only unicast`). Its docstring describes the runs; regenerate them with it (the tests read whatever the
capture wrote, so a new capture needs no test change).

- `datagrams.jsonl`: one datagram per line: `n` (capture order), `t` (CLOCK_MONOTONIC ns, the histories' clock),
  `src`/`dst` (member names; `*` for multicast), ports, `kind` (chaos.profiles.jgroups212.describe), `hex` (the UDP
  payload) and `jgroups`: the datagram as the jar's own reader (chaosbed.jgroups.Decode) reads it: form, addresses,
  messages with their byte offsets, headers with their fields. That is the known meaning the decoder is tested
  against.
- `capture.json`: cluster `{meta["cluster"]}`, multicast group and port, the members' IPs, ports and UUIDs, the
  steps with their instants, counts per kind.
- `history/*.jsonl`: the members' histories of the run (send/deliver seqnos to check the wire against).
- `stack.xml`: the stack the members ran ({meta["stack"].split(": ", 1)[1]}).

The run ({meta["captured"]} datagrams, {meta["kept"]} kept; FD_ALL heartbeats, MERGE2 probes and UNICAST2 STABLE are
thinned to the first {meta["thinned"]["kept_per_sender"]} per sender):

{steps}

| captured | kept | kind (form, multicast/OOB, headers of each message in wire order) |
|---:|---:|---|
{rows}
"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Capture golden JGroups 2.12.2 datagrams (root).")
    ap.add_argument("--out", type=Path, default=Path("tests/fixtures/jgroups212"))
    ap.add_argument("--only", choices=("unicast2", "unicast"), help="one of the two runs (default: both)")
    args = ap.parse_args(argv)
    import tempfile

    try:
        if args.only in (None, "unicast2"):
            with tempfile.TemporaryDirectory(prefix="chaosbed-jgroups-capture-") as tmp:
                run(args.out, Path(tmp))
        if args.only in (None, "unicast"):
            with tempfile.TemporaryDirectory(prefix="chaosbed-jgroups-capture-") as tmp:
                run_unicast(args.out / "unicast", Path(tmp))
    except LaunchError as e:
        raise SystemExit(f"capture: {e}") from None


if __name__ == "__main__":
    main()

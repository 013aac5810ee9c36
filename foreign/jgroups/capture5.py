"""Golden JGroups 5 datagrams: captures what three real members of the project's JGroups 5 member program put on the
wire, and writes it as fixtures (tests/fixtures/jgroups5/udp/ and nakack4/) with its known meaning, as the jar itself
reads it.

Root only (network namespaces). Three members A, B, C of the system `jgroups-5` (the newest release, started through
the Cluster API on the netns backend, one by one) run a stack file written next to the fixtures: the udp-fast stack
(UNICAST3 + NAKACK2, udp.xml's protocols) or nakack4-fast (NAKACK4 + UNICAST4, udp-new.xml's), with the unicast
protocol's idle connections closed after 2 s (conn_expiry_timeout and conn_close_timeout), so that a CLOSE and the
new connection after it show up in seconds; FRAG2's frag_size is 4K and MFC's and UFC's max_credits 100K, so that
fragments and credit replenishments show up in small datagrams (the member sends at most 60,000 bytes, udp.xml's
frag_size is 60K). A raw AF_PACKET socket in the switch namespace sees every frame as it enters the bridge from a
member's veth (foreign/jgroups/wire_capture.py's Capture; IP fragments put together), so each datagram is captured once,
at its sender. The run, every step waiting on a condition (a history line, a view, a
datagram on the wire) with a deadline:

 1. C, then B, leave (LEAVE_REQ/LEAVE_RSP, VIEWs), and join again as B/2 and C/2 (discovery, JOIN_REQ/JOIN_RSP,
    VIEW, VIEW_ACK): two leaves and two joins;
 2. unicasts: B/2 -> C/2 (the first message of a connection), A -> B/2, a burst of 10 C/2 -> B/2 (a LIST);
 3. multicasts: a burst of 10 from A (a LIST), 3 paced from C/2; then one unicast and one multicast of 10,000 bytes
    (FRAG2 fragments, and IP fragments of each);
 4. udp only: STABLE gossip and STABILITY on the wire; NAKACK4 ACKs come with every multicast;
 5. a multicast XMIT_REQ: C/2 does not hear A (a one-way partition) while A multicasts one message, then A
    multicasts another, C/2 sees the gap and asks;
 6. a unicast XMIT_REQ: the same for A's unicasts to B;
 7. a CLOSE: A's idle connection to B is closed and removed; then SEND_FIRST_SEQNO: B does not hear A while A sends
    it two unicasts on the new connection, A resends its highest (not the first), B asks for the first;
 8. a split of C/2 from A and B until both sides install views of their own, then the heal and MERGE3's merge
    (INFO, MERGE_REQ/RSP, INSTALL_MERGE_VIEW, digests);
 9. udp only: 10 multicasts and 10 unicasts of 10,000 bytes from B (MFC and UFC REPLENISH);
10. C/2 killed (FD_SOCK2 SUSPECT, VERIFY_SUSPECT2, the VIEW without it), then the others stopped.

Then the jar's own reader (chaosbed.jgroups5.Decode) decodes every datagram, and chaos/profiles/jgroups5.py too;
a datagram the profile cannot read stops the capture (the fixtures would not be golden). The folder gets:
- datagrams.jsonl: one line per datagram kept: n (capture order), t (CLOCK_MONOTONIC ns), src and dst (member names,
  "*" for multicast), ports, kind (jgroups5.describe), hex (the UDP payload) and jgroups (the jar's decoding).
  Periodic traffic (FD_ALL3 heartbeats, MERGE3 INFO, discovery requests, STABLE rounds, HIGHEST_SEQNO) and the
  datagrams of the 10,000-byte messages are thinned to the first few per sender and kind; everything else is kept;
- capture.json: cluster, release, members (ip, port), each address's UUID (C and C/2 differ), what was captured and
  kept per kind, the steps;
- history/*.jsonl: the members' histories; stack.xml: the stack file the members ran.

    python -m foreign.jgroups.capture5 --out tests/fixtures/jgroups5 [--only udp|nakack4]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos.profiles import jgroups5 as wire
from foreign.jgroups import HERE, JVM_OPTIONS, jgroups5
from foreign.jgroups.maven import jar_path
from foreign.jgroups.releases import NEWEST, Release
from foreign.jgroups.wire_capture import Capture
from orchestration.backends.netns import NetnsCluster
from orchestration.cluster import ClusterError

NAMES = ["A", "B", "C"]
STACKS = {"udp": ("udp-fast", "UNICAST3"), "nakack4": ("nakack4-fast", "UNICAST4")}
CONN_TIMEOUT = "2000"  # ms: conn_expiry_timeout and conn_close_timeout of the unicast protocol
THINNED = ("FD_ALL3", "MERGE3.INFO", "PING.GET_MBRS_REQ", "STABLE.GOSSIP", "STABLE.STABILITY",
           "NAKACK2.HIGHEST_SEQNO", "NAKACK4.HIGHEST_SEQNO")  # fmt: skip
KEEP_PER_SENDER = 3
DECODER = "chaosbed.jgroups5.Decode"
BIG = 10_000  # bytes of a big message: FRAG2 cuts it at FRAG_SIZE (udp.xml's 60K: the member sends at most 60,000)
FRAG_SIZE = "4K"
CREDITS = "100K"  # MFC's and UFC's max_credits: replenished after 60 KB (min_threshold 0.4), not 2.4 MB
Step = Callable[[str], None]


def stack_file(kind: str, out: Path) -> Path:
    """The capture's stack: the member's stack with the unicast protocol's idle connections closed after 2 s, FRAG2
    fragmenting messages above 4 KB and MFC/UFC credits of 100 KB (the shapes in a few small datagrams)."""
    name, unicast = STACKS[kind]
    text = (HERE / "stacks5" / f"{name}.xml").read_text()
    text, n = re.subn(
        rf"<{unicast}\b", f'<{unicast} conn_expiry_timeout="{CONN_TIMEOUT}" conn_close_timeout="{CONN_TIMEOUT}"', text
    )
    assert n == 1, f"no <{unicast}> in {name}.xml"
    for attr, value in (("FRAG2 frag_size", FRAG_SIZE), ("MFC max_credits", CREDITS), ("UFC max_credits", CREDITS)):
        proto, key = attr.split()
        text, n = re.subn(rf'<{proto} {key}="[^"]*"', f'<{proto} {key}="{value}"', text)
        assert n == 1 or proto != "FRAG2", f"no <{attr}=...> in {name}.xml"
    path = out / "stack.xml"
    path.write_text(text)
    return path


def decode_with_jar(payloads: list[bytes]) -> list[dict[str, Any]]:
    """The jar's own decoding of each datagram (chaosbed.jgroups5.Decode with the newest release's jar), in order."""
    classpath = f"{jar_path(Release.parse(NEWEST))}:{jgroups5.CLASSES}"
    proc = subprocess.run(
        ["java", *JVM_OPTIONS, "-cp", classpath, DECODER],
        input="".join(p.hex() + "\n" for p in payloads),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the decoder failed: {proc.stderr[-2000:]}")
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    if len(out) != len(payloads):
        raise RuntimeError(f"the decoder answered {len(out)} lines for {len(payloads)} datagrams")
    return out


class Run:
    """One capture run: the cluster, the capture at its switch, the steps taken."""

    def __init__(self, kind: str, workdir: Path, stack: Path) -> None:
        from orchestration.systems import SYSTEMS
        from orchestration.systems.clusters import new_cluster, spec_of
        from orchestration.systems.jgroups5 import with_stack

        self.kind = kind
        system = with_stack(SYSTEMS["jgroups-5"], str(stack))
        cluster = new_cluster(spec_of(system, NAMES, "netns"), workdir=workdir)
        assert isinstance(cluster, NetnsCluster)
        self.cluster = cluster
        self.steps: list[dict[str, Any]] = []
        self.cap: Capture | None = None
        self.unicast = STACKS[kind][1]
        self.multicast = "NAKACK2" if kind == "udp" else "NAKACK4"

    def step(self, what: str) -> None:
        self.steps.append({"t": time.monotonic_ns(), "step": what})
        print(f"capture: {what}", flush=True)

    def wait(self, condition: Callable[[], Any], timeout: float, what: str) -> None:
        self.cluster.wait_until(lambda: bool(condition()), timeout, what)

    def delivered(self, name: str, msg_ids: set[str]) -> bool:
        path = Path(self.cluster.workdir) / "history" / f"{name}.jsonl"
        got = set()
        for line in path.read_text().splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("event") == "deliver":
                got.add(e.get("msg_id"))
        return msg_ids <= got

    def keys(self, src: str | None = None, dst: str | None = None, since: int = 0) -> collections.Counter[str]:
        """How many of each header key (UNICAST3.CLOSE, ...) the datagrams captured so far carry (from the
        `since`-th on; only those from member src to member dst when given)."""
        assert self.cap is not None
        ips = {n: m.ip for n, m in self.cluster.members.items()}
        with self.cap.lock:
            found = self.cap.datagrams[since:]
        counts: collections.Counter[str] = collections.Counter()
        for d in found:
            if (src is None or d["src_ip"] == ips[src]) and (dst is None or d["dst_ip"] == ips[dst]):
                for m in wire.decode(d["payload"]).messages:
                    counts.update(h.key for h in m.headers)
        return counts

    def captured(self) -> int:
        assert self.cap is not None
        with self.cap.lock:
            return len(self.cap.datagrams)

    def on_wire(self, key: str) -> bool:
        return self.keys()[key] > 0

    def carries(self, needle: bytes) -> bool:
        return self.cap is not None and self.cap.carries(needle)

    def partition(self, src: list[str], dst: list[str], one_way: bool = True) -> str:
        return self.cluster.chaos.add("partition", {"from": src, "to": dst, "one_way": one_way}).id

    def views(self) -> dict[str, list[str]]:
        return {n: sorted(m.split("/")[0] for m in v["members"]) for n, v in self.cluster.views().items() if v}


def _traffic(r: Run) -> None:
    c = r.cluster
    r.step("unicasts B/2 -> C/2 (a connection's first message), A -> B/2, a burst of 10 C/2 -> B/2")
    c.control("B", "send", to="C", count=3, size=100, rate=20)
    c.control("A", "send", to="B", count=3, size=100, rate=20)
    c.control("C", "send", to="B", count=10, size=100)
    r.wait(lambda: r.delivered("C", {f"B/2>C#{i}" for i in (1, 2, 3)}), 20, "C to deliver B's unicasts")
    r.wait(lambda: r.delivered("B", {f"A>B#{i}" for i in (1, 2, 3)}), 20, "B to deliver A's unicasts")
    r.wait(lambda: r.delivered("B", {f"C/2>B#{i}" for i in range(1, 11)}), 20, "B to deliver C's burst")
    r.step("multicasts: a burst of 10 from A, 3 paced from C/2; one unicast and one multicast of 10,000 bytes from B/2")
    c.control("A", "multicast", count=10, size=100)
    c.control("C", "multicast", count=3, size=100, rate=20)
    c.control("B", "send", to="A", count=1, size=BIG)
    c.control("B", "multicast", count=1, size=BIG)
    want = {f"A>*#{i}" for i in range(1, 11)} | {"C/2>*#1", "C/2>*#2", "C/2>*#3", "B/2>*#1"}
    r.wait(lambda: all(r.delivered(name, want) for name in NAMES), 20, "every member to deliver the multicasts")
    r.wait(lambda: r.delivered("A", {"B/2>A#1"}), 20, "A to deliver B's big unicast")
    if r.kind == "udp":
        r.step("STABLE gossip and STABILITY on the wire")
        r.wait(lambda: r.on_wire("STABLE.GOSSIP") and r.on_wire("STABLE.STABILITY"), 30, "STABLE rounds")
    else:
        r.wait(lambda: r.on_wire("NAKACK4.ACK"), 10, "NAKACK4 ACKs")


def _retransmissions(r: Run) -> None:
    c = r.cluster
    r.step("a multicast XMIT_REQ: C/2 does not hear A while A multicasts one message")
    fid = r.partition(["A"], ["C"])
    c.control("A", "multicast", count=1, size=100)
    r.wait(lambda: r.delivered("B", {"A>*#11"}), 20, "B to deliver A>*#11")
    c.chaos.remove([fid])
    c.control("A", "multicast", count=1, size=100)
    r.wait(lambda: r.delivered("C", {"A>*#11", "A>*#12"}), 30, "C/2 to recover A>*#11")
    r.wait(lambda: r.on_wire(f"{r.multicast}.XMIT_REQ"), 10, "a multicast XMIT_REQ on the wire")
    r.step("a unicast XMIT_REQ: B does not hear A while A sends it one unicast")
    fid = r.partition(["A"], ["B"])
    c.control("A", "send", to="B", count=1, size=100)
    r.wait(lambda: r.carries(b"A>B#4\0"), 10, "A>B#4 on the wire (B does not hear it)")
    c.chaos.remove([fid])
    c.control("A", "send", to="B", count=1, size=100)
    r.wait(lambda: r.delivered("B", {"A>B#4", "A>B#5"}), 30, "B to recover A>B#4")
    r.wait(lambda: r.on_wire(f"{r.unicast}.XMIT_REQ"), 10, "a unicast XMIT_REQ on the wire")
    r.step("A's idle connection to B closed (CLOSE), then SEND_FIRST_SEQNO: B does not hear the new one's first two")
    since = r.captured()
    r.wait(lambda: r.keys("A", "B", since)[f"{r.unicast}.CLOSE"], 30, "A's CLOSE to B on the wire")
    fid = r.partition(["A"], ["B"])
    c.control("A", "send", to="B", count=2, size=100)
    r.wait(lambda: r.carries(b"A>B#7\0"), 10, "A>B#7 on the wire (B does not hear it)")
    c.chaos.remove([fid])
    r.wait(lambda: r.delivered("B", {"A>B#6", "A>B#7"}), 30, "B to deliver A>B#6 and A>B#7")
    r.wait(lambda: r.on_wire(f"{r.unicast}.SEND_FIRST_SEQNO"), 10, "a SEND_FIRST_SEQNO on the wire")


def _split_and_merge(r: Run) -> None:
    r.step("split C/2 from A and B, until both sides install views of their own")
    fid = r.partition(["A", "B"], ["C"], one_way=False)
    r.wait(lambda: r.views() == {"A": ["A", "B"], "B": ["A", "B"], "C": ["C"]}, 40, "views {A, B} and {C}")
    r.step("heal: MERGE3 merges the two views")
    r.cluster.chaos.remove([fid])
    view = r.cluster.wait_for_view(timeout=60)
    assert view["merge"], f"the view after the heal is not a merge view: {view}"


def _end(r: Run) -> None:
    c = r.cluster
    if r.kind == "udp":
        r.step("10 multicasts and 10 unicasts of 10,000 bytes from B: MFC and UFC credits replenished")
        c.control("B", "multicast", count=10, size=BIG, rate=50)
        c.control("B", "send", to="C", count=10, size=BIG, rate=50)
        r.wait(lambda: r.on_wire("MFC.REPLENISH") and r.on_wire("UFC.REPLENISH"), 60, "MFC and UFC REPLENISH")
    r.step("C/2 killed: FD_SOCK2 SUSPECT, VERIFY_SUSPECT2, the view without it")
    c.kill("C")
    c.wait_for_view(["A", "B"], timeout=30)
    r.wait(lambda: r.on_wire("FD_SOCK2.SUSPECT"), 10, "an FD_SOCK2 SUSPECT on the wire")
    r.step("A and B stopped")
    c.stop_members()


def run(kind: str, out: Path, workdir: Path) -> None:
    """One capture into out (see the module's docstring)."""
    out.mkdir(parents=True, exist_ok=True)
    stack = stack_file(kind, out)
    r = Run(kind, workdir, stack)
    c = r.cluster
    try:
        c.start(timeout=60)
        c.wait_for_view(timeout=30)
        r.cap = Capture(c.switch_ns, reassemble=True)
        r.step("C and B leave, then join again as B/2 and C/2")
        c.leave("C")
        c.wait_for_view(["A", "B"], timeout=30)
        c.leave("B")
        c.wait_for_view(["A"], timeout=30)
        for name, members in (("B", ["A", "B"]), ("C", NAMES)):
            c.restart(name, timeout=60)
            c.wait_for_view(members, timeout=30)
        _traffic(r)
        _retransmissions(r)
        _split_and_merge(r)
        _end(r)
    finally:
        if r.cap is not None:
            r.cap.stop()
        c.down()
    assert r.cap is not None
    write_fixtures(out, r, stack)


def _kept(ours: wire.Datagram, src: str, seen: collections.Counter[tuple[str, str]]) -> bool:
    """Whether a datagram goes into the fixture: all but those of the periodic kinds and of fragments beyond the
    first few of each shape per sender."""
    keys = {h.key for m in ours.messages for h in m.headers} | {h.protocol for m in ours.messages for h in m.headers}
    if "FRAG2" in keys:
        thinned = wire.describe(ours)
    elif len(ours.messages) == 1:
        thinned = next((k for k in THINNED if k in keys), "")
    else:
        thinned = ""
    if not thinned:
        return True
    seen[(src, thinned)] += 1
    return seen[(src, thinned)] <= KEEP_PER_SENDER


def write_fixtures(out: Path, r: Run, stack: Path) -> None:
    c, cap = r.cluster, r.cap
    assert cap is not None
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
        if not ours.skippable or "error" in jar:
            raise RuntimeError(f"datagram {n} is not readable: ours {ours.error!r}, the jar's {jar.get('error')!r}")
        kind = wire.describe(ours)
        src = by_ip.get(d["src_ip"], d["src_ip"])
        kinds_all[kind] += 1
        for jm in jar["messages"]:  # an application message names its sender's address: "C/2>B#1"
            if jm["msg_id"] and jm["src"] and "uuid" in jm["src"]:
                uuids.setdefault(jm["msg_id"].split(">", 1)[0], jm["src"]["uuid"])
        if not _kept(ours, src, seen):
            continue
        kinds_kept[kind] += 1
        dst = "*" if d["dst_ip"].startswith(("224.", "239.")) else by_ip.get(d["dst_ip"], d["dst_ip"])
        lines.append({"n": n, "t": d["t"], "src": src, "dst": dst, "src_port": d["src_port"],
                      "dst_port": d["dst_port"], "kind": kind, "hex": d["payload"].hex(), "jgroups": jar})  # fmt: skip
    for old in (out / "datagrams.jsonl", out / "capture.json", out / "README.md"):
        old.unlink(missing_ok=True)
    shutil.rmtree(out / "history", ignore_errors=True)
    shutil.copytree(Path(c.workdir) / "history", out / "history")
    with open(out / "datagrams.jsonl", "w") as f:
        for line in lines:
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
    meta = {
        "cluster": c.label,
        "jgroups": f"{NEWEST}.Final (Maven Central), the system jgroups-5",
        "stack": f"stack.xml: {STACKS[r.kind][0]} with {r.unicast} conn_expiry_timeout and conn_close_timeout "
        f"{CONN_TIMEOUT} ms, FRAG2 frag_size {FRAG_SIZE}, MFC and UFC max_credits {CREDITS}",
        "members": {n: {"ip": m.ip, "port": m.port} for n, m in c.members.items()},
        "uuids": dict(sorted(uuids.items())),  # per address (B, C/2), from its application messages
        "captured": len(captured),
        "decoded": len(captured),
        "kept": len(lines),
        "ip_fragments_put_together": cap.fragments,
        "thinned": {"kinds": list(THINNED), "kept_per_sender": KEEP_PER_SENDER},
        "kinds_captured": dict(sorted(kinds_all.items())),
        "kinds_kept": dict(sorted(kinds_kept.items())),
        "steps": r.steps,
    }
    (out / "capture.json").write_text(json.dumps(meta, indent=1) + "\n")
    (out / "README.md").write_text(readme(meta, r.kind))
    print(f"capture: {len(captured)} datagrams captured and decoded, {len(lines)} kept in {out}")
    for kind, count in sorted(kinds_all.items()):
        print(f"  {count:4d} {kind}")


def readme(meta: dict[str, Any], kind: str) -> str:
    """The fixture folder's README: what the run did and what its datagrams are."""
    rows = "\n".join(
        f"| {meta['kinds_captured'][k]} | {meta['kinds_kept'].get(k, 0)} | `{k}` |" for k in meta["kinds_captured"]
    )
    steps = "\n".join(f"{i + 1}. {s['step']}" for i, s in enumerate(meta["steps"]))
    return f"""# Golden JGroups 5 datagrams: the {kind} stack

Captured, not typed: written by `python -m foreign.jgroups.capture5 --out tests/fixtures/jgroups5 --only {kind}`
(root), which runs three real members of the project's JGroups 5 member ({meta["jgroups"]}) through the Cluster API
in network namespaces on a bridge and records every UDP datagram as it enters the bridge. Its docstring describes the
run; regenerate it with it (the tests read whatever the capture wrote, so a new capture needs no test change).

- `datagrams.jsonl`: one datagram per line: `n` (capture order), `t` (CLOCK_MONOTONIC ns, the histories' clock),
  `src`/`dst` (member names; `*` for multicast), ports, `kind` (chaos.profiles.jgroups5.describe), `hex` (the UDP
  payload) and `jgroups`: the datagram as the jar's own readers (chaosbed.jgroups5.Decode) read it: form, a list's
  count, addresses, messages with their byte offsets and payloads, headers with their offsets and fields. That is
  the known meaning the decoder is tested against.
- `capture.json`: the cluster's label, the release, the members' IPs and ports, each address's UUID, the steps
  with their instants, counts per kind (every captured datagram was decoded by the jar and by the profile, none
  left over).
- `history/*.jsonl`: the members' histories of the run; `stack.xml`: the stack they ran
  ({meta["stack"].split(": ")[1]}).

The run ({meta["captured"]} datagrams, {meta["kept"]} kept; the periodic kinds and the 10,000-byte messages'
datagrams are thinned to the first {meta["thinned"]["kept_per_sender"]} per sender):

{steps}

| captured | kept | kind (form, multicast, headers of each message in wire order) |
|---:|---:|---|
{rows}
"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Capture golden JGroups 5 datagrams (root).")
    ap.add_argument("--out", type=Path, default=Path("tests/fixtures/jgroups5"))
    ap.add_argument("--only", choices=tuple(STACKS), help="one of the runs (default: both)")
    args = ap.parse_args(argv)
    if why := capture_problem():
        raise SystemExit(f"capture5: {why}")
    try:
        for kind in [args.only] if args.only else list(STACKS):
            with tempfile.TemporaryDirectory(prefix="chaosbed-jgroups5-capture-") as tmp:
                run(kind, args.out / kind, Path(tmp))
    except (ClusterError, RuntimeError) as e:
        raise SystemExit(f"capture5: {e}") from None


def capture_problem() -> str | None:
    """What this machine lacks to capture (None: nothing)."""
    from orchestration.backends.netns import check_netns_available

    try:
        check_netns_available()
    except ClusterError as e:
        return str(e)
    return jgroups5.missing(Release.parse(NEWEST))


if __name__ == "__main__":
    main()

"""JGroups 2.12 next to chaosbed at 1000 B, side by side in one run (root): issue #14's throughput anchor, measured
instead of quoted.

The JGroups side is Debian's libjgroups-java (2.12.2, /usr/share/java/jgroups.jar) with its own udp.xml, driven by
bench/jgroups/Throughput.java (compiled here with javac): one JVM per member, in the namespaces of a netns cluster
(whose own members are chaosbed's unicast side). Each JGroups figure is paired with chaosbed's, round for round:
- UNICAST and UNICAST2 (udp.xml with its UNICAST, or UNICAST2 in its place): A sends N SIZE-byte messages to B; the
  rate is N / (B's first to its N-th message); paired with chaosbed's UNICAST3 A -> B (bench_network.unicast3);
- NAKACK: A multicasts N messages to A, B, C; per receiver, the slower of B and C; paired with chaosbed's NAKACK2 on
  a second cluster (bench_network.nakack2).
After one warm-up round of each side, --repeats rounds of each are alternated (JGroups first, then chaosbed first), so
that a busy spell on this shared machine falls on both sides of a pair: the ratios #14 asks for (UNICAST3 >= 1.5x
UNICAST2, NAKACK2 >= 1.2x NAKACK) are the medians of the per-pair ratios. (Until 11-26 all JGroups rounds ran before
all of chaosbed's, and one run's ratio swung from 0.71x to 1.66x with the machine's load.)
Run: python -m bench.bench_jgroups [--messages 200000] [--repeats 5] [--size 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import queue
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import bench.bench_network as network
from bench.common import report
from orchestration.backends.netns import NetnsCluster, check_netns_available
from orchestration.cluster import ClusterSpec

JGROUPS_JAR = Path("/usr/share/java/jgroups.jar")
SOURCE = Path(__file__).resolve().parent / "jgroups" / "Throughput.java"
MCAST_PORT = 45688  # not a port chaosbed's members use
LINE_TIMEOUT = 120.0


def missing() -> str | None:
    """What this machine lacks to run the JGroups side, and how to get it (None: nothing)."""
    if not JGROUPS_JAR.exists():
        return f"{JGROUPS_JAR} is missing: apt-get install libjgroups-java"
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH: install a JDK 17 (apt-get install openjdk-17-jdk-headless)"
    return None


def configs(folder: Path) -> dict[str, Path]:
    """udp.xml as the jar ships it (UNICAST) and with UNICAST2 in UNICAST's place."""
    with zipfile.ZipFile(JGROUPS_JAR) as jar:
        udp = jar.read("udp.xml").decode()
    line = '<UNICAST timeout="300,600,1200"/>'
    if line not in udp:
        raise RuntimeError(f"{JGROUPS_JAR}: udp.xml has no {line}; this bench knows JGroups 2.12's")
    out = {"UNICAST": folder / "unicast.xml", "UNICAST2": folder / "unicast2.xml"}
    out["UNICAST"].write_text(udp)
    out["UNICAST2"].write_text(udp.replace(line, "<UNICAST2/>"))
    return out


class Member:
    """One JVM running Throughput in a member's namespace."""

    def __init__(self, cluster: NetnsCluster, name: str, classes: Path, config: Path, args: list[str]) -> None:
        m = cluster.members[name]
        self.name = name
        command = ["ip", "netns", "exec", cluster.member_ns(name), "java", "-Xmx512m",
                   "-Djava.net.preferIPv4Stack=true", f"-Djgroups.bind_addr={m.ip}",
                   f"-Djgroups.udp.mcast_addr={cluster._group}", f"-Djgroups.udp.mcast_port={MCAST_PORT}",
                   "-cp", f"{JGROUPS_JAR}:{classes}", "Throughput", str(config), *args]  # fmt: skip
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1
        )
        self.lines: queue.Queue[str] = queue.Queue()  # stdout, read by a thread: waiting on it has a deadline
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")  # the JVM exited

    def expect(self, prefix: str, timeout: float = LINE_TIMEOUT) -> str:
        """The next stdout line that starts with `prefix` (raises on an error line, an exit or the timeout)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if not line:
                raise RuntimeError(f"JGroups member {self.name} exited (code {self.proc.poll()})")
            if line.startswith("error"):
                raise RuntimeError(f"JGroups member {self.name}: {line.strip()}")
            if line.startswith(prefix):
                return line.strip()
        raise RuntimeError(f"JGroups member {self.name}: no '{prefix}' within {timeout:.0f} s")

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.say("leave")
                self.proc.wait(15)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)


class JGroupsGroup:
    """JGroups members in a netns cluster's namespaces, kept up between rounds: names[0] sends, the others count."""

    def __init__(
        self, cluster: NetnsCluster, classes: Path, config: Path, names: list[str], mode: str, n: int, size: int
    ) -> None:
        self.members: list[Member] = []
        try:
            self.sender = self._start(
                cluster, names[0], classes, config, [str(len(names)), "send", mode, str(n), str(size)]
            )
            self.receivers = [
                self._start(cluster, name, classes, config, [str(len(names)), "recv", mode, str(n), str(size)])
                for name in names[1:]
            ]
            for m in self.members:
                m.expect("ready")
        except BaseException:
            self.close()
            raise

    def _start(self, cluster: NetnsCluster, name: str, classes: Path, config: Path, args: list[str]) -> Member:
        m = Member(cluster, name, classes, config, args)
        self.members.append(m)
        m.expect("connected")  # one at a time: the sender is the coordinator, the unicast destination the second
        return m

    def round(self) -> float:
        """The sender sends N messages; the msgs/s of the slowest receiver."""
        self.sender.say("go")
        return min(float(r.expect("rate").split()[1]) for r in self.receivers)

    def close(self) -> None:
        for m in self.members:
            m.stop()


def paired_rounds(
    theirs: Callable[[], float], ours: Callable[[], float], repeats: int
) -> tuple[list[float], list[float]]:
    """`repeats` rounds of each, alternated (JGroups first in even rounds, chaosbed first in odd ones), after one
    warm-up round of each: a busy spell on this shared machine then lands on both sides of a pair rather than on one
    side of the whole comparison. Returns (theirs, ours), round by round."""
    theirs()
    ours()
    a: list[float] = []
    b: list[float] = []
    for i in range(repeats):
        if i % 2 == 0:
            a.append(theirs())
            b.append(ours())
        else:
            b.append(ours())
            a.append(theirs())
    return a, b


def compare(label: str, theirs: list[float], ours: list[float], target: float | None) -> None:
    """ours / theirs, pair by pair: the median of the per-pair ratios, and their range."""
    ratios = [o / t for o, t in zip(ours, theirs, strict=True)]
    goal = f"; target >= {target}" if target is not None else ""
    note = f"(median of {len(ratios)} pairs; {min(ratios):.2f}-{max(ratios):.2f}{goal})"
    report(f"  ratio {label}", statistics.median(ratios), "x", note)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--size", type=int, default=1000)
    args = ap.parse_args(argv)
    check_netns_available()
    problem = missing()
    if problem:
        raise SystemExit(f"bench_jgroups: {problem}")
    network.SIZE = args.size
    n, size, repeats = args.messages, args.size, args.repeats
    rounds: dict[str, tuple[list[float], list[float]]] = {}  # JGroups protocol -> (its rates, chaosbed's)
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="chaosbed-jgroups-")))
        subprocess.run(["javac", "-d", str(folder), "-cp", str(JGROUPS_JAR), str(SOURCE)], check=True)
        cfg = configs(folder)
        # the JVMs run in the namespaces of `host`, whose own members (UNICAST3 only, idle while JGroups runs) are
        # chaosbed's unicast side; chaosbed's multicast side is a second cluster, with membership
        host = stack.enter_context(NetnsCluster(ClusterSpec(["A", "B", "C"], stack="unicast3", backend="netns")))
        host.start()
        spec = ClusterSpec(
            ["A", "B", "C"], stack="unicast3+nakack2", properties=network.FAST_MEMBERSHIP, backend="netns"
        )
        group = stack.enter_context(NetnsCluster(spec))
        group.start()
        network.wait_one_view(group, 3)

        def unicast3() -> float:
            return network.unicast3(host, n)[0]

        def nakack2() -> float:
            return network.nakack2(group, n)[0]

        for proto, config, names, mode, ours in (
            ("UNICAST", "UNICAST", ["A", "B"], "unicast", unicast3),
            ("UNICAST2", "UNICAST2", ["A", "B"], "unicast", unicast3),
            ("NAKACK", "UNICAST", ["A", "B", "C"], "multicast", nakack2),
        ):
            jgroups = JGroupsGroup(host, folder, cfg[config], names, mode, n, size)
            try:
                rounds[proto] = paired_rounds(jgroups.round, ours, repeats)
            finally:
                jgroups.close()
    for proto, what in (("UNICAST", "A -> B"), ("UNICAST2", "A -> B"), ("NAKACK", "3 members, per receiver")):
        rates = rounds[proto][0]
        report(f"JGroups 2.12 {proto}, {what}, {size} B", statistics.median(rates), "msgs/s", _spread(rates))
    for name, proto, what in (
        ("UNICAST3 over UDP", "UNICAST2", "A -> B"),
        ("NAKACK2", "NAKACK", "3 members, per receiver"),
    ):
        rates = rounds[proto][1]
        report(f"chaosbed {name}, {what}, {size} B", statistics.median(rates), "msgs/s", _spread(rates))
    compare("UNICAST3 / JGroups UNICAST2", *rounds["UNICAST2"], target=1.5)
    compare("UNICAST3 / JGroups UNICAST", *rounds["UNICAST"], target=None)
    compare("NAKACK2 / JGroups NAKACK", *rounds["NAKACK"], target=1.2)


def _spread(rates: list[float]) -> str:
    return f"(median of {len(rates)}; {min(rates):,.0f}-{max(rates):,.0f})"


if __name__ == "__main__":
    main()

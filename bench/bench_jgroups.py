"""JGroups 2.12 next to chaosbed at 1000 B, side by side in one run (root): issue #14's throughput anchor, measured
instead of quoted.

The JGroups side is Debian's libjgroups-java (2.12.2, /usr/share/java/jgroups.jar) with its own udp.xml, driven by
bench/jgroups/Throughput.java (compiled here with javac): one JVM per member, in the namespaces of a netns cluster
(whose own members stay idle). Figures, each the median of --repeats rounds after one warm-up round per JVM:
- UNICAST and UNICAST2 (udp.xml with its UNICAST, or UNICAST2 in its place): A sends N SIZE-byte messages to B; the
  rate is N / (B's first to its N-th message);
- NAKACK: A multicasts N messages to A, B, C; per receiver, the slower of B and C;
and then chaosbed on netns clusters of its own: UNICAST3 A -> B and NAKACK2 per receiver (bench_network.throughput),
with the ratios #14 asks for (UNICAST3 >= 1.5x UNICAST2, NAKACK2 >= 1.2x NAKACK).
Run: python -m bench.bench_jgroups [--messages 200000] [--repeats 3] [--size 1000]
"""

from __future__ import annotations

import argparse
import queue
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import zipfile
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


def jgroups_rounds(
    cluster: NetnsCluster, classes: Path, config: Path, names: list[str], mode: str, n: int, repeats: int, size: int
) -> list[float]:
    """Rates (msgs/s; per round, the slowest receiver) of `repeats` rounds after one warm-up round."""
    members: list[Member] = []
    try:
        sender = Member(cluster, names[0], classes, config, [str(len(names)), "send", mode, str(n), str(size)])
        members.append(sender)
        sender.expect("connected")  # the sender is the coordinator: the unicast destination is the second member
        receivers = []
        for name in names[1:]:
            receivers.append(Member(cluster, name, classes, config, [str(len(names)), "recv", mode, str(n), str(size)]))
            members.append(receivers[-1])
            receivers[-1].expect("connected")
        for m in members:
            m.expect("ready")
        rates = []
        for _ in range(repeats + 1):
            sender.say("go")
            rates.append(min(float(r.expect("rate").split()[1]) for r in receivers))
        return rates[1:]
    finally:
        for m in members:
            m.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--size", type=int, default=1000)
    args = ap.parse_args(argv)
    check_netns_available()
    problem = missing()
    if problem:
        raise SystemExit(f"bench_jgroups: {problem}")
    network.SIZE = args.size
    with tempfile.TemporaryDirectory(prefix="chaosbed-jgroups-") as tmp:
        folder = Path(tmp)
        subprocess.run(["javac", "-d", str(folder), "-cp", str(JGROUPS_JAR), str(SOURCE)], check=True)
        cfg = configs(folder)
        figures: dict[str, float] = {}
        spec = ClusterSpec(["A", "B", "C"], stack="unicast3", backend="netns")  # chaosbed's members idle meanwhile
        with NetnsCluster(spec) as cluster:
            cluster.start()
            for proto in ("UNICAST", "UNICAST2"):
                rates = jgroups_rounds(
                    cluster, folder, cfg[proto], ["A", "B"], "unicast", args.messages, args.repeats, args.size
                )
                figures[proto] = statistics.median(rates)
                report(f"JGroups 2.12 {proto}, A -> B, {args.size} B", figures[proto], "msgs/s", _spread(rates))
            rates = jgroups_rounds(
                cluster, folder, cfg["UNICAST"], ["A", "B", "C"], "multicast", args.messages, args.repeats, args.size
            )
            figures["NAKACK"] = statistics.median(rates)
            report(f"JGroups 2.12 NAKACK, 3 members, per receiver, {args.size} B", figures["NAKACK"], "msgs/s",
                   _spread(rates))  # fmt: skip
    ours = network.throughput("netns", args.messages, args.repeats)  # bench_network's UNICAST3 and NAKACK2 runs
    figures["UNICAST3"], figures["NAKACK2"] = ours["unicast3"], ours["nakack2"]
    median = f"(median of {args.repeats})"
    report(f"chaosbed UNICAST3 over UDP, A -> B, {args.size} B", figures["UNICAST3"], "msgs/s", median)
    report(f"chaosbed NAKACK2, 3 members, per receiver, {args.size} B", figures["NAKACK2"], "msgs/s", median)
    report("  ratio UNICAST3 / JGroups UNICAST2", figures["UNICAST3"] / figures["UNICAST2"], "x", "(target >= 1.5)")
    report("  ratio UNICAST3 / JGroups UNICAST", figures["UNICAST3"] / figures["UNICAST"], "x")
    report("  ratio NAKACK2 / JGroups NAKACK", figures["NAKACK2"] / figures["NAKACK"], "x", "(target >= 1.2)")


def _spread(rates: list[float]) -> str:
    return f"(median of {len(rates)}; {min(rates):,.0f}-{max(rates):,.0f})"


if __name__ == "__main__":
    main()

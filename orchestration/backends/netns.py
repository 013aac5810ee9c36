"""One network namespace per member on a bridge that lives in its own "switch" namespace.

Layout for cluster label L (e.g. cb1a2b3c): namespace L-sw holds bridge br0 (multicast snooping off, bridged frames
kept out of that namespace's netfilter hooks: `_bridge_without_netfilter`); member M gets
namespace L-M with eth0 (a veth whose peer L<i> sits on the bridge), address 10.<a>.<b>.(10+i)/24, lo up, and a
224.0.0.0/4 route via eth0. Host firewalls never see the traffic (it stays inside the namespaces) and deleting the
namespaces removes every veth and the bridge with them.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from chaos.netns_engine import NetnsFaultEngine
from chaos.render import Endpoint
from orchestration.backends.real import RealCluster, state_str
from orchestration.cluster import LABEL_PREFIX, ClusterError, MemberInfo
from orchestration.host import claims
from orchestration.systems import system_of

DATA_PORT = 7800


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise ClusterError(f"ip {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


BRIDGE_NETFILTER_KEYS = ("bridge-nf-call-iptables", "bridge-nf-call-ip6tables", "bridge-nf-call-arptables")


def _bridge_without_netfilter(ns: str) -> None:
    """The bridge in namespace ns forwards frames without passing them through ns's iptables/arptables hooks.

    With br_netfilter loaded (dockerd loads it) every bridged frame, each IP fragment on each port, otherwise goes
    through the hooks of a namespace that has no rules (chaos rules live in the members' namespaces). That cost the
    sender ~0.5 µs of CPU per 1000 B multicast, and made a run's speed depend on whether docker had run on the
    machine. Without br_netfilter the keys do not exist and there is nothing to turn off. The keys are per namespace
    since Linux 5.3; where the write changed our own namespace's value too (an older kernel: one value for the
    whole machine, which docker's bridges rely on), it is put back and the bridge keeps its netfilter."""
    paths = [Path("/proc/sys/net/bridge", key) for key in BRIDGE_NETFILTER_KEYS]
    ours = {p: p.read_text() for p in paths if p.exists()}
    with in_namespace(ns):
        for p in paths:
            with contextlib.suppress(FileNotFoundError):
                p.write_text("0\n")
    for p, value in ours.items():
        if p.read_text() != value:
            p.write_text(value)


def check_netns_available() -> None:
    """Raises ClusterError saying what is missing: root, the ip tool, network namespaces."""
    if os.geteuid() != 0:
        raise ClusterError("the netns backend needs root (network namespaces); run as root or use --backend process")
    if shutil.which("ip") is None:
        raise ClusterError("the netns backend needs the `ip` tool (Debian: apt-get install iproute2)")
    if not os.path.exists("/proc/self/ns/net"):
        raise ClusterError("this kernel has no network namespaces (CONFIG_NET_NS); use --backend process")


def list_namespaces() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def reap_namespaces(label: str | None = None, *, keep: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Deletes one cluster's namespaces, or (label None) every ORPHANED labelled namespace: one whose label is not
    in `keep` (clusters with a state file) and that has no process in it. A namespace with live processes but no
    state file here belongs to a cluster of another state root (another user's run, a test run): left alone."""
    gone = []
    for ns in list_namespaces():
        ns_label = ns.split("-", 1)[0]
        if label is not None:
            if not ns.startswith(f"{label}-"):
                continue
            _stop_handlers(ns, ns_label)
        elif not _is_label(ns_label) or ns_label in keep or not _stop_handlers(ns, ns_label):
            continue
        _ip("netns", "del", ns, check=False)
        gone.append(ns)
    return gone


def _stop_handlers(ns: str, label: str) -> bool:
    """Kills the chaos handlers (chaos/nfqueue/, tagged with the label) left in namespace ns; True if no other
    process remains in it. Only pids whose command line names both the handler module and the label are touched."""
    others = 0
    for pid in map(int, _ip("netns", "pids", ns, check=False).stdout.split()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"chaos.nfqueue" in cmdline and label.encode() in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                _wait_gone(pid)
        else:
            others += 1
    return others == 0


def _wait_gone(pid: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.01)  # polling the pid's exit with a deadline


def _is_label(s: str) -> bool:
    tail = s[len(LABEL_PREFIX) :]
    return s.startswith(LABEL_PREFIX) and len(tail) == 6 and all(c in "0123456789abcdef" for c in tail)


class NetnsCluster(RealCluster):
    backend_name = "netns"
    _chaos: NetnsFaultEngine | None = None

    def _place(self, names: list[str]) -> None:
        check_netns_available()
        index = claims.claim(self.label, "netns", 100 * 250, self.state_dir)  # no other live cluster has it
        a, b = 100 + index // 250, index % 250
        self._prefix = f"10.{a}.{b}"
        self._group = f"239.78.{a}.{b}"
        sw = self.switch_ns
        self._namespaces = [sw]
        _ip("netns", "add", sw)
        _ip("-n", sw, "link", "set", "lo", "up")
        _ip("-n", sw, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
        _ip("-n", sw, "link", "set", "br0", "up")
        _bridge_without_netfilter(sw)
        for i, name in enumerate(names):
            ns = self.member_ns(name)
            _ip("netns", "add", ns)
            self._namespaces.append(ns)
            veth = f"{self.label}{i}"
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "netns", sw)
            _ip("-n", sw, "link", "set", veth, "master", "br0", "up")
            ip = f"{self._prefix}.{10 + i}"
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0")
            self.members[name] = MemberInfo(name, ip, DATA_PORT, netns=ns)

    @property
    def switch_ns(self) -> str:
        return f"{self.label}-sw"

    def member_ns(self, name: str) -> str:
        return f"{self.label}-{name}"

    def _command(self, m: MemberInfo) -> list[str]:
        return ["ip", "netns", "exec", m.netns or self.member_ns(m.name), *super()._command(m)]

    def _extra_config(self) -> dict[str, object]:
        return {"mcast_group": self._group, "mcast_loop": False}

    def _connect(self, m: MemberInfo, timeout: float) -> socket.socket:
        """The control port lives inside the member's namespace: connect from a socket created in it."""
        return _socket_in_namespace(m.netns or self.member_ns(m.name), (m.ip, m.control_port), timeout)

    @property
    def chaos(self) -> NetnsFaultEngine:
        """The network faults of this cluster (partition, split, loss, delay, reorder, duplicate, discard)."""
        if self._chaos is None:
            members = {n: Endpoint(n, m.ip, m.netns or self.member_ns(n)) for n, m in self.members.items()}
            wire = system_of(self.spec.system).wire  # discards are read in the system's wire profile
            self._chaos = NetnsFaultEngine(
                self.state_dir, self.label, members, transport=self.spec.transport, wire=wire
            )
        return self._chaos

    def _teardown_network(self) -> None:
        if self.members:
            self.chaos.shutdown()  # handlers hold the namespaces open: stop them first
        reap_namespaces(self.label)

    def _network_state(self) -> dict[str, object]:
        return {"group": getattr(self, "_group", None), "prefix": getattr(self, "_prefix", None)}

    def _restore_network(self, network: Mapping[str, object]) -> None:
        self._group = state_str(network, "group") or ""
        self._prefix = state_str(network, "prefix") or ""


@contextlib.contextmanager
def in_namespace(ns: str) -> Iterator[None]:
    """Runs the block with this thread in network namespace ns (a name under /run/netns, or a path such as
    /proc/PID/ns/net), then returns it to its own namespace. Sockets created inside keep ns, so they work after the
    switch back."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(ns if ns.startswith("/") else f"/run/netns/{ns}", os.O_RDONLY)
    except OSError:
        os.close(own)
        raise ClusterError(f"namespace {ns} does not exist (was the cluster taken down?)") from None
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)
        os.close(target)


@dataclass(frozen=True)
class VethPair:
    ns_a: str
    ns_b: str
    ip_a: str
    ip_b: str


@contextlib.contextmanager
def veth_pair(label: str) -> Iterator[VethPair]:
    """Two namespaces <label>-a and <label>-b joined by one veth (eth0 in each; 10.x.y.1 and .2/24, lo up, the
    multicast route), for benchmarks and tests that need a link but no cluster. Both are deleted on exit."""
    pair_ns = Path(f"/run/netns/{label}-a")  # the claim lives while the pair's namespace does
    index = claims.claim(label, "veth", 50 * 250, pair_ns)
    net = f"10.{200 + index // 250}.{index % 250}"
    pair = VethPair(f"{label}-a", f"{label}-b", f"{net}.1", f"{net}.2")
    try:
        _ip("netns", "add", pair.ns_a)
        _ip("netns", "add", pair.ns_b)
        _ip("-n", pair.ns_a, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", pair.ns_b)
        for ns, ip in ((pair.ns_a, pair.ip_a), (pair.ns_b, pair.ip_b)):
            _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0")
        yield pair
    finally:
        _ip("netns", "del", pair.ns_a, check=False)
        _ip("netns", "del", pair.ns_b, check=False)
        claims.release(label)


def _socket_in_namespace(ns: str, addr: tuple[str, int], timeout: float) -> socket.socket:
    """A TCP connection made from inside namespace ns."""
    with in_namespace(ns):
        return socket.create_connection(addr, timeout=timeout)


_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _setns(fd: int) -> None:
    """setns(2) for this thread (os.setns needs Python 3.12)."""
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")

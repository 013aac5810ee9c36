"""tc netem where the kernel has it, for per-link delay, jitter, reorder and duplicate; and the probe that says
whether it does.

netem is an egress qdisc, but faults are applied where packets arrive (docs/architecture.md), per source: the
receiver's eth0 ingress redirects packets from the shaped sources to an ifb device, whose htb root has one class per
source with a netem leaf. Multicast from a source is shaped for this receiver only, as with every other fault.

Without sch_netem (this project's CI kernel) the chaos engine uses NFQUEUE held verdicts instead (chaos/nfqueue/);
`CHAOSBED_NETEM=0` forces that fallback on machines that have netem. Replacing the tc setup is not atomic (a few
milliseconds in which the link is unshaped), unlike the nft/iptables rules of chaos/kernel.py.
"""

from __future__ import annotations

import functools
import os
import secrets
import subprocess
from dataclasses import dataclass

IFB = "cbifb0"  # one per member namespace; names are per namespace, so no clash between members


class NetemError(RuntimeError):
    """A tc command failed; the message names it."""


@dataclass(frozen=True)
class Shaping:
    """What netem does to packets from one source at one receiver."""

    source: str
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    reorder: float = 0.0  # probability
    duplicate: float = 0.0  # probability

    def netem_args(self) -> list[str]:
        args: list[str] = []
        # netem reorders by sending some packets without the delay: it needs a delay to reorder against.
        delay = self.delay_ms if self.delay_ms > 0 else (10.0 if self.reorder > 0 else 0.0)
        if delay > 0:
            args += ["delay", f"{delay:g}ms"]
            if self.jitter_ms > 0:
                args += [f"{self.jitter_ms:g}ms"]
        if self.reorder > 0:
            args += ["reorder", f"{self.reorder * 100:g}%"]
        if self.duplicate > 0:
            args += ["duplicate", f"{self.duplicate * 100:g}%"]
        return args


@functools.cache
def probe() -> tuple[bool, str]:
    """(available, why not). Tries a netem qdisc once, in a scratch namespace that is removed again."""
    if os.environ.get("CHAOSBED_NETEM", "").strip() in ("0", "no", "false"):
        return False, "CHAOSBED_NETEM=0 forces the NFQUEUE fallback"
    if os.geteuid() != 0:
        return False, "probing netem needs root"
    ns = f"cb{secrets.token_hex(3)}-probe"  # a cluster-like label, so `chaosbed down --all` reaps it if orphaned
    try:
        made = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True)
        if made.returncode != 0:
            return False, f"cannot make a scratch namespace to probe netem: {made.stderr.strip()}"
        proc = subprocess.run(
            ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            return False, f"this kernel has no sch_netem ({proc.stderr.strip()})"
        return True, ""
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def available() -> bool:
    return probe()[0]


def _u32_filter(dev: str, parent: str, source: str, *action: str) -> list[str]:
    """A tc u32 filter on packets from `source`."""
    head = "tc filter add dev {dev} parent {parent} protocol ip prio 1 u32 match ip src {source}/32"
    return [*head.format(dev=dev, parent=parent, source=source).split(), *action]


def commands(shapings: list[Shaping], leaf: list[str] | None = None) -> list[list[str]]:
    """tc/ip commands that build the ifb shaping for `shapings` (after `clear`). `leaf` replaces the netem leaf
    qdisc (tests use pfifo to check the plumbing on kernels without netem)."""
    cmds = [
        ["ip", "link", "add", IFB, "type", "ifb"],
        ["ip", "link", "set", IFB, "up"],
        ["tc", "qdisc", "add", "dev", "eth0", "handle", "ffff:", "ingress"],
        ["tc", "qdisc", "add", "dev", IFB, "root", "handle", "1:", "htb", "default", "1"],
        ["tc", "class", "add", "dev", IFB, "parent", "1:", "classid", "1:1", "htb", "rate", "10gbit"],
    ]
    for i, s in enumerate(shapings):
        classid = f"1:{10 + i}"
        cmds += [
            ["tc", "class", "add", "dev", IFB, "parent", "1:", "classid", classid, "htb", "rate", "10gbit"],
            ["tc", "qdisc", "add", "dev", IFB, "parent", classid, *(leaf or ["netem", *s.netem_args()])],
            _u32_filter(IFB, "1:", s.source, "flowid", classid),
            _u32_filter("eth0", "ffff:", s.source, "action", "mirred", "egress", "redirect", "dev", IFB),
        ]
    return cmds


def clear(ns: str) -> None:
    """Removes the ifb shaping from namespace ns (idempotent)."""
    subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0", "ingress"], capture_output=True)
    subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "del", IFB], capture_output=True)


def apply(ns: str, shapings: list[Shaping], leaf: list[str] | None = None) -> None:
    """Makes namespace ns shape exactly `shapings` (none: the ifb and the ingress qdisc are removed)."""
    clear(ns)
    if not shapings:
        return
    for cmd in commands(shapings, leaf):
        proc = subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True)
        if proc.returncode != 0:
            clear(ns)
            raise NetemError(f"{' '.join(cmd)} in namespace {ns} failed: {proc.stderr.strip()}")


def installed(ns: str) -> bool:
    proc = subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "show", IFB], capture_output=True)
    return proc.returncode == 0

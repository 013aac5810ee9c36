"""Kernel rules in a receiving member's namespace: partitions, random loss, stateless header drops, and the
packets handed to the NFQUEUE handler.

Faults are applied where packets arrive (DESIGN.md principle 4): in the receiver's namespace, by source address, so
unicast and multicast from a member are treated alike and one-way faults are exact. Each namespace's rules are
rendered from the full list of faults in force and replaced in one transaction, so a change is atomic and removing
a fault can never leave a piece of it behind:

- nftables table `inet chaosbed` (hook input, priority -10, before anything else): a set `blocked` of source
  addresses the member does not hear (partitions, splits) and `numgen random` drops per source (loss).
- iptables chain `CHAOSBED` (filter INPUT, replaced with `iptables-restore --noflush`): u32 matches that drop
  single-message datagrams whose header matches a stateless DISCARD rule, and `NFQUEUE` targets for what the handler
  (chaos/nfqueue.py) must judge. iptables rather than nft here because `xt_u32` walks our variable-length strings
  (cluster, src and dest names) to reach a header at any offset, and because some kernels (this one) have xt NFQUEUE
  but not nft's native `queue`.

A u32 rule sees only the first message of a datagram, so it only decides datagrams that carry exactly one message;
datagrams with several messages from the same sources go to the handler, which removes just the matching messages.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass, field

from chaos.rules import Match
from node import wire

NFT_TABLE = "chaosbed"
IPT_CHAIN = "CHAOSBED"
QUEUE_NUM = 0

# Offsets within an IPv4 packet without options (IHL 5) carrying UDP: the UDP payload starts at 28.
_UDP_PAYLOAD = 28
# After jumping over the three strings (u32 `@` adds each length byte to the base), the message count is at base+34
# and the first message at base+36: 28 + 3 fixed bytes + 3 length bytes = 34.
_SKIP_STRINGS = f"{_UDP_PAYLOAD + 3}>>24@{_UDP_PAYLOAD + 4}>>24@{_UDP_PAYLOAD + 5}>>24@"
_COUNT_AT = _UDP_PAYLOAD + 6
_FIRST_MESSAGE_AT = _UDP_PAYLOAD + 8
_MAX_U32_TESTS = 10  # xt_u32 limit (XT_U32_MAXSIZE + 1)


class KernelError(RuntimeError):
    """A kernel rule could not be installed; the message says what is missing and what to do."""


@dataclass(frozen=True)
class HeaderDrop:
    """Drop single-message datagrams from `source` whose message matches `match` (a stateless DISCARD rule)."""

    source: str
    match: Match
    probability: float = 1.0


@dataclass
class NamespaceRules:
    """Everything one receiving namespace should have. Empty = no chaos rules at all (the table and chain go)."""

    blocked: set[str] = field(default_factory=set)  # source addresses not heard at all
    losses: list[tuple[str, float]] = field(default_factory=list)  # (source, drop probability)
    header_drops: list[HeaderDrop] = field(default_factory=list)
    queue_all: set[str] = field(default_factory=set)  # every packet from these sources goes to the handler
    queue_ours: set[str] = field(default_factory=set)  # every datagram of our wire format from these sources
    queue_batches: set[str] = field(default_factory=set)  # our datagrams with more than one message

    def empty(self) -> bool:
        return not (
            self.blocked or self.losses or self.header_drops or self.queue_all or self.queue_ours or self.queue_batches
        )

    def needs_queue(self) -> bool:
        return bool(self.queue_all or self.queue_ours or self.queue_batches)


# --- u32 compilation -------------------------------------------------------------------------------------------------


def _word_tests(at: int, kind: str, value: int | tuple[int, int]) -> list[str] | None:
    """u32 tests for one fixed-size field at byte offset `at` of a packet (after the string jumps)."""
    lo, hi = value if isinstance(value, tuple) else (value, value)
    shift = {"u8": 24, "bool": 24, "u16": 16}.get(kind)
    if shift is not None:
        return [f"{_SKIP_STRINGS}{at}>>{shift}={_u32_value(lo, hi)}"]
    if kind == "u32":
        return [f"{_SKIP_STRINGS}{at}={_u32_value(lo, hi)}"]
    # u64: the high word must be one value; the low word may be a range.
    if lo >> 32 != hi >> 32:
        return None
    return [
        f"{_SKIP_STRINGS}{at}={lo >> 32}",
        f"{_SKIP_STRINGS}{at + 4}={_u32_value(lo & 0xFFFFFFFF, hi & 0xFFFFFFFF)}",
    ]


def _u32_value(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}:{hi}"


def _datagram_tests() -> list[str]:
    """IPv4 without options, our magic and version."""
    return ["0>>24=0x45", f"{_UDP_PAYLOAD}>>16={(wire.MAGIC << 8) | wire.WIRE_VERSION:#06x}"]


def u32_single_message(match: Match) -> str | None:
    """The u32 expression matching a datagram with exactly one message that matches `match`; None when the match
    cannot be expressed (too many tests, or a u64 range across a 2**32 boundary): the handler then decides."""
    spec = wire.SPECS[f"{match.protocol}.{match.header}"]
    tests = [
        *_datagram_tests(),
        f"{_SKIP_STRINGS}{_COUNT_AT}>>16=1",
        f"{_SKIP_STRINGS}{_FIRST_MESSAGE_AT}>>16={(spec.proto_id << 8) | spec.type_id:#06x}",
    ]
    offsets = field_offsets(spec)
    kinds = {f.name: f.kind for f in spec.fields}
    for name, value in match.fields:
        more = _word_tests(_FIRST_MESSAGE_AT + offsets[name], kinds[name], value)
        if more is None:
            return None
        tests += more
    if len(tests) > _MAX_U32_TESTS:
        return None
    return "&&".join(tests)


def u32_batches() -> str:
    """Our datagrams carrying more than one message."""
    return "&&".join([*_datagram_tests(), f"{_SKIP_STRINGS}{_COUNT_AT}>>16=2:65535"])


def u32_ours() -> str:
    return "&&".join(_datagram_tests())


def field_offsets(spec: wire.HeaderSpec) -> dict[str, int]:
    """Byte offset of each fixed-size field from the start of its message (after proto and type)."""
    sizes = {"u8": 1, "bool": 1, "u16": 2, "u32": 4, "u64": 8}
    out, pos = {}, 2
    for f in spec.fields:
        if f.kind not in sizes:
            break
        out[f.name] = pos
        pos += sizes[f.kind]
    return out


def compiles_to_kernel(match: Match) -> bool:
    return u32_single_message(match) is not None


# --- rendering ----------------------------------------------------------------------------------------------------


def nft_script(rules: NamespaceRules) -> str:
    """An `nft -f` script that replaces table inet chaosbed in one transaction (or removes it when empty)."""
    lines = [f"table inet {NFT_TABLE} {{}}", f"delete table inet {NFT_TABLE}"]
    if rules.blocked or rules.losses:
        lines.append(f"table inet {NFT_TABLE} {{")
        lines.append("  set blocked { type ipv4_addr;" + _elements(rules.blocked) + " }")
        lines.append("  chain input {")
        lines.append("    type filter hook input priority -10; policy accept;")
        lines.append("    ip saddr @blocked counter drop")
        for source, p in rules.losses:
            threshold = round(p * 1_000_000)
            lines.append(f"    ip saddr {source} numgen random mod 1000000 < {threshold} counter drop")
        lines.append("  }")
        lines.append("}")
    return "\n".join(lines) + "\n"


def _elements(addresses: set[str]) -> str:
    return f" elements = {{ {', '.join(sorted(addresses))} }};" if addresses else ""


def iptables_script(rules: NamespaceRules) -> str:
    """An `iptables-restore --noflush` script that replaces chain CHAOSBED (declaring a chain flushes it)."""
    queue = f"-j NFQUEUE --queue-num {QUEUE_NUM} --queue-bypass"
    lines = ["*filter", f":{IPT_CHAIN} - [0:0]"]
    for d in rules.header_drops:
        u32 = u32_single_message(d.match)
        if u32 is None:
            raise KernelError(f"{d.match} cannot be compiled to a u32 match; it needs the NFQUEUE handler")
        chance = f" -m statistic --mode random --probability {d.probability:.6f}" if d.probability < 1.0 else ""
        lines.append(f'-A {IPT_CHAIN} -s {d.source}/32 -p udp -m u32 --u32 "{u32}"{chance} -j DROP')
    for source in sorted(rules.queue_all):
        lines.append(f"-A {IPT_CHAIN} -s {source}/32 {queue}")
    for source in sorted(rules.queue_ours - rules.queue_all):
        lines.append(f'-A {IPT_CHAIN} -s {source}/32 -p udp -m u32 --u32 "{u32_ours()}" {queue}')
    for source in sorted(rules.queue_batches - rules.queue_ours - rules.queue_all):
        lines.append(f'-A {IPT_CHAIN} -s {source}/32 -p udp -m u32 --u32 "{u32_batches()}" {queue}')
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"


# --- applying -------------------------------------------------------------------------------------------------------


def _run(ns: str, argv: list[str], stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", "netns", "exec", ns, *argv], input=stdin, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise KernelError(f"{' '.join(argv)} in namespace {ns} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def apply(ns: str, rules: NamespaceRules) -> None:
    """Makes namespace ns have exactly `rules`. The queue rules must only be installed once the handler is ready
    (the caller's job); with --queue-bypass a packet is accepted if no handler listens, never lost."""
    check_tools()
    _run(ns, ["nft", "-f", "-"], nft_script(rules))
    has_chain = _run(ns, ["iptables", "-S", IPT_CHAIN], check=False).returncode == 0
    needs_chain = bool(rules.header_drops or rules.needs_queue())
    if needs_chain:
        _run(ns, ["iptables-restore", "--noflush"], iptables_script(rules))
        if _run(ns, ["iptables", "-C", "INPUT", "-j", IPT_CHAIN], check=False).returncode != 0:
            _run(ns, ["iptables", "-I", "INPUT", "1", "-j", IPT_CHAIN])
    elif has_chain:
        _run(ns, ["iptables", "-D", "INPUT", "-j", IPT_CHAIN], check=False)
        _run(ns, ["iptables", "-F", IPT_CHAIN])
        _run(ns, ["iptables", "-X", IPT_CHAIN])


def installed(ns: str) -> dict[str, str]:
    """What chaos rules namespace ns has now (for `fault list --kernel` and for tests): empty when clean."""
    out: dict[str, str] = {}
    nft = _run(ns, ["nft", "list", "table", "inet", NFT_TABLE], check=False)
    if nft.returncode == 0:
        out["nft"] = nft.stdout
    ipt = _run(ns, ["iptables", "-S", IPT_CHAIN], check=False)
    if ipt.returncode == 0:
        out["iptables"] = ipt.stdout
    jump = _run(ns, ["iptables", "-S", "INPUT"], check=False)
    if IPT_CHAIN in jump.stdout:
        out["jump"] = jump.stdout
    return out


def counters(ns: str) -> dict[str, int]:
    """Packets the kernel rules of namespace ns acted on: blocked (partitions), lost (loss), dropped (u32 header
    drops), queued (handed to the NFQUEUE handler). Zero when there are no rules."""
    out = {"blocked": 0, "lost": 0, "dropped": 0, "queued": 0}
    nft = _run(ns, ["nft", "list", "table", "inet", NFT_TABLE], check=False)
    for line in nft.stdout.splitlines():
        if "counter packets" in line:
            n = int(line.split("counter packets")[1].split()[0])
            out["blocked" if "@blocked" in line else "lost"] += n
    ipt = _run(ns, ["iptables", "-L", IPT_CHAIN, "-v", "-x", "-n"], check=False)
    for line in ipt.stdout.splitlines()[2:]:
        cols = line.split()
        if len(cols) > 2 and cols[0].isdigit():
            out["dropped" if cols[2] == "DROP" else "queued"] += int(cols[0])
    return out


@functools.cache
def check_tools() -> None:
    """Raises KernelError naming the missing tool (nft, iptables with u32/NFQUEUE) and how to get it."""
    missing = [t for t in ("nft", "iptables", "iptables-restore") if shutil.which(t) is None]
    if missing:
        raise KernelError(
            f"the chaos engine needs {', '.join(missing)}: run `make setup` (Debian: apt-get install nftables iptables)"
        )

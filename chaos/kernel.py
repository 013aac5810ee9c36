"""Kernel rules in a receiving member's namespace: partitions, random loss, stateless header drops, and the
packets handed to the NFQUEUE handler.

Faults are applied where packets arrive (docs/architecture.md): in the receiver's namespace, by source address, so
unicast and multicast from a member are treated alike and one-way faults are exact. Each namespace's rules are
rendered from the full list of faults in force and replaced in one transaction, so a change is atomic and removing
a fault can never leave a piece of it behind:

- nftables table `inet chaosbed` (hook input, priority -10, before anything else): a set `blocked` of source
  addresses the member does not hear (partitions, splits) and `numgen random` drops per source (loss). Timed
  partitions and losses (`timed_blocks`, `timed_losses`) are the same drops gated by `meta time` bounds: installed
  ahead of their window, the kernel switches them on and off at the planned instants with no operation then (see
  `nft_time` for how a nanosecond bound is written, and `time_gates` for the probe that checks it on this system).
- iptables chain `CHAOSBED` (filter INPUT, replaced with `iptables-restore --noflush`): u32 matches that drop
  single-message datagrams whose header matches a stateless DISCARD rule, and `NFQUEUE` targets for what the handler
  (chaos/nfqueue/) must judge. iptables rather than nft here because `xt_u32` walks our variable-length strings
  (cluster, src and dest names) to reach a header at any offset, and because some kernels (this one) have xt NFQUEUE
  but not nft's native `queue`.

A u32 rule sees only the first message of a datagram, so it only decides datagrams that carry exactly one message;
datagrams with several messages from the same sources go to the handler, which removes just the matching messages.
Other systems' wire profiles (chaos/profiles/) render their own u32 rules (`U32Rule`: drop, or return undecided
datagrams to INPUT without queueing them) and the tests of the datagrams their handler must see (`queue_u32`).
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from chaos import u32 as xt_u32
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

_U64 = 1 << 64
# nft reads a number given for `meta time` as seconds and multiplies it by 10**9 in u64 arithmetic (wrapping). As
# 10**9 = 2**9 * 1953125 (odd), N * 10**9 mod 2**64 reaches exactly the multiples of 512: see nft_time.
_NS_SHIFT = 9
_M55 = 1 << (64 - _NS_SHIFT)
_INV_1953125 = pow(10**9 >> _NS_SHIFT, -1, _M55)


class KernelError(RuntimeError):
    """A kernel rule could not be installed; the message says what is missing and what to do."""


@dataclass(frozen=True)
class Window:
    """When a timed rule is in force: start <= now < end, both CLOCK_REALTIME nanoseconds (time.time_ns()), None =
    unbounded on that side. In nft the bounds are rounded to a multiple of 512 ns (see `nft_time`). end == start is
    an empty window (the rule is never in force and is not rendered)."""

    start: int | None = None
    end: int | None = None

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < _U64):
                raise ValueError(f"Window.{name} must be None or CLOCK_REALTIME nanoseconds (an int >= 0), not {v!r}")
        if self.start is not None and self.end is not None and self.end < self.start:
            raise ValueError(f"Window end {self.end} is before its start {self.start}")

    def contains(self, now_ns: int) -> bool:
        return (self.start is None or self.start <= now_ns) and (self.end is None or now_ns < self.end)

    def nft_bounds(self) -> str | None:
        """The nft expressions of the window (`meta time >= X meta time < Y`, "" when unbounded), or None when the
        window is empty once rounded (nothing to render)."""
        lo = None if self.start is None else _round512(self.start)
        hi = None if self.end is None else _round512(self.end)
        if lo is not None and hi is not None and hi <= lo:
            return None
        parts = []
        if lo is not None:
            parts.append(f"meta time >= {nft_time(lo)}")
        if hi is not None:
            parts.append(f"meta time < {nft_time(hi)}")
        return " ".join(parts)


@dataclass(frozen=True)
class HeaderDrop:
    """Drop single-message datagrams from `source` whose message matches `match` (a stateless DISCARD rule)."""

    source: str
    match: Match
    probability: float = 1.0


@dataclass(frozen=True)
class U32Rule:
    """A u32 rule of a wire profile on packets from `source`: `tests` (any number: a rule repeats `-m u32` for every
    ten) and the target, DROP (with a probability) or RETURN (decided: not queued to the handler)."""

    source: str
    tests: tuple[str, ...]
    target: str
    probability: float = 1.0


class TimedBlock(NamedTuple):
    """A partition from `source` while `window` is in force, on behalf of fault `fault` (its id, for counters)."""

    source: str
    window: Window
    fault: str = ""


class TimedLoss(NamedTuple):
    """A loss of `probability` from `source` while `window` is in force, on behalf of fault `fault`."""

    source: str
    probability: float
    window: Window
    fault: str = ""


@dataclass
class NamespaceRules:
    """Everything one receiving namespace should have. Empty = no chaos rules at all (the table and chain go)."""

    blocked: set[str] = field(default_factory=set)  # source addresses not heard at all
    losses: list[tuple[str, float]] = field(default_factory=list)  # (source, drop probability)
    timed_blocks: list[TimedBlock] = field(default_factory=list)  # when a source is not heard
    timed_losses: list[TimedLoss] = field(default_factory=list)  # when a source's packets are dropped at random
    header_drops: list[HeaderDrop] = field(default_factory=list)
    queue_all: set[str] = field(default_factory=set)  # every packet from these sources goes to the handler
    queue_ours: set[str] = field(default_factory=set)  # every datagram of our wire format from these sources
    queue_batches: set[str] = field(default_factory=set)  # our datagrams with more than one message
    u32_rules: list[U32Rule] = field(default_factory=list)  # a wire profile's drops and returns, in order
    queue_u32: dict[str, tuple[str, ...]] = field(default_factory=dict)  # source -> tests of what to queue

    def empty(self) -> bool:
        return not (self.needs_nft() or self.header_drops or self.u32_rules or self.needs_queue())

    def needs_nft(self) -> bool:
        """Whether the nft table is needed: partitions or losses, timed or not."""
        return bool(self.blocked or self.losses or self.timed_blocks or self.timed_losses)

    def needs_queue(self) -> bool:
        """Whether packets go to the NFQUEUE handler (timed partitions and losses are nft rules: they never do)."""
        return bool(self.queue_all or self.queue_ours or self.queue_batches or self.queue_u32)


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


def _round512(ns: int) -> int:
    """ns rounded to the nearest multiple of 512 (the resolution of an nft time bound), within the u64 range."""
    return min(((ns + 256) >> _NS_SHIFT) << _NS_SHIFT, _U64 - 512)


def nft_time(real_ns: int) -> str:
    """The number to write after `meta time >=` / `meta time <` in an nft 1.0.x script so that the kernel compares
    the packet's ktime_get_real_ns() with real_ns rounded to a multiple of 512 ns (an error below 0.26 us).

    nft parses a plain number for `meta time` as seconds since the epoch and stores N * 10**9 as a u64, wrapping
    around 2**64; a date string would lose the fraction of a second. Since 10**9 = 2**9 * 1953125 with 1953125 odd,
    the N with N * 10**9 = v (mod 2**64) for v = 512 * k is N = k * inverse(1953125) mod 2**55 (< 2**55, which nft
    accepts). `time_gates` checks on this system that nft stores exactly that value."""
    if isinstance(real_ns, bool) or not isinstance(real_ns, int) or not 0 <= real_ns < _U64:
        raise ValueError(f"a time bound is CLOCK_REALTIME nanoseconds in [0, 2**64), not {real_ns!r}")
    return str(((_round512(real_ns) >> _NS_SHIFT) * _INV_1953125) % _M55)


def nft_time_value(text: str) -> int:
    """The nanoseconds nft stores for the number `text` after `meta time` (N * 10**9 mod 2**64): nft_time's inverse."""
    return int(text) * 10**9 % _U64


# nft rule comments: counters() classifies the rules' packet counters by them.
BLOCKED, LOST = "blocked", "lost"


def nft_script(rules: NamespaceRules) -> str:
    """An `nft -f` script that replaces table inet chaosbed in one transaction (or removes it when empty).

    Every rule carries a comment, "blocked" (partitions) or "lost" (loss), by which `counters` classifies it; a timed
    rule's comment names its fault too ("blocked f4"), by which `fault_counters` attributes it. A timed rule matches
    the source first, then its `meta time` bounds, then (loss) the random draw."""
    lines = [f"table inet {NFT_TABLE} {{}}", f"delete table inet {NFT_TABLE}"]
    if rules.needs_nft():
        lines.append(f"table inet {NFT_TABLE} {{")
        lines.append("  set blocked { type ipv4_addr;" + _elements(rules.blocked) + " }")
        lines.append("  chain input {")
        lines.append("    type filter hook input priority -10; policy accept;")
        lines.append(_nft_rule(BLOCKED, "ip saddr @blocked"))
        for source, window, fault in rules.timed_blocks:
            bounds = window.nft_bounds()
            if bounds is not None:
                lines.append(_nft_rule(_comment(BLOCKED, fault), f"ip saddr {source}", bounds))
        for source, p in rules.losses:
            lines.append(_nft_rule(LOST, f"ip saddr {source}", _numgen(p)))
        for source, p, window, fault in rules.timed_losses:
            bounds = window.nft_bounds()
            if bounds is not None:
                lines.append(_nft_rule(_comment(LOST, fault), f"ip saddr {source}", bounds, _numgen(p)))
        lines.append("  }")
        lines.append("}")
    return "\n".join(lines) + "\n"


def _comment(kind: str, fault: str) -> str:
    """A rule's comment: its class, then the id of the fault it acts for (timed rules: one fault each)."""
    return f"{kind} {fault}" if fault else kind


def _nft_rule(comment: str, *matches: str) -> str:
    """One drop rule: the match expressions (empty ones skipped), a counter, and its class as the comment."""
    return "    " + " ".join(m for m in matches if m) + f' counter drop comment "{comment}"'


def _numgen(p: float) -> str:
    """The random draw of a loss rule; none for a certain loss (nft refuses `numgen random mod 1000000 < 1000000`)."""
    threshold = round(p * 1_000_000)
    return "" if threshold >= 1_000_000 else f"numgen random mod 1000000 < {threshold}"


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
    for r in rules.u32_rules:
        matches = " ".join(f'-m u32 --u32 "{expr}"' for expr in xt_u32.chunks(r.tests))
        chance = f" -m statistic --mode random --probability {r.probability:.6f}" if r.probability < 1.0 else ""
        lines.append(f"-A {IPT_CHAIN} -s {r.source}/32 -p udp {matches}{chance} -j {r.target}")
    for source in sorted(rules.queue_all):
        lines.append(f"-A {IPT_CHAIN} -s {source}/32 {queue}")
    for source in sorted(rules.queue_ours - rules.queue_all):
        lines.append(f'-A {IPT_CHAIN} -s {source}/32 -p udp -m u32 --u32 "{u32_ours()}" {queue}')
    for source in sorted(rules.queue_batches - rules.queue_ours - rules.queue_all):
        lines.append(f'-A {IPT_CHAIN} -s {source}/32 -p udp -m u32 --u32 "{u32_batches()}" {queue}')
    for source, tests in sorted(rules.queue_u32.items()):
        if source not in rules.queue_all:
            matches = " ".join(f'-m u32 --u32 "{expr}"' for expr in xt_u32.chunks(tests))
            lines.append(f"-A {IPT_CHAIN} -s {source}/32 -p udp {matches} {queue}")
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"


# --- applying -------------------------------------------------------------------------------------------------------


def _run(ns: str, argv: list[str], stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", "netns", "exec", ns, *argv], input=stdin, capture_output=True, text=True)
    if check and proc.returncode != 0:
        if not ns.startswith("/") and not os.path.exists(f"/run/netns/{ns}"):
            raise KernelError(
                f"namespace {ns} does not exist (deleted from another shell, or the cluster taken down?): no rules "
                "can go there; `chaosbed down` removes the rest of the cluster"
            )
        raise KernelError(f"{' '.join(argv)} in namespace {ns} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def apply(ns: str, rules: NamespaceRules) -> None:
    """Makes namespace ns have exactly `rules`. The queue rules must only be installed once the handler is ready
    (the caller's job); with --queue-bypass a packet is accepted if no handler listens, never lost."""
    check_tools()
    if rules.timed_blocks or rules.timed_losses:
        ok, why = time_gates()
        if not ok:
            raise KernelError(
                f"timed partitions and losses need nft time gates, which are unavailable here: {why}. "
                "Give them to the NFQUEUE handler instead (link drop rules with active_from_ns / active_until_ns)"
            )
    _run(ns, ["nft", "-f", "-"], nft_script(rules))
    has_chain = _run(ns, ["iptables", "-S", IPT_CHAIN], check=False).returncode == 0
    needs_chain = bool(rules.header_drops or rules.u32_rules or rules.needs_queue())
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
    if nft.returncode == 0:
        out.update(parse_nft_counters(nft.stdout))
    ipt = _run(ns, ["iptables", "-L", IPT_CHAIN, "-v", "-x", "-n"], check=False)
    if ipt.returncode == 0:
        out.update(parse_iptables_counters(ipt.stdout))
    return out


_COMMENT = re.compile(r'comment "([^"]*)"')


def parse_nft_counters(listing: str) -> dict[str, int]:
    """{"blocked": n, "lost": n} from `nft list table inet chaosbed`: each rule's packet counter, classified by its
    comment ("blocked" or "lost", see nft_script); a rule without one (a table of an older version) by whether it
    matches the @blocked set."""
    out = {BLOCKED: 0, LOST: 0}
    for kind, _, n in _nft_rule_counts(listing):
        out[kind] += n
    return out


def parse_nft_fault_counters(listing: str) -> dict[str, dict[str, int]]:
    """{fault id: {"blocked" or "lost": n}} of the timed rules, whose comments name their fault."""
    out: dict[str, dict[str, int]] = {}
    for kind, fault, n in _nft_rule_counts(listing):
        if fault:
            out.setdefault(fault, {}).setdefault(kind, 0)
            out[fault][kind] += n
    return out


def _nft_rule_counts(listing: str) -> Iterator[tuple[str, str, int]]:
    """(class, fault id or "", packets) of each rule of a `nft list table` listing."""
    for line in listing.splitlines():
        if "counter packets" not in line:
            continue
        n = int(line.split("counter packets")[1].split()[0])
        m = _COMMENT.search(line)
        kind, _, fault = (m.group(1) if m else "").partition(" ")
        if kind not in (BLOCKED, LOST):  # a rule without a comment (a table of an older version)
            kind, fault = (BLOCKED if "@blocked" in line else LOST), ""
        yield kind, fault, n


def fault_counters(ns: str) -> dict[str, dict[str, int]]:
    """Packets each planned fault's kernel rules dropped in namespace ns: {fault id: {"blocked" | "lost": n}}."""
    nft = _run(ns, ["nft", "list", "table", "inet", NFT_TABLE], check=False)
    return parse_nft_fault_counters(nft.stdout) if nft.returncode == 0 else {}


def parse_iptables_counters(listing: str) -> dict[str, int]:
    """{"dropped": n, "queued": n} from `iptables -L CHAOSBED -v -x -n`: DROP rules (u32 header drops) and NFQUEUE
    targets (a wire profile's RETURN rules, which only keep decided packets out of the queue, count as neither)."""
    out = {"dropped": 0, "queued": 0}
    for line in listing.splitlines()[2:]:
        cols = line.split()
        if len(cols) > 2 and cols[0].isdigit() and cols[2] != "RETURN":
            out["dropped" if cols[2] == "DROP" else "queued"] += int(cols[0])
    return out


# --- the time-gate probe --------------------------------------------------------------------------------------------

_NETLINK_TIME_CMP = re.compile(
    r"\[ meta load time => reg (\d+) \]\s*"
    r"\[ byteorder reg \1 = hton\(reg \1, 8, 8\) \]\s*"
    r"\[ cmp (\w+) reg \1 0x([0-9a-f]{8}) 0x([0-9a-f]{8}) \]"
)


def netlink_time_bounds(debug_listing: str) -> list[tuple[str, int]]:
    """(operator, nanoseconds) of every `meta time` comparison in `nft --debug=netlink list ...` output, in order.

    The kernel compares the big-endian u64 (after the byteorder hton) held in the register; nft prints the register
    as 32-bit words in host order, so the bytes are the words packed natively."""
    out = []
    for m in _NETLINK_TIME_CMP.finditer(debug_listing):
        raw = int(m.group(3), 16).to_bytes(4, sys.byteorder) + int(m.group(4), 16).to_bytes(4, sys.byteorder)
        out.append((m.group(2), int.from_bytes(raw, "big")))
    return out


_PROBE_PORT = 9  # discard
_OPS = {"gte": ">=", "lt": "<"}


def _probe_script(inside: Window, later: Window, earlier: Window) -> str:
    def rule(name: str, w: Window) -> str:
        return f'    udp dport {_PROBE_PORT} {w.nft_bounds()} counter comment "{name}"'

    return "\n".join(
        [
            f"table inet {NFT_TABLE} {{",
            "  chain output {",
            "    type filter hook output priority 0; policy accept;",
            rule("inside", inside),
            rule("later", later),
            rule("earlier", earlier),
            "  }",
            "}",
            "",
        ]
    )


@functools.cache
def time_gates() -> tuple[bool, str]:
    """(available, why not): whether timed partitions and losses can be nft rules with `meta time` bounds here.

    Probed once per process in a scratch namespace (removed again): nft must accept `meta time` rules whose bounds
    are written by nft_time, `nft --debug=netlink` must show that nft stored exactly the intended nanoseconds (an
    nft that parses the number differently would shift every window), and the kernel must apply the bounds to a
    datagram sent now against CLOCK_REALTIME: counted by the rule whose window holds now, not by the ones an hour
    later or earlier. CHAOSBED_NFT_TIME=0 forces (False, ...). When unavailable, run timed partitions and losses in
    the NFQUEUE handler (link drop rules with active_from_ns / active_until_ns)."""
    if os.environ.get("CHAOSBED_NFT_TIME", "").strip().lower() in ("0", "no", "false", "off"):
        return False, "CHAOSBED_NFT_TIME=0 forces timed partitions and losses into the NFQUEUE handler"
    if os.geteuid() != 0:
        return False, "probing nft time gates needs root"
    if shutil.which("nft") is None:
        return False, "nft is not installed (Debian: apt-get install nftables)"
    ns = f"cb{secrets.token_hex(3)}-probe"  # a cluster-like label, so `chaosbed down --all` reaps it if orphaned
    try:
        made = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True, timeout=30)
        if made.returncode != 0:
            return False, f"cannot make a scratch namespace to probe nft time gates: {made.stderr.strip()}"
        return _probe_time_gates(ns)
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"probing nft time gates failed: {e}"
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def _probe_time_gates(ns: str) -> tuple[bool, str]:
    hour = 3600 * 10**9
    now = time.time_ns()
    # Bounds that are not multiples of 512 (rounding is part of what is checked), 1 h around now.
    past, future, far = now - hour + 12_345, now + hour + 777, now + 2 * hour + 1
    inside, later, earlier = Window(past, future), Window(future, far), Window(None, past)
    script = _probe_script(inside, later, earlier)
    proc = _run(ns, ["nft", "-f", "-"], script, check=False)
    if proc.returncode != 0:
        return False, (
            f"nft or the kernel refused a `meta time` rule ({(proc.stderr or proc.stdout).strip()[:300]}); "
            "needs nft >= 0.9.3 and a kernel with NFT_META_TIME_NS (5.4+)"
        )
    listing = _run(ns, ["nft", "--debug=netlink", "list", "table", "inet", NFT_TABLE], check=False)
    found = netlink_time_bounds(listing.stdout)
    want = [(op, _round512(v)) for op, v in [("gte", past), ("lt", future), ("gte", future), ("lt", far), ("lt", past)]]
    if not found:
        return False, (
            "`nft --debug=netlink list table` showed no `meta time` comparison (meta load time, byteorder, cmp), "
            f"so how nft encodes a time bound cannot be verified: {(listing.stderr or listing.stdout).strip()[:300]}"
        )
    if found != want:
        ours = ", ".join(f"meta time {_OPS[op]} {nft_time(v)}" for op, v in want)
        return False, (
            f"nft does not store the time bounds nft_time writes: for {ours} it stored {found} ns, not {want} ns "
            "(this nft parses a `meta time` number differently)"
        )
    up = _run(ns, ["ip", "link", "set", "lo", "up"], check=False)
    if up.returncode != 0:
        return False, f"cannot bring lo up in the probe namespace: {up.stderr.strip()}"
    send = "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'probe', ('127.0.0.1', %d))"
    sent = _run(ns, [sys.executable, "-c", send % _PROBE_PORT], check=False)
    if sent.returncode != 0:
        return False, f"cannot send the probe datagram: {sent.stderr.strip()[-300:]}"
    listing = _run(ns, ["nft", "list", "table", "inet", NFT_TABLE], check=False)
    counts = {}
    for line in listing.stdout.splitlines():
        m = _COMMENT.search(line)
        if m and "counter packets" in line:
            counts[m.group(1)] = int(line.split("counter packets")[1].split()[0])
    if counts != {"inside": 1, "later": 0, "earlier": 0}:
        return False, (
            "the kernel did not gate a datagram by CLOCK_REALTIME nanoseconds: sent now, it was counted "
            f"{counts} times by the rules for [now - 1 h, now + 1 h), [now + 1 h, now + 2 h) and [.., now - 1 h) "
            "(wanted 1, 0, 0)"
        )
    return True, ""


@functools.cache
def check_tools() -> None:
    """Raises KernelError naming the missing tool (nft, iptables with u32/NFQUEUE) and how to get it."""
    missing = [t for t in ("nft", "iptables", "iptables-restore") if shutil.which(t) is None]
    if missing:
        raise KernelError(
            f"the chaos engine needs {', '.join(missing)}: run `make setup` (Debian: apt-get install nftables iptables)"
        )

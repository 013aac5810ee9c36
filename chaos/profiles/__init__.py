"""Wire profiles: how a system's datagrams are laid out, so that protocol-aware faults (`discard`) can match and cut
its messages. A cluster's system names its profile (orchestration/systems/); this registry is what the fault engine
can apply:

- `chaosbed`: chaosbed's own wire (node/wire.py): `UNICAST3.ACK(seqno=50)`, ...; chaos/rules.py, the u32 compiler of
  chaos/kernel.py, chaos/nfqueue/spans.py.
- `jgroups-2.12`: JGroups 2.12.2 over UDP: `UNICAST2.DATA(seqno=6)`, `NAKACK.MSG(seqno=7)`, `GMS.VIEW()`, ...; one
  header table (jgroups212.py, the decoder), the rule names and u32 shapes derived from it (jgroups212_rules.py) and
  the handler's span walker (jgroups212_spans.py).
- `jgroups-5`: JGroups 5.3.8 to 5.x over UDP (the stock udp.xml and udp-new.xml stacks): `UNICAST3.DATA(seqno=6)`,
  `NAKACK2.MSG(seqno=7)`, `NAKACK4.ACK()`, `GMS.VIEW()`, ...; the header table and decoder (jgroups5.py), the rule
  names (jgroups5_rules.py), their u32 shapes (jgroups5_u32.py) and the handler's span walker (jgroups5_spans.py).

A profile parses a rule expression against its header table (`parse_match`, a `Match` carrying the profile's name),
lists the names a rule can use (`rule_names`), and renders a receiving namespace's discards into kernel rules
(`render`): what u32 can decide is dropped in the kernel, the rest goes to the namespace's NFQUEUE handler, which
matches the same rules with the profile's span walker (chaos/nfqueue/wires.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from chaos import kernel, rules
from chaos.profiles import jgroups5_rules, jgroups5_u32, jgroups212_rules
from chaos.rules import Match, RuleError


@dataclass(frozen=True)
class Discard:
    """One discard rule on one source as a namespace renders it: `kernel` when it may be decided by the kernel
    alone (action drop, no count, no window), with its probability."""

    source: str
    match: Match
    kernel: bool
    probability: float = 1.0


class WireProfile(Protocol):
    name: str
    description: str

    def parse_match(self, expr: str) -> Match: ...

    def rule_names(self) -> list[str]: ...

    def render(self, ns_rules: kernel.NamespaceRules, discards: list[Discard]) -> None: ...


class ChaosbedProfile:
    name = "chaosbed"
    description = "chaosbed's own wire format (node/wire.py): discard rules such as UNICAST3.ACK(seqno=50)"

    def parse_match(self, expr: str) -> Match:
        return rules.parse_match(expr)

    def rule_names(self) -> list[str]:
        return rules.rule_names()

    def render(self, ns_rules: kernel.NamespaceRules, discards: list[Discard]) -> None:
        """A stateless drop whose match compiles to u32 drops single-message datagrams in the kernel (the handler
        judges batches); anything else goes to the handler whole."""
        for d in discards:
            if d.kernel and kernel.compiles_to_kernel(d.match):
                ns_rules.header_drops.append(kernel.HeaderDrop(d.source, d.match, d.probability))
                ns_rules.queue_batches.add(d.source)
            else:
                ns_rules.queue_ours.add(d.source)


class JGroups212Profile:
    name = jgroups212_rules.WIRE
    description = (
        "JGroups 2.12.2 over UDP (chaos/profiles/jgroups212.py): discard rules in JGroups' names such as "
        "UNICAST2.DATA(seqno=6), NAKACK.MSG(seqno=7), GMS.VIEW()"
    )

    def parse_match(self, expr: str) -> Match:
        return jgroups212_rules.parse_match(expr)

    def rule_names(self) -> list[str]:
        return jgroups212_rules.rule_names()

    def render(self, ns_rules: kernel.NamespaceRules, discards: list[Discard]) -> None:
        """Per source: u32 drops of the datagrams whose one message's first header matches a stateless rule; when
        every rule on the source is such a rule, the other datagrams whose first header has one of their protocols
        are decided too (RETURN: not queued); everything else of JGroups' wire goes to the handler."""
        by_source: dict[str, list[Discard]] = {}
        for d in discards:
            by_source.setdefault(d.source, []).append(d)
        for source, mine in by_source.items():
            decided = source not in ns_rules.queue_all
            for d in mine:
                drops = jgroups212_rules.u32_drop(d.match) if d.kernel else ()
                for tests in drops:
                    ns_rules.u32_rules.append(kernel.U32Rule(source, tuple(tests), "DROP", d.probability))
                decided = decided and bool(drops)
            if decided:
                for decided_tests in jgroups212_rules.u32_decided({d.match.protocol for d in mine}):
                    ns_rules.u32_rules.append(kernel.U32Rule(source, tuple(decided_tests), "RETURN"))
            ns_rules.queue_u32[source] = tuple(jgroups212_rules.u32_datagrams())


class JGroups5Profile:
    name = jgroups5_rules.WIRE
    description = (
        "JGroups 5.3.8 to 5.x over UDP (chaos/profiles/jgroups5.py): discard rules in JGroups' names such as "
        "UNICAST3.DATA(seqno=6), NAKACK2.MSG(seqno=7), NAKACK4.ACK(), GMS.VIEW()"
    )

    def parse_match(self, expr: str) -> Match:
        return jgroups5_rules.parse_match(expr)

    def rule_names(self) -> list[str]:
        return jgroups5_rules.rule_names()

    def render(self, ns_rules: kernel.NamespaceRules, discards: list[Discard]) -> None:
        """Per source: u32 drops of the SINGLE datagrams whose message's first header matches a stateless rule; when
        every rule on the source is such a rule, the other SINGLE datagrams whose first header has one of their
        protocols are decided too (RETURN: not queued); every other datagram of major version 5 goes to the handler,
        which cuts matching messages out of lists and counts what it cannot read."""
        by_source: dict[str, list[Discard]] = {}
        for d in discards:
            by_source.setdefault(d.source, []).append(d)
        for source, mine in by_source.items():
            decided = source not in ns_rules.queue_all
            for d in mine:
                drops = jgroups5_u32.u32_drop(d.match) if d.kernel else ()
                for tests in drops:
                    ns_rules.u32_rules.append(kernel.U32Rule(source, tuple(tests), "DROP", d.probability))
                decided = decided and bool(drops)
            if decided:
                for decided_tests in jgroups5_u32.u32_decided({d.match.protocol for d in mine}):
                    ns_rules.u32_rules.append(kernel.U32Rule(source, tuple(decided_tests), "RETURN"))
            ns_rules.queue_u32[source] = tuple(jgroups5_u32.u32_datagrams())


PROFILES: dict[str, WireProfile] = {p.name: p for p in (ChaosbedProfile(), JGroups212Profile(), JGroups5Profile())}


def profile(name: str) -> WireProfile:
    """The profile of this name (RuleError naming the known ones)."""
    try:
        return PROFILES[name]
    except KeyError:
        raise RuleError(f"unknown wire profile {name!r}; profiles: {', '.join(PROFILES)}") from None


def parse_match(expr: str, wire: str = "chaosbed") -> Match:
    """A discard rule's expression read against a profile's header table (RuleError says what is wrong)."""
    return profile(wire).parse_match(expr)

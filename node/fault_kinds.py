"""The fault kinds, declared once: each kind's keys, their value types (required or optional in a scenario file) and
its category (a network fault: link fault, shaping or discard; a heal; or a member action).

Everything that names kinds derives from this table: scenario validation (orchestration/scenario.py), the fault
tables' normalisation (chaos/), the CLI's descriptions, the history format's validator (node/history_format.py:
faults.jsonl lines carry these kinds and keys) and the checker (analysis/membership.py). It is a declaration only,
standard library and low in the layering (node/ <- chaos/ <- orchestration/; analysis/ reads node/ only): what a key's
value means for a cluster (member names, durations in seconds) is normalised in chaos/, which knows the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Category(Enum):
    """What a fault kind acts on."""

    LINK = "link fault"  # whole packets of links: cut (partition, split) or lost at random (loss)
    SHAPING = "shaping"  # the packets of links delayed, reordered or duplicated
    DISCARD = "discard"  # a protocol-aware rule on the messages of links
    HEAL = "heal"  # ends network faults
    MEMBER = "member action"  # done to a member process (signal, control command)


class ValueType(Enum):
    """The type of a key's value, as a scenario file writes it (faults.jsonl's JSON type: JSON_TYPES)."""

    MEMBERS = "members"  # a member, a list of members, or "*" (every member)
    MEMBER = "member"  # one member's name
    GROUPS = "groups"  # a list of lists of members
    FLAG = "flag"  # true | false
    PROBABILITY = "probability"  # 0..1, or a percentage ("20%")
    DURATION = "duration"  # "30ms", "2s", or a number of seconds
    COUNT = "count"  # a whole number >= 1
    MATCH = "match"  # a scapy-layer message expression over the wire format, e.g. "UNICAST3.ACK(seqno=50)"
    ACTION = "action"  # one of DISCARD_ACTIONS
    PROPERTY = "property"  # "PROTOCOL.PROPERTY", e.g. "nakack2.xmit_interval"
    VALUE = "value"  # any value


# What each value type is in a faults.jsonl line (node/history_format.py's type names): member lists are written out,
# durations as the scenario files write them ("30ms").
JSON_TYPES: dict[ValueType, str] = {
    ValueType.MEMBERS: "list[str]",
    ValueType.MEMBER: "str",
    ValueType.GROUPS: "list[list[str]]",
    ValueType.FLAG: "bool",
    ValueType.PROBABILITY: "number",
    ValueType.DURATION: "str",
    ValueType.COUNT: "int",
    ValueType.MATCH: "str",
    ValueType.ACTION: "str",
    ValueType.PROPERTY: "str",
    ValueType.VALUE: "any",
}

DISCARD_ACTIONS = ("drop", "delay", "duplicate", "reorder")


@dataclass(frozen=True)
class Key:
    """One key of a fault kind. `required`: a scenario file must give it (the fault tables default a missing
    `from`/`to` to every member)."""

    name: str
    type: ValueType
    required: bool = False


@dataclass(frozen=True)
class FaultKind:
    """One fault kind: its keys besides `at` and `kind` (in the order their values are validated within a type),
    its category, what it does, and whether nothing passes its links while it is in force (`cuts`: such a fault
    keeps views apart)."""

    name: str
    category: Category
    keys: tuple[Key, ...]
    meaning: str
    cuts: bool = False

    @property
    def network(self) -> bool:
        """Acts on the network (a fault table's kind), as opposed to a heal or a member action."""
        return self.category in (Category.LINK, Category.SHAPING, Category.DISCARD)

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.keys)

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.keys if k.required)

    def key(self, name: str) -> Key | None:
        return next((k for k in self.keys if k.name == name), None)


def _links(*more: Key, required: bool = True) -> tuple[Key, ...]:
    """from, to (required in a scenario file unless said otherwise), more keys, and `for`."""
    return (
        Key("from", ValueType.MEMBERS, required),
        Key("to", ValueType.MEMBERS, required),
        *more,
        Key("for", ValueType.DURATION),
    )


_PROBABILITY = Key("probability", ValueType.PROBABILITY, True)
_MEMBER = Key("member", ValueType.MEMBER, True)

KINDS: dict[str, FaultKind] = {
    k.name: k
    for k in (
        FaultKind(
            "partition",
            Category.LINK,
            _links(Key("one_way", ValueType.FLAG)),
            "members in `to` stop hearing members in `from` (both ways unless one_way)",
            cuts=True,
        ),
        FaultKind(
            "split",
            Category.LINK,
            (Key("groups", ValueType.GROUPS, True), Key("for", ValueType.DURATION)),
            "full partition into the given groups",
            cuts=True,
        ),
        FaultKind("heal", Category.HEAL, (), "remove every partition, loss and delay rule"),
        FaultKind("loss", Category.LINK, _links(_PROBABILITY), "random drop per link"),
        FaultKind(
            "delay",
            Category.SHAPING,
            _links(Key("delay", ValueType.DURATION, True), Key("jitter", ValueType.DURATION)),
            "added latency per link (netem, or NFQUEUE where netem is absent)",
        ),
        FaultKind("reorder", Category.SHAPING, _links(_PROBABILITY), "packets reordered per link"),
        FaultKind("duplicate", Category.SHAPING, _links(_PROBABILITY), "packets duplicated per link"),
        FaultKind(
            "discard",
            Category.DISCARD,
            (
                Key("match", ValueType.MATCH, True),
                *_links(
                    Key("count", ValueType.COUNT),
                    Key("probability", ValueType.PROBABILITY),
                    Key("action", ValueType.ACTION),
                    Key("delay", ValueType.DURATION),
                    required=False,
                ),
            ),
            "protocol-aware rule on the messages of links: drop, delay, duplicate or reorder matching messages",
        ),
        FaultKind("kill", Category.MEMBER, (_MEMBER,), "SIGKILL the member"),
        FaultKind(
            "restart",
            Category.MEMBER,
            (_MEMBER,),
            "start a killed member again (new incarnation); it resumes its share of the workload",
        ),
        FaultKind("pause", Category.MEMBER, (_MEMBER,), "SIGSTOP the member"),
        FaultKind("resume", Category.MEMBER, (_MEMBER,), "SIGCONT the member"),
        FaultKind(
            "close-connection",
            Category.MEMBER,
            (_MEMBER, Key("peer", ValueType.MEMBER, True)),
            "the member closes its unicast connection to peer unilaterally",
        ),
        FaultKind(
            "set",
            Category.MEMBER,
            (_MEMBER, Key("property", ValueType.PROPERTY, True), Key("value", ValueType.VALUE, True)),
            "change a protocol property at run time (e.g. nakack2.xmit_interval)",
        ),
        FaultKind("leave", Category.MEMBER, (_MEMBER,), "the member leaves the group gracefully"),
    )
}

NETWORK = tuple(name for name, k in KINDS.items() if k.network)  # the kinds a fault table takes
SHAPING = tuple(name for name, k in KINDS.items() if k.category is Category.SHAPING)
CUTS = tuple(name for name, k in KINDS.items() if k.cuts)
MEMBER_ACTIONS = tuple(name for name, k in KINDS.items() if k.category is Category.MEMBER)

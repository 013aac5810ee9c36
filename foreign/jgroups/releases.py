"""JGroups releases as an axis (DESIGN.md principle 13): a release's version, the Java it needs, the member program
(API generation) that runs it, and which of the 5.x member's stacks it has. Facts from JGroups' sources at the release
tags (docs/foreign/jgroups5.md, "Releases"); the jars themselves: foreign/jgroups/maven.py.

A release is written as in a scenario, `cluster.version = "5.5.6"`; "5.5.6.Final" is the same release. Other
qualifiers (Alpha, Beta, CR) are kept as written: `5.5.0.CR1`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

GROUP, ARTIFACT = "org.jgroups", "jgroups"
# What the project's own files use (systems' defaults, scenarios): `make setup` fetches these.
NEWEST = "5.5.6"  # the newest 5.x release
NOXMIT = "5.4.3"  # the newest release whose NAKACK2 still runs without retransmission (5.4.4 refuses it)
# The 3.x releases: the one the 3.x member is compiled against (the oldest the project uses), and the newest 3.x
# (3.6.20: UNICAST2 is gone in 4.0).
OLDEST3 = "3.2.7"
NEWEST3 = "3.6.20"
# The catalogue's real-release pairs (scenarios/bugs/, [bug.real]) and the ranges the bisect tests search
# (tests/netns/test_bisect.py): 5.4.9 is tagged but Maven Central does not serve it; JGRP-2678's pair 5.2.12/5.2.13.
CATALOGUE_RELEASES = ("5.2.12", "5.2.13", "5.4.4", "5.4.5", "5.4.6", "5.4.7", "5.4.8", "5.4.10", "5.4.11")
# The oldest release of each stack's span (STACK_SPANS), which tests/foreign/test_jgroups5_stack_releases.py starts.
STACK_TEST_RELEASES = ("5.2.7", "5.4.0")
# The 3.x releases of the catalogue: JGRP-1563 (UNICAST2) on 3.2.5 against 3.2.6 (the fix's backport; 3.3.0 has it
# too), JGRP-1874 (UNICAST3) on 3.5.0 against 3.6.0, the build release (docs/bugs.md), and the ranges the bisect tests
# search (3.2.2..3.2.7, 3.5.0..3.6.2).
CATALOGUE3_RELEASES: tuple[str, ...] = ("3.2.2", "3.2.3", "3.2.5", "3.2.6", OLDEST3, "3.3.0")
CATALOGUE3_RELEASES += ("3.5.0", "3.5.1", "3.6.0", "3.6.1", "3.6.2")
PROJECT_RELEASES = (NEWEST, NOXMIT, *CATALOGUE_RELEASES, *STACK_TEST_RELEASES, *CATALOGUE3_RELEASES)
# The member programs, the releases each runs and what it runs on (`chaosbed systems`; docs/foreign/jgroups5.md).
MEMBER_PROGRAMS = (
    (
        "chaosbed.jgroups5",
        "5.2.7+ (its stacks' spans; one build, against 5.4.3's API)",
        "Java 11+ for 5.2-5.4, Java 17+ for 5.5 (the jar's own need)",
    ),
    (
        "chaosbed.jgroups3",
        "3.1.0-3.6.20 (its stacks' protocols: NAKACK2 and MERGE3 from 3.1, UNICAST3 from 3.3; one build, against "
        "3.2.7's API; run on 3.2.7, 3.3.0, 3.5.0, 3.6.0)",
        "Java 11+ (the member's class files; the 3.x jars, built for Java 6-8, run on 17)",
    ),
    ("chaosbed.jgroups", "2.12.2 (Debian's libjgroups-java)", "Java 17 (Debian's default JDK)"),
)
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:\.([A-Za-z][A-Za-z0-9]*))?")


class ReleaseError(ValueError):
    """Not a release this project can run: the message says why."""


@total_ordering
@dataclass(frozen=True)
class Release:
    major: int
    minor: int
    micro: int
    qualifier: str = "Final"

    @classmethod
    def parse(cls, text: str) -> Release:
        m = _VERSION.fullmatch(text.strip()) if isinstance(text, str) else None
        if m is None:
            raise ReleaseError(f"{text!r} is not a JGroups release: write it as 5.5.6 (or 5.5.6.Final)")
        major, minor, micro, qualifier = m.groups()
        return cls(int(major), int(minor), int(micro), qualifier or "Final")

    @property
    def version(self) -> str:
        """As a scenario writes it: 5.5.6 for a Final, else 5.5.0.CR1."""
        base = f"{self.major}.{self.minor}.{self.micro}"
        return base if self.qualifier == "Final" else f"{base}.{self.qualifier}"

    @property
    def maven_version(self) -> str:
        """As Maven Central names it: 5.5.6.Final."""
        return f"{self.major}.{self.minor}.{self.micro}.{self.qualifier}"

    @property
    def coordinates(self) -> str:
        return f"{GROUP}:{ARTIFACT}:{self.maven_version}"

    @property
    def java(self) -> int:
        """The least Java it runs on: 17 from 5.5 (JGRP-2911), 11 for 5.0-5.4 and for 3.x (the 3.x member's class
        files; the jars themselves need only Java 6-8)."""
        return 17 if (self.major, self.minor) >= (5, 5) else 11

    @property
    def generation(self) -> str:
        """The member program (API generation) that runs it: "5" (chaosbed.jgroups5), "3" (chaosbed.jgroups3, from
        3.1: NAKACK2 and MERGE3) or "2.12" (chaosbed.jgroups)."""
        if self.major == 5:
            return "5"
        if self.major == 3 and self.minor >= 1:
            return "3"
        if (self.major, self.minor) == (2, 12):
            return "2.12"
        raise ReleaseError(
            f"JGroups {self.version}: chaosbed has member programs for 5.x, 3.1-3.6 (and Debian's 2.12.2), not "
            f"{self.version}"
        )

    def _key(self) -> tuple[int, int, int, str]:
        return (self.major, self.minor, self.micro, self.qualifier)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Release):
            return NotImplemented
        return self._key() < other._key()

    def __str__(self) -> str:
        return self.version


@dataclass(frozen=True)
class Span:
    """The releases that have a feature: from `first` up to `last` (None: every later one)."""

    first: str
    last: str | None = None
    why: str = ""

    def has(self, r: Release) -> bool:
        if r < Release.parse(self.first):
            return False
        return self.last is None or r <= Release.parse(self.last)

    def __str__(self) -> str:
        return f"{self.first}+" if self.last is None else f"{self.first}-{self.last}"


# The 5.x member's stacks (foreign/jgroups/stacks5/) by the releases that start them: every attribute of each stack
# checked against the sources at every tag of its span, and each started on the span's oldest and newest release
# (tests/foreign/test_jgroups5_stack_releases.py; docs/foreign/jgroups5.md, "Releases").
STACK_SPANS = {
    "udp": Span("5.2.7", why='its bundler, PerDestinationBundler (bundler_type="pd"), arrived in 5.2.7 (JGRP-2639)'),
    "tcp": Span("5.2.7", why='its bundler, PerDestinationBundler (bundler_type="pd"), arrived in 5.2.7 (JGRP-2639)'),
    "nakack4": Span("5.4.0", why="NAKACK4 and UNICAST4 arrived in 5.4.0"),
    "tcp-noxmit": Span("5.2.13", NOXMIT, why="NAKACK2 runs with xmit_interval=0 in 5.2.13-5.4.3 (JGRP-2675, 2866)"),
}
# The 3.x member's stacks (foreign/jgroups/stacks3/).
STACK_SPANS.update(
    {
        "unicast2-udp": Span("3.1.0", NEWEST3, why="NAKACK2 and MERGE3 arrived in 3.1.0, UNICAST2 is gone in 4.0"),
        "unicast3-udp": Span("3.3.0", NEWEST3, why="UNICAST3 arrived in 3.3.0; 4.x and later: the 5.x member"),
    }
)


def stack_span(stack: str) -> Span:
    """The releases a stack of the 5.x member runs on (its -fast variant: the same)."""
    return STACK_SPANS[stack.removesuffix("-fast")]


def check_stack(release: Release, stack: str) -> None:
    """ReleaseError when the release lacks what the stack needs."""
    if stack.endswith(".xml"):
        return  # a user's own file: JGroups says at start what it lacks
    span = stack_span(stack)
    if not span.has(release):
        raise ReleaseError(f"JGroups {release} cannot run stack {stack!r}: it needs a release in {span} ({span.why})")

"""The JGroups 3 member program (src/chaosbed/jgroups3/, with the shared src/chaosbed/member/): one build for every
3.x release from 3.1. It is compiled by `make jgroups3` with `--release 11` against the API of the oldest release the
project uses (3.2.7) and reads the reliability headers (UNICAST2, UNICAST3, NAKACK2) by protocol name through their
public accessors (Headers.java), so the same classes run with any 3.1-3.6 jar on the classpath, on Java 11+ (the
machine's 17). Stacks: stacks3/*.xml, copied next to the classes. docs/foreign/jgroups3.md.

One member:

    java -XX:+UseSerialGC -Xmx256m -Djava.net.preferIPv4Stack=true -cp JAR:CLASSES chaosbed.jgroups3.Member CONFIG
"""

from __future__ import annotations

import os
from pathlib import Path

from foreign.jgroups import REPO
from foreign.jgroups.jgroups5 import build_member, member_command, member_mounts
from foreign.jgroups.jgroups5 import missing as missing5
from foreign.jgroups.maven import jar_path
from foreign.jgroups.releases import OLDEST3, Release

CLASSES = REPO / "build" / "jgroups3" / "classes"
STAMP = CLASSES / ".stamp"  # written by `make jgroups3` after a complete build
MAIN = "chaosbed.jgroups3.Member"
BUILD_RELEASE = OLDEST3  # the API the classes are compiled against (the Makefile's JGROUPS3_BUILD_RELEASE)
STACKS = ("unicast3-udp", "unicast3-udp-fast", "unicast2-udp", "unicast2-udp-fast")


def missing(release: Release) -> str | None:
    """What this machine lacks to run the release's member, and how to get it (None: nothing). Does not fetch."""
    return missing5(release)  # the same needs: a javac, a Java new enough, the verified jar


def build() -> Path:
    """Builds the member if its sources or stacks changed (`make jgroups3`, quick when up to date; it needs the jar of
    BUILD_RELEASE, fetched here on first use); returns the classes folder."""
    return build_member("jgroups3", BUILD_RELEASE, CLASSES, STAMP)


def classpath(release: Release) -> str:
    return f"{jar_path(release)}{os.pathsep}{CLASSES}"


def system_command(release: Release) -> tuple[str, ...]:
    """The member's argv as a system's command template, for this release's jar (`{config}` holds the stack)."""
    return member_command(release, CLASSES, MAIN)


def docker_mounts(release: Release) -> tuple[str, ...]:
    """Host folders a container needs to run the member: the JDK, the jar's folder, the classes."""
    return member_mounts(release, CLASSES)

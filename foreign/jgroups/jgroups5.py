"""The JGroups 5 member program (src/chaosbed/jgroups5/, with the shared src/chaosbed/member/): one build for every
5.x release. It is compiled by `make jgroups5` with `--release 11` against the API of the oldest release the project
uses (5.4.3) and reads the reliability headers by protocol name through their public accessors (Headers.java), so the
same classes run with any 5.x jar on the classpath: on Java 11+ for 5.0-5.4, Java 17+ for 5.5 (the jar's own need).
Stacks: stacks5/*.xml, copied next to the classes. docs/foreign/jgroups5.md.

One member:

    java -XX:+UseSerialGC -Xmx256m -Djava.net.preferIPv4Stack=true -cp JAR:CLASSES chaosbed.jgroups5.Member CONFIG
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from foreign.jgroups import JVM_OPTIONS, REPO, java_binary
from foreign.jgroups.maven import JarError, fetch, jar_path, verified
from foreign.jgroups.releases import NOXMIT, Release, ReleaseError

CLASSES = REPO / "build" / "jgroups5" / "classes"
STAMP = CLASSES / ".stamp"  # written by `make jgroups5` after a complete build
MAIN = "chaosbed.jgroups5.Member"
BUILD_RELEASE = NOXMIT  # the API the classes are compiled against (the Makefile's JGROUPS5_BUILD_RELEASE)
STACKS = ("udp", "udp-fast", "tcp", "tcp-fast", "nakack4", "nakack4-fast", "tcp-noxmit", "tcp-noxmit-fast")


class BuildError(RuntimeError):
    """The member could not be built (the message has make's and javac's output)."""


@lru_cache(maxsize=4)
def java_major(java: str) -> int | None:
    """The feature version of a JVM (17 for "17.0.15"), None if it does not run."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if m is None:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def missing(release: Release) -> str | None:
    """What this machine lacks to run the release's member, and how to get it (None: nothing). Does not fetch."""
    java = java_binary()
    if shutil.which("javac") is None:
        return "no javac on PATH: install a JDK 17 (apt-get install openjdk-17-jdk-headless; make setup does as root)"
    have = java_major(java)
    if have is None or have < release.java:
        return f"JGroups {release} needs Java {release.java}+, but {java} is Java {have or 'unknown'}"
    if not verified(release):
        return f"the jar of JGroups {release} is not in Maven's local repository ({jar_path(release)})"
    return None


def build() -> Path:
    """Builds the member if its sources or stacks changed (`make jgroups5`, quick when up to date; it needs the jar of
    BUILD_RELEASE, fetched here on first use); returns the classes folder."""
    return build_member("jgroups5", BUILD_RELEASE, CLASSES, STAMP)


def build_member(target: str, build_release: str, classes: Path, stamp: Path) -> Path:
    """`make TARGET` (a JGroups member program: jgroups5, jgroups3) against the jar of build_release, fetched on first
    use, one build at a time; returns the classes folder."""
    generation = target.removeprefix("jgroups")
    try:
        fetch(Release.parse(build_release))
    except (JarError, ReleaseError) as e:
        raise BuildError(f"the JGroups {generation} member is compiled against JGroups {build_release}: {e}") from None
    classes.parent.mkdir(parents=True, exist_ok=True)
    with open(classes.parent / ".lock", "a") as lock:  # one build at a time (pytest-xdist workers)
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = subprocess.run(
            ["make", "--no-print-directory", "-C", str(REPO), target,
             f"JGROUPS{generation}_BUILD_JAR={jar_path(Release.parse(build_release))}"],
            capture_output=True, text=True,
        )  # fmt: skip
    if proc.returncode != 0 or not stamp.exists():
        raise BuildError(f"make {target} failed:\n{proc.stdout}{proc.stderr}")
    return classes


def classpath(release: Release) -> str:
    return f"{jar_path(release)}{os.pathsep}{CLASSES}"


def system_command(release: Release) -> tuple[str, ...]:
    """The member's argv as a system's command template, for this release's jar (`{config}` holds the stack)."""
    return member_command(release, CLASSES, MAIN)


def member_command(release: Release, classes: Path, main: str) -> tuple[str, ...]:
    """A JGroups member program's argv: the release's jar and the program's classes on the classpath."""
    return (java_binary(), *JVM_OPTIONS, "-cp", f"{jar_path(release)}{os.pathsep}{classes}", main, "{config}")


def docker_mounts(release: Release) -> tuple[str, ...]:
    """Host folders a container needs to run the member: the JDK (as for 2.12), the jar's folder, the classes."""
    return member_mounts(release, CLASSES)


def member_mounts(release: Release, classes: Path) -> tuple[str, ...]:
    """Host folders a container needs to run a JGroups member program: the JDK, the jar's folder, its classes."""
    from foreign.jgroups import jdk_mounts

    return tuple(dict.fromkeys([*jdk_mounts(), str(jar_path(release).parent), str(classes)]))

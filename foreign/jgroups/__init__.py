"""The real JGroups as chaosbed members, one folder for every release and API generation (docs/foreign/jgroups.md,
docs/foreign/jgroups5.md): the releases (releases.py) and their jars from Maven Central (maven.py), the 5.x member
(jgroups5.py), and here the JGroups 2.12.2 jar (Debian's libjgroups-java): where its pieces are, whether this machine
can run it, how to build it and the command line that starts one member.

The member is a small Java program (src/chaosbed/jgroups/) compiled by `make jgroups` into build/jgroups/classes,
next to its protocol stacks (stacks/*.xml, copied as classpath resources). One member:

    java -XX:+UseSerialGC -Djava.net.preferIPv4Stack=true -cp JAR:CLASSES chaosbed.jgroups.Member [--stack S] CONFIG

with the control token in the environment (CHAOSBED_TOKEN) or in CONFIG (`member_command` builds the argv).
`system_command()` is the same argv as a chaosbed system's command template (orchestration/systems/: the systems
jgroups-2.12 and jgroups-2.12-unicast), with the JVM's real path so that it also runs in a container that mounts the
host's JDK, jar and classes read-only (`docker_mounts()`).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SOURCES = HERE / "src"
STACKS_DIR = HERE / "stacks"
CLASSES = REPO / "build" / "jgroups" / "classes"
STAMP = CLASSES / ".stamp"  # written by `make jgroups` after a complete build
MAIN = "chaosbed.jgroups.Member"
DECODER = "chaosbed.jgroups.Decode"
DEFAULT_JAR = Path("/usr/share/java/jgroups.jar")
JAR_ENV = "CHAOSBED_JGROUPS_JAR"  # another jgroups 2.12 jar than Debian's
STACKS = ("unicast2", "unicast", "unicast2-fast", "unicast-fast")
JVM_OPTIONS = ("-XX:+UseSerialGC", "-Xmx256m", "-Djava.net.preferIPv4Stack=true")


def jar() -> Path:
    """The JGroups 2.12 jar: $CHAOSBED_JGROUPS_JAR, else Debian's."""
    return Path(os.environ.get(JAR_ENV) or DEFAULT_JAR)


def missing() -> str | None:
    """What this machine lacks to build and run the member, and how to get it (None: nothing)."""
    if not jar().is_file():
        return f"the JGroups 2.12 jar {jar()} is missing: apt-get install libjgroups-java (or set {JAR_ENV})"
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH: install a JDK 17 (apt-get install openjdk-17-jdk-headless)"
    return None


class BuildError(RuntimeError):
    """The member could not be built (the message has make's and javac's output)."""


def build() -> Path:
    """Builds the member if its sources or stacks changed (`make jgroups`, idempotent and quick when up to date);
    returns the classes folder."""
    problem = missing()
    if problem:
        raise BuildError(problem)
    CLASSES.parent.mkdir(parents=True, exist_ok=True)
    with open(CLASSES.parent / ".lock", "a") as lock:  # one build at a time (pytest-xdist workers)
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = subprocess.run(
            ["make", "--no-print-directory", "-C", str(REPO), "jgroups", f"JGROUPS_JAR={jar()}"],
            capture_output=True,
            text=True,
        )
    if proc.returncode != 0 or not STAMP.exists():
        raise BuildError(f"make jgroups failed:\n{proc.stdout}{proc.stderr}")
    return CLASSES


def java_binary() -> str:
    """The JVM's real path (not /usr/bin/java's chain of links, which a container does not have), or "java"."""
    found = shutil.which("java")
    return os.path.realpath(found) if found else "java"


def jdk_mounts() -> list[str]:
    """The JDK's folder and its /etc configuration (which its conf/ links to): what a container needs to run java."""
    home = Path(java_binary()).parent.parent
    out = [str(home)] if home.is_dir() else []
    conf = home / "conf"
    if conf.is_dir():
        out += sorted({str(Path(os.path.realpath(c)).parent) for c in conf.iterdir() if c.is_symlink()})
    return out


def docker_mounts() -> tuple[str, ...]:
    """Host folders a container needs to run the member: the JDK, the jar's folder and the classes."""
    return tuple(dict.fromkeys([*jdk_mounts(), str(jar().resolve().parent), str(CLASSES)]))


def system_command() -> tuple[str, ...]:
    """The member's argv as a system's command template: `{config}` is the config file chaosbed writes, whose
    `stack` key names the stack."""
    return (java_binary(), *JVM_OPTIONS, "-cp", f"{jar()}{os.pathsep}{CLASSES}", MAIN, "{config}")


def member_command(config: str | os.PathLike[str], *, stack: str | None = None) -> list[str]:
    """The argv that starts one member with this config file (a stack given here overrides the config's `stack`).
    The control token goes in the environment as CHAOSBED_TOKEN (or in the config), never on the command line."""
    argv = ["java", *JVM_OPTIONS, "-cp", f"{jar()}{os.pathsep}{CLASSES}", MAIN]
    if stack is not None:
        argv += ["--stack", stack]
    return [*argv, str(config)]

"""The releases Maven Central serves of org.jgroups:jgroups, in release order: its `maven-metadata.xml`, which Maven
itself fetches (`mvn dependency:get` of the RELEASE metaversion: Maven downloads the artifact's metadata to resolve
it, and keeps it in its local repository as `maven-metadata-<repository id>.xml`), cached there and refreshed when
older than a day. Offline, the cached list is used; with no cached list, RegistryError says how to get one.

    python -m foreign.jgroups.registry [--refresh] [--all] [A..B]    # the served releases (Finals unless --all)

`chaosbed bisect` takes its candidate releases from here (docs/bisect.md).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from foreign.jgroups.maven import FETCH_TIMEOUT, M2_ENV, local_repository
from foreign.jgroups.releases import ARTIFACT, GROUP, Release, ReleaseError

MAX_AGE_S = 24 * 3600.0  # a cached list older than this is fetched again (when Maven Central can be reached)
_VERSION_TAG = re.compile(r"<version>\s*([^<\s]+)\s*</version>")


class RegistryError(RuntimeError):
    """The list of releases cannot be had, or a range is not in it: the message says why and what to do."""


def artifact_folder() -> Path:
    return local_repository() / GROUP.replace(".", "/") / ARTIFACT


def cached_metadata() -> Path | None:
    """The newest maven-metadata-*.xml Maven keeps for the artifact (None: there is none)."""
    found = sorted(artifact_folder().glob("maven-metadata-*.xml"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def refresh_command() -> list[str]:
    argv = ["mvn", "-B", "-q", "-U", "dependency:get", f"-Dartifact={GROUP}:{ARTIFACT}:RELEASE", "-Dtransitive=false"]
    if os.environ.get(M2_ENV):
        argv.append(f"-Dmaven.repo.local={local_repository()}")
    return argv


def refresh() -> Path:
    """Maven fetches the artifact's metadata again (and the newest release's jar, verified like any other)."""
    try:
        proc = subprocess.run(refresh_command(), capture_output=True, text=True, timeout=FETCH_TIMEOUT)
    except FileNotFoundError:
        raise RegistryError("there is no `mvn` to fetch the list of JGroups releases: apt-get install maven") from None
    except subprocess.TimeoutExpired:
        raise RegistryError(f"fetching the list of JGroups releases took over {FETCH_TIMEOUT:g}s") from None
    path = cached_metadata()
    if proc.returncode != 0 or path is None:
        detail = next((ln for ln in (proc.stdout + proc.stderr).splitlines() if "ERROR" in ln), "no output")
        raise RegistryError(f"Maven could not fetch the list of JGroups releases ({detail.strip()})")
    path.touch()  # its age is the age of what Maven last checked
    return path


def parse_versions(text: str) -> list[Release]:
    """The releases a maven-metadata.xml lists, in release order, without duplicates ("3.6.4" and "3.6.4.Final" are
    one release); versions that are not releases in JGroups' scheme are left out."""
    found: set[Release] = set()
    for v in _VERSION_TAG.findall(text):
        try:
            found.add(Release.parse(v))
        except ReleaseError:
            continue
    return sorted(found)


def served(*, refresh_now: bool = False, max_age: float = MAX_AGE_S) -> list[Release]:
    """Every release Maven Central serves, in release order: the cached list, fetched again when it is older than
    `max_age` (or asked); offline, the cached one; RegistryError when there is none."""
    path = cached_metadata()
    stale = path is None or time.time() - path.stat().st_mtime > max_age
    if refresh_now or stale:
        try:
            path = refresh()
        except RegistryError as e:
            if path is None:
                raise RegistryError(
                    f"{e}; the list is kept in Maven's local repository once fetched: run "
                    "`python -m foreign.jgroups.registry --refresh` on a machine that reaches Maven Central"
                ) from None
    assert path is not None
    return parse_versions(path.read_text(errors="replace"))


def between(releases: list[Release], first: str, last: str, *, finals_only: bool = True) -> list[Release]:
    """The releases from `first` to `last` (both included, both in the list), Finals only unless asked."""
    a, b = Release.parse(first), Release.parse(last)
    if b < a:
        raise RegistryError(f"--versions {first}..{last}: {last} comes before {first}; write the older one first")
    for end in (a, b):
        if end not in releases:
            near = [r.version for r in releases if (r.major, r.minor) == (end.major, end.minor)]
            hint = f"; served {end.major}.{end.minor}.x: {', '.join(near)}" if near else ""
            raise RegistryError(f"JGroups {end} is not a release Maven Central serves{hint}")
    chosen = [r for r in releases if a <= r <= b and (r.qualifier == "Final" or not finals_only or r in (a, b))]
    return chosen


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m foreign.jgroups.registry", description=__doc__.split("\n\n")[0])
    ap.add_argument("range", nargs="?", help="A..B: only the releases between A and B")
    ap.add_argument("--refresh", action="store_true", help="fetch the list again even if the cached one is recent")
    ap.add_argument("--all", action="store_true", help="Alphas, Betas and CRs too")
    args = ap.parse_args(argv)
    try:
        releases = served(refresh_now=args.refresh)
        if args.range:
            first, sep, last = args.range.partition("..")
            if not sep:
                raise RegistryError(f"{args.range!r}: write a range as A..B, e.g. 5.4.0..5.4.12")
            releases = between(releases, first, last, finals_only=not args.all)
        elif not args.all:
            releases = [r for r in releases if r.qualifier == "Final"]
    except (RegistryError, ReleaseError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(" ".join(r.version for r in releases))
    return 0


if __name__ == "__main__":
    sys.exit(main())

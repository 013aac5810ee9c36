"""JGroups jars from Maven Central, through Maven itself (DESIGN.md principle 13): fetched by `mvn dependency:get`
with strict checksums (`-C`: a jar whose checksum does not match the registry's is refused), cached in Maven's local
repository (~/.m2/repository, or where settings.xml's localRepository or $CHAOSBED_M2_REPO says), never in the
repository. `make setup` fetches the releases the project's own files use; any other is fetched on first use.

    python -m foreign.jgroups.maven fetch [--project] [VERSION ...]   # what `make setup` runs
    python -m foreign.jgroups.maven where VERSION                     # the jar's path, or why it is not there
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from foreign.jgroups.releases import ARTIFACT, GROUP, PROJECT_RELEASES, Release, ReleaseError

M2_ENV = "CHAOSBED_M2_REPO"
FETCH_TIMEOUT = 300.0  # seconds for one `mvn dependency:get` (its first run also fetches the plugin itself)
FETCH_JOBS = 4  # Maven runs at once after the first (each mostly waits on the registry)


class JarError(RuntimeError):
    """A release's jar is not on this machine and cannot be fetched: the message names the release and what to do."""


def local_repository() -> Path:
    """Maven's local repository: $CHAOSBED_M2_REPO, else settings.xml's <localRepository>, else ~/.m2/repository."""
    if os.environ.get(M2_ENV):
        return Path(os.environ[M2_ENV])
    settings = Path.home() / ".m2" / "settings.xml"
    try:
        found = re.search(r"<localRepository>\s*([^<]+?)\s*</localRepository>", settings.read_text())
    except OSError:
        found = None
    if found and "${" not in found.group(1):
        return Path(found.group(1)).expanduser()
    return Path.home() / ".m2" / "repository"


def jar_path(release: Release) -> Path:
    """Where Maven keeps the release's jar (whether or not it is there)."""
    v = release.maven_version
    return local_repository() / GROUP.replace(".", "/") / ARTIFACT / v / f"{ARTIFACT}-{v}.jar"


def verified(release: Release) -> bool:
    """The jar is there and matches the SHA-1 Maven fetched with it (a jar without its .sha1 counts as there)."""
    jar = jar_path(release)
    if not jar.is_file():
        return False
    sha = jar.with_name(jar.name + ".sha1")
    try:
        want = sha.read_text().split()[0].strip().lower()
    except (OSError, IndexError):
        return True
    return hashlib.sha1(jar.read_bytes()).hexdigest() == want


def fetch_command(release: Release) -> list[str]:
    """The Maven command that fetches the jar (strict checksums, no dependencies: the jar needs none)."""
    argv = ["mvn", "-B", "-q", "-C", "-U", "dependency:get", f"-Dartifact={release.coordinates}", "-Dtransitive=false"]
    if os.environ.get(M2_ENV):
        argv.append(f"-Dmaven.repo.local={local_repository()}")
    return argv


def how_to_fetch(release: Release) -> str:
    return f"`python -m foreign.jgroups.maven fetch {release}` (or `make setup`, which fetches the project's releases)"


def fetch(release: Release) -> Path:
    """The jar of the release, fetched with Maven if it is not here yet; JarError saying why it cannot be had."""
    return fetch_many([release])[release]


def fetch_many(releases: list[Release], jobs: int = FETCH_JOBS) -> dict[Release, Path]:
    """The jars of the releases, those not here yet fetched with Maven: the first alone (its first run also fetches
    Maven's dependency plugin), the rest `jobs` at a time, each into its own folder of the local repository (Maven
    3.8 does not lock it), all under one lock against other processes' fetches. JarError for the first that failed."""
    wanted = list(dict.fromkeys(releases))
    if all(verified(r) for r in wanted):
        return {r: jar_path(r) for r in wanted}
    if shutil.which("mvn") is None:
        r = next(r for r in wanted if not verified(r))
        raise JarError(
            f"JGroups {r} is not on this machine ({jar_path(r)}) and there is no `mvn` to fetch it: "
            "apt-get install maven (make setup does as root), then " + how_to_fetch(r)
        )
    lock_dir = local_repository()
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / ".chaosbed-fetch.lock", "a") as lock:  # one batch at a time (pytest-xdist workers)
        fcntl.flock(lock, fcntl.LOCK_EX)
        missing = [r for r in wanted if not verified(r)]
        errors = [e for e in [_fetch_one(missing[0])] if e] if missing else []
        if len(missing) > 1 and not errors:
            with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
                errors += [e for e in pool.map(_fetch_one, missing[1:]) if e]
    if errors:
        raise JarError(errors[0])
    return {r: jar_path(r) for r in wanted}


def _fetch_one(release: Release) -> str | None:
    """Runs Maven for one release: None when its verified jar is here afterwards, else why not."""
    try:
        proc = subprocess.run(fetch_command(release), capture_output=True, text=True, timeout=FETCH_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"fetching JGroups {release} from Maven Central took over {FETCH_TIMEOUT:g}s"
    if proc.returncode == 0 and verified(release):
        return None
    return _failure(release, proc.stdout + proc.stderr)


def _failure(release: Release, output: str) -> str:
    """What Maven's output says went wrong, in one sentence with what to do."""
    where = f"JGroups {release} ({release.coordinates})"
    if re.search(r"Could not find artifact|was not found in", output):
        return (
            f"{where}: Maven Central does not have this release; pick another (`chaosbed systems` shows the releases "
            "on this machine; any other is fetched on first use)"
        )
    if re.search(r"[Cc]hecksum", output):
        return f"{where}: Maven refused the jar, its checksum does not match the registry's; try again later"
    if re.search(r"Could not transfer|Unknown host|Network is unreachable|Connection refused|offline", output):
        return (
            f"{where} is not on this machine and Maven Central cannot be reached (offline?); on a machine that "
            f"reaches it, run {how_to_fetch(release)}"
        )
    errors = [ln.removeprefix("[ERROR] ").strip() for ln in output.splitlines() if ln.startswith("[ERROR]")]
    detail = next((e for e in errors if e), output.strip().splitlines()[-1:] or ["no output"])
    return f"{where} could not be fetched with Maven: {detail}; run {how_to_fetch(release)} to see why"


def release_jar(version: str) -> Path:
    """The jar of a release given as a scenario writes it ("5.5.6"), fetched on first use (JarError, ReleaseError)."""
    return fetch(Release.parse(version))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m foreign.jgroups.maven", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="fetch releases' jars (verified, cached in Maven's local repository)")
    f.add_argument("versions", nargs="*")
    f.add_argument("--project", action="store_true", help="the releases the project's own files use")
    w = sub.add_parser("where", help="the jar's path, if it is on this machine")
    w.add_argument("version")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "where":
            r = Release.parse(args.version)
            if not verified(r):
                print(f"JGroups {r} is not on this machine: {how_to_fetch(r)}", file=sys.stderr)
                return 1
            print(jar_path(r))
            return 0
        versions = list(args.versions) + (list(PROJECT_RELEASES) if args.project or not args.versions else [])
        releases = [Release.parse(v) for v in dict.fromkeys(versions)]
        had = {r for r in releases if verified(r)}
        for r, path in fetch_many(releases).items():
            print(f"JGroups {r}: {path}" + (" (cached)" if r in had else " (fetched, checksum verified)"))
        return 0
    except (JarError, ReleaseError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

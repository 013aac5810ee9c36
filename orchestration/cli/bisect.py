"""`chaosbed bisect FILE --versions A..B`: the first release between A and B (Maven Central's list, in release order)
whose failure rate on FILE differs from A's, by binary search on probes of N runs (docs/bisect.md). Exit 0: a
boundary found (bisect.json says whether it is sharp); 1: both ends give the same outcome; 2: could not run or
interrupted (what was found is kept)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from orchestration.cli.options import console, master_option, spark_option, spark_target

BACKENDS = click.Choice(["netns", "docker"])


def _fail(msg: str) -> None:
    click.echo(f"error: {msg}", err=True)
    sys.exit(2)


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--versions", "span", required=True, metavar="A..B", help="the releases from A to B, e.g. 5.4.0..5.4.12")
@click.option("--runs", type=click.IntRange(1, 100), default=5, show_default=True, help="runs per probe")
@click.option("--backend", type=BACKENDS, default="netns", show_default=True)
@click.option("--violates", default=None, metavar="CHECKS", help="a run fails when it violates all of these (a,b)")
@click.option("-j", "--jobs", type=click.IntRange(1, 16), default=1, show_default=True, help="runs of a probe at once")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None, help="default: runs/bisect-*")
@click.option("--pre-releases", is_flag=True, help="Alphas, Betas and CRs too (default: .Final releases only)")
@click.option("--refresh", is_flag=True, help="fetch Maven Central's list of releases again")
@master_option
@spark_option
def bisect(
    file: Path,
    span: str,
    runs: int,
    backend: str,
    violates: str | None,
    jobs: int,
    out: Path | None,
    pre_releases: bool,
    refresh: bool,
    master: str | None,
    spark: str | None,
) -> None:
    """Find the release where FILE's outcome changes: exit 0 a boundary found, 1 none, 2 could not run."""
    from orchestration.bisect.probe import Interrupted, ProbeError, Target
    from orchestration.bisect.report import bisect_doc, probe_line, write
    from orchestration.bisect.search import Search

    target = spark_target(spark, master)
    versions = _versions(span, pre_releases, refresh)
    system, checks = _system_and_checks(file, violates)
    if backend == "netns":
        _need_netns()
    folder = out or Path("runs") / f"bisect-{file.stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    if folder.exists() and any(folder.iterdir()):
        _fail(f"--out {folder}: the folder exists and is not empty")
    folder.mkdir(parents=True, exist_ok=True)
    t = Target(file, backend, folder, jobs, checks, system, target)
    for end in (versions[0], versions[-1]):  # a release that cannot be had fails here, before anything runs
        try:
            t.scenario(end)
        except ValueError as e:
            _fail(str(e))
    search = Search(versions, runs)
    console.print(
        f"bisect {file.name}: {len(versions)} releases {versions[0]}..{versions[-1]} ({' '.join(versions)}); "
        f"{runs} runs per probe on {backend}; a run fails when it violates {', '.join(checks) or 'any check'}",
        markup=False, soft_wrap=True,
    )  # fmt: skip

    def on_probe(p) -> None:  # type: ignore[no-untyped-def]
        console.print(f"  probe {probe_line(p)}", markup=False)
        console.file.flush()  # live progress in a log or a pipe too

    def oracle(version: str, n: int) -> tuple[int, int, str]:
        with console.status(f"probing {version}: {n} runs (bracket {versions[search.lo]}..{versions[search.hi]})"):
            return t.probe(version, n)

    status, code = "found", 0
    try:
        search.run(oracle, on_probe)
        status, code = ("none", 1) if search.same else ("found", 0)
    except (KeyboardInterrupt, Interrupted):
        status, code = "interrupted", 2
    except ProbeError as e:
        status, code = f"error: {e}", 2
    doc = bisect_doc(search, file=file, backend=backend, violates=checks, status=status)
    write(folder, doc)
    if code == 2:
        console.print(f"bisect {status}; kept so far: {search.summary()}", markup=False, soft_wrap=True)
    console.print(f"bisect: {search.summary()}", markup=False, soft_wrap=True)
    console.print(f"{folder / 'bisect.json'}; {folder / 'index.html'}", markup=False, soft_wrap=True)
    sys.exit(code)


def _versions(span: str, pre_releases: bool, refresh: bool) -> list[str]:
    from foreign.jgroups.registry import RegistryError, between, served
    from foreign.jgroups.releases import ReleaseError

    first, sep, last = span.partition("..")
    if not sep or not first or not last:
        _fail(f"--versions {span!r}: a range A..B, e.g. 5.4.0..5.4.12")
    try:
        chosen = between(served(refresh_now=refresh), first, last, finals_only=not pre_releases)
    except (RegistryError, ReleaseError) as e:
        _fail(str(e))
    if len(chosen) < 2:
        _fail(f"--versions {span}: only {len(chosen)} release in the range; bisect needs two or more")
    return [r.version for r in chosen]


def _system_and_checks(file: Path, violates: str | None) -> tuple[dict[str, object], list[str]]:
    """The settings that choose the system whose releases are bisected (a catalogue bug's [bug.real] system, else
    the file's own), and what a failing run violates (--violates, else the bug's real violates, else any check)."""
    from orchestration.scenario import VIOLATIONS, ScenarioError, load

    try:
        sc = load(file)
    except ScenarioError as e:
        _fail(str(e))
    checks = [c.strip() for c in violates.split(",") if c.strip()] if violates else []
    for c in checks:
        if c not in VIOLATIONS:
            _fail(f"--violates: unknown check {c!r}; checks: {', '.join(sorted(VIOLATIONS))}")
    real = sc.bug.real if sc.bug else None
    if real is not None:
        return {"cluster.system": real.system}, checks or list(real.violates)
    if not sc.system.release:
        _fail(
            f"{file}: its system {sc.system.name!r} has no releases to bisect; name a system that has them "
            '([cluster] system = "jgroups-5-udp", `chaosbed systems` lists their releases), or a bug file with '
            "[bug.real]"
        )
    return {}, checks


def _need_netns() -> None:
    from orchestration.backends.netns import check_netns_available
    from orchestration.cluster import ClusterError

    try:
        check_netns_available()
    except ClusterError as e:
        _fail(str(e))

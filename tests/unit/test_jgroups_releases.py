"""JGroups releases as an axis (foreign/jgroups/releases.py, maven.py, orchestration/systems/jgroups5.py), without a
network: a release's version, Java and stacks; cluster.version and cluster.stack on the 5.x systems; a jar that is
not on the machine and cannot be fetched (Maven offline, no mvn, a release the registry lacks, a corrupt jar) is a
load-time error naming the release and the command that fetches it, and `chaosbed run` exits 2 with it. Maven is
replaced by a script on PATH that prints what the real one prints in each case."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from foreign.jgroups import maven
from foreign.jgroups.releases import Release, ReleaseError, check_stack
from orchestration.cli.main import main
from orchestration.scenario import ScenarioError, parse
from orchestration.systems import SYSTEMS

OFFLINE = (
    "[ERROR] Failed to execute goal org.apache.maven.plugins:maven-dependency-plugin:2.8:get (default-cli): "
    "Couldn't download artifact: Could not transfer artifact org.jgroups:jgroups:jar:{v} from/to central "
    "(https://repo.maven.apache.org/maven2): Unknown host repo.maven.apache.org"
)
NOT_THERE = "[ERROR] Failed to execute goal ...: Could not find artifact org.jgroups:jgroups:jar:{v} in central"


def fake_mvn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str | None, jar: bytes | None = None) -> Path:
    """An empty local repository and an `mvn` that fails with `output` (None: it "fetches" `jar`, with its .sha1)."""
    repo, bin_dir = tmp_path / "m2", tmp_path / "bin"
    repo.mkdir()
    bin_dir.mkdir()
    script = bin_dir / "mvn"
    if output is None:
        assert jar is not None
        (tmp_path / "jar").write_bytes(jar)
        body = (
            'v=$(printf "%s\\n" "$@" | sed -n "s/^-Dartifact=org.jgroups:jgroups://p")\n'
            f'd="{repo}/org/jgroups/jgroups/$v"; mkdir -p "$d"; cp "{tmp_path}/jar" "$d/jgroups-$v.jar"\n'
            f'echo {hashlib.sha1(jar).hexdigest()} > "$d/jgroups-$v.jar.sha1"\n'
        )
    else:
        body = f"echo '{output}' | sed \"s/{{v}}/$(printf '%s\\n' \"$@\" | sed -n 's/^-Dartifact=.*://p')/\"\nexit 1\n"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CHAOSBED_M2_REPO", str(repo))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return repo


def scenario(**cluster: object) -> dict[str, object]:
    return {"cluster": {"members": 2, "system": "jgroups-5-udp", **cluster}}


def refused(**cluster: object) -> str:
    with pytest.raises(ScenarioError) as e:
        parse({"cluster": {"members": 2, **cluster}})
    return str(e.value)


def test_a_release_and_what_it_needs() -> None:
    r = Release.parse("5.5.6")
    assert (r.version, r.maven_version, r.coordinates, r.java, r.generation) == (
        "5.5.6", "5.5.6.Final", "org.jgroups:jgroups:5.5.6.Final", 17, "5")  # fmt: skip
    assert Release.parse("5.4.3.Final") == Release.parse("5.4.3") and Release.parse("5.4.3").java == 11
    assert Release.parse("5.4.3") < Release.parse("5.4.12") < Release.parse("5.5.0")
    assert Release.parse("5.5.0.CR1").version == "5.5.0.CR1"
    with pytest.raises(ReleaseError, match=re.escape("is not a JGroups release")):
        Release.parse("five")
    with pytest.raises(ReleaseError, match=re.escape("member programs for 5.x, 3.1-3.6")):
        _ = Release.parse("4.2.0").generation
    with pytest.raises(ReleaseError, match=re.escape("not 3.0.16")):
        _ = Release.parse("3.0.16").generation  # no NAKACK2, no MERGE3
    assert (Release.parse("3.6.20").generation, Release.parse("3.1.0").generation, Release.parse("3.2.7").java) == (
        "3", "3", 11)  # fmt: skip
    check_stack(Release.parse("3.2.7"), "unicast2-udp-fast")
    check_stack(Release.parse("3.3.0"), "unicast3-udp")
    with pytest.raises(ReleaseError, match=re.escape("needs a release in 3.3.0-3.6.20")):
        check_stack(Release.parse("3.2.7"), "unicast3-udp-fast")
    check_stack(Release.parse("5.4.0"), "nakack4-fast")
    with pytest.raises(ReleaseError, match=re.escape("needs a release in 5.4.0")):
        check_stack(Release.parse("5.3.0"), "nakack4")
    with pytest.raises(ReleaseError, match=re.escape("5.2.13-5.4.3")):
        check_stack(Release.parse("5.4.4"), "tcp-noxmit")
    check_stack(Release.parse("5.2.7"), "udp-fast")
    with pytest.raises(ReleaseError, match=re.escape("needs a release in 5.2.7+ (its bundler, PerDestinationBundler")):
        check_stack(Release.parse("5.2.6"), "tcp")


def test_cluster_version_and_stack_pick_the_jar_and_the_transport() -> None:
    sc = parse(scenario(version="5.4.3"))
    assert sc.system.release == "5.4.3" and "jgroups-5.4.3.Final.jar" in ":".join(sc.system.command)
    assert any(m.endswith("/5.4.3.Final") for m in sc.system.mounts)
    assert sc.system.label == "jgroups-5-udp (5.4.3, udp-fast)"
    tcp = parse({"cluster": {"members": 2, "system": "jgroups-5", "stack": "tcp"}})
    assert (tcp.transport, tcp.stack, tcp.system.transport) == ("tcp", "tcp", "tcp")
    assert refused(system="jgroups-5-tcp", transport="udp").startswith(
        "cluster.transport: system 'jgroups-5-tcp' with stack 'tcp-fast' runs over tcp"
    )
    assert refused(system="jgroups-5-tcp-noxmit", version="5.5.6").startswith(
        "cluster.version: JGroups 5.5.6 cannot run stack 'tcp-noxmit-fast'"
    )
    assert refused(system="jgroups-2.12", version="2.12.3").startswith(
        "cluster.version: refused for system 'jgroups-2.12': it runs 2.12.2"
    )
    old = parse({"cluster": {"members": 2, "system": "jgroups-3-unicast3", "version": "3.5.0"}})
    assert old.system.release == "3.5.0" and "chaosbed.jgroups3.Member" in old.system.command
    assert "jgroups-3.5.0.Final.jar" in ":".join(old.system.command)
    assert refused(system="jgroups-3-unicast3", version="5.4.3").startswith(
        "cluster.version: system 'jgroups-3-unicast3' runs JGroups 3.x releases, not 5.4.3"
    )
    assert refused(system="jgroups-3-unicast3", version="3.2.7").startswith(
        "cluster.version: JGroups 3.2.7 cannot run stack 'unicast3-udp-fast': it needs a release in 3.3.0-3.6.20"
    )
    # the release is held to the stack the scenario names, not to the system's default one
    u2 = parse({"cluster": {"members": 2, "system": "jgroups-3", "version": "3.2.5", "stack": "unicast2-udp-fast"}})
    assert (u2.system.release, u2.system.stack) == ("3.2.5", "unicast2-udp-fast")
    assert refused(system="jgroups-3", version="3.2.5", stack="unicast3-udp").startswith(
        "cluster.version: JGroups 3.2.5 cannot run stack 'unicast3-udp'"
    )
    noxmit = parse({"cluster": {"members": 2, "system": "jgroups-5", "version": "5.2.13", "stack": "tcp-noxmit"}})
    assert (noxmit.system.release, noxmit.system.stack) == ("5.2.13", "tcp-noxmit")
    assert refused(system="jgroups-5-udp", version="3.6.0").startswith(
        "cluster.version: system 'jgroups-5-udp' runs JGroups 5.x releases, not 3.6.0"
    )
    with pytest.raises(ScenarioError, match=re.escape("cluster.stack: no stack file 'nope.xml'")):
        parse({"cluster": {"members": 2, "system": "jgroups-5", "stack": "nope.xml"}})
    with pytest.raises(ScenarioError, match=r"unknown stack 'mine.xml' for system 'jgroups-5-udp'"):
        parse(scenario(stack="mine.xml"))


def test_offline_a_missing_release_is_a_load_time_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_mvn(tmp_path, monkeypatch, OFFLINE)
    with pytest.raises(ScenarioError) as e:
        parse(scenario())
    assert str(e.value) == (
        "cluster.system: JGroups 5.5.6 (org.jgroups:jgroups:5.5.6.Final) is not on this machine and Maven Central "
        "cannot be reached (offline?); on a machine that reaches it, run `python -m foreign.jgroups.maven fetch "
        "5.5.6` (or `make setup`, which fetches the project's releases)"
    )
    path = tmp_path / "s.toml"
    path.write_text('[cluster]\nmembers = 2\nsystem = "jgroups-5-udp"\nversion = "5.4.9"\n')
    result = CliRunner().invoke(main, ["run", str(path), "--backend", "process", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "cluster.version: JGroups 5.4.9 (org.jgroups:jgroups:5.4.9.Final) is not on this machine" in result.output
    assert "Traceback" not in result.output


def test_a_release_the_registry_lacks_and_no_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_mvn(tmp_path, monkeypatch, NOT_THERE)
    with pytest.raises(ScenarioError, match=r"JGroups 5.3.23 \(org.jgroups:jgroups:5.3.23.Final\): Maven Central "
                       "does not have this release"):  # fmt: skip
        parse(scenario(version="5.3.23"))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(maven.JarError, match=re.escape("there is no `mvn` to fetch it: apt-get install maven")):
        maven.fetch(Release.parse("5.5.6"))


def test_a_jar_is_fetched_on_first_use_and_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = fake_mvn(tmp_path, monkeypatch, None, jar=b"PK\x03\x04 a jar")
    r = Release.parse("5.4.7")
    assert not maven.verified(r)
    path = maven.fetch(r)
    assert path == repo / "org/jgroups/jgroups/5.4.7.Final/jgroups-5.4.7.Final.jar" and maven.verified(r)
    path.write_bytes(b"PK\x03\x04 changed")  # no longer what Maven checked against the registry
    assert not maven.verified(r)
    assert parse(scenario(version="5.4.7")).system.release == "5.4.7"  # fetched again, verified again
    assert path.read_bytes() == b"PK\x03\x04 a jar"


def test_the_first_jar_is_fetched_alone_then_the_rest_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first Maven run also fetches Maven's dependency plugin, so it runs alone; the later ones overlap (each
    waits, at most 5 s, until three have started) and every jar is verified."""
    repo = fake_mvn(tmp_path, monkeypatch, None, jar=b"PK\x03\x04 a jar")
    script = tmp_path / "bin" / "mvn"
    log = tmp_path / "mvn.log"
    body = script.read_text().removeprefix("#!/bin/sh\n")
    script.write_text(
        "#!/bin/sh\n"
        f'v=$(printf "%s\\n" "$@" | sed -n "s/^-Dartifact=org.jgroups:jgroups://p"); echo "start $v" >> {log}\n'
        f'i=0; while [ "$v" != 5.4.5.Final ] && [ "$(grep -c start {log})" -lt 4 ] && [ $i -lt 50 ]; do '
        "sleep 0.1; i=$((i+1)); done\n" + body + f'echo "end $v" >> {log}\n'
    )
    releases = [Release.parse(v) for v in ("5.4.5", "5.4.6", "5.4.7", "5.4.8")]
    got = maven.fetch_many(releases, jobs=3)
    assert list(got) == releases and all(maven.verified(r) for r in releases)
    assert got[releases[0]] == repo / "org/jgroups/jgroups/5.4.5.Final/jgroups-5.4.5.Final.jar"
    lines = log.read_text().split("\n")[:-1]
    assert lines[:2] == ["start 5.4.5.Final", "end 5.4.5.Final"], lines
    assert [ln.split()[0] for ln in lines[2:5]] == ["start"] * 3, lines  # three at once
    assert maven.fetch_many(releases) == got and len(log.read_text().split("\n")) == len(lines) + 1  # all cached


def test_systems_lists_releases_stacks_and_leave() -> None:
    from orchestration.cli.systems import _LEAVES, _release, _stacks

    out = CliRunner().invoke(main, ["systems"]).output
    for name in ("jgroups-5-udp", "jgroups-5-tcp", "jgroups-5-nakack4", "jgroups-5-tcp-noxmit", "jgroups-5"):
        assert name in out and SYSTEMS[name].leave == "control"  # whole names, however narrow the terminal
    assert "JGroups 3.x and 5.x releases on this machine" in out
    for name in ("jgroups-3-unicast2", "jgroups-3-unicast3", "jgroups-3"):
        assert name in out and SYSTEMS[name].leave == "control" and SYSTEMS[name].wire == "none"
    assert "chaosbed.jgroups3" in out
    assert _release(SYSTEMS["jgroups-3-unicast2"]) == "3.2.7 (cluster.version: 3.1.0-3.6.20)"
    assert _release(SYSTEMS["jgroups-5-tcp-noxmit"]) == "5.4.3 (cluster.version: 5.2.13-5.4.3)"
    assert _release(SYSTEMS["jgroups-2.12"]) == "2.12.2 (Debian's libjgroups-java)"
    assert _stacks(SYSTEMS["jgroups-5"]).endswith("tcp-noxmit, or your *.xml")
    assert _LEAVES[SYSTEMS["chaosbed-contract"].leave] == "SIGTERM"


def test_the_makefile_and_the_python_side_agree_on_the_build_release() -> None:
    from foreign.jgroups import jgroups5
    from foreign.jgroups.releases import PROJECT_RELEASES

    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    found = re.search(r"^JGROUPS5_BUILD_RELEASE := (\S+)$", makefile, re.M)
    assert found and found.group(1) == jgroups5.BUILD_RELEASE and jgroups5.BUILD_RELEASE in PROJECT_RELEASES
    from foreign.jgroups import jgroups3

    found = re.search(r"^JGROUPS3_BUILD_RELEASE := (\S+)$", makefile, re.M)
    assert found and found.group(1) == jgroups3.BUILD_RELEASE and jgroups3.BUILD_RELEASE in PROJECT_RELEASES


def test_make_setup_fetches_every_release_of_the_catalogue() -> None:
    """Every [bug.real] release is in PROJECT_RELEASES (`make setup` fetches those), and its system's generation."""
    from foreign.jgroups.releases import PROJECT_RELEASES
    from orchestration.matrix.bugs import catalogue

    project = {Release.parse(v) for v in PROJECT_RELEASES}
    pairs = [e.bug.real for e in catalogue() if e.bug is not None and e.bug.real is not None]
    assert any(p.system.startswith("jgroups-3") for p in pairs)
    for p in pairs:
        own = Release.parse(SYSTEMS[p.system].release).generation
        for v in (p.flawed, p.fixed):
            assert Release.parse(v) in project, f"{p.system} {v} is not in PROJECT_RELEASES"
            assert Release.parse(v).generation == own

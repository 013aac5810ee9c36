"""The class-data archive of Spark's classes (analysis/spark_cds.py): the options that use it, and a real local
session's driver loading its classes from the archive `make setup` made."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import spark_cds
from analysis.spark_config import jvm_options, session_config

SESSION = """
import tempfile
from pathlib import Path
from analysis.pipeline import run_pipeline
from analysis.synth import write_run
with tempfile.TemporaryDirectory() as tmp:
    write_run(Path(tmp) / "run", members=3, rounds=5, inject=(), seed=1)
    run_pipeline(Path(tmp) / "run", "local[*]")
"""


def test_no_archive_file_gives_no_option_and_off_gives_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(spark_cds.ARCHIVE_ENV, str(tmp_path / "absent.jsa"))
    assert spark_cds.archive_options() == []  # an absent file would switch off the JDK's own archive too
    assert "SharedArchiveFile" not in session_config("local[*]")["spark.driver.extraJavaOptions"]
    (tmp_path / "absent.jsa").write_bytes(b"not an archive")
    assert spark_cds.archive_options() == [f"-XX:SharedArchiveFile={tmp_path / 'absent.jsa'}", *spark_cds.QUIET]
    monkeypatch.setenv(spark_cds.ARCHIVE_ENV, "off")
    assert spark_cds.archive_path() is None and spark_cds.archive_options() == []


def test_the_extra_options_come_last_on_every_spark_jvm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(spark_cds.OPTIONS_ENV, "-Xmx700m  -XX:TieredStopAtLevel=1")
    conf = session_config("local[*]")
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        assert conf[key] == jvm_options() and conf[key].endswith(" -Xmx700m -XX:TieredStopAtLevel=1")
        assert conf[key].startswith("-Dlog4j2.configurationFile=")


def test_a_damaged_archive_is_ignored_and_the_check_runs(tmp_path: Path) -> None:
    """A file the JVM cannot map (another JDK's, a truncated one): the driver starts without it, silently."""
    bad = tmp_path / "bad.jsa"
    bad.write_bytes(b"\0" * 4096)
    env = {spark_cds.ARCHIVE_ENV: str(bad)}
    done = subprocess.run([sys.executable, "-c", SESSION], env=_env(env), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cds" not in done.stderr.lower() and "shared archive" not in done.stderr.lower(), done.stderr[-2000:]


@pytest.mark.skipif(
    (p := spark_cds.archive_path()) is None or not p.is_file(),
    reason="no Spark class-data archive on this machine: `make setup` makes it (python -m analysis.spark_cds)",
)
def test_a_local_sessions_driver_loads_spark_classes_from_the_archive(tmp_path: Path) -> None:
    log, cds = tmp_path / "classes.log", tmp_path / "cds.log"
    # the archive's own log (which chaosbed keeps quiet) says why the JVM did not map it, when it did not
    logs = f"-Xlog:class+load=info:file={log} -Xlog:cds=info,cds+dynamic=info,class+path=info:file={cds}"
    env = _env({spark_cds.OPTIONS_ENV: logs})
    done = subprocess.run([sys.executable, "-c", SESSION], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = log.read_text().splitlines()
    spark = [line for line in lines if " org.apache.spark." in line]
    from_archive = [line for line in spark if "shared objects file (top)" in line]
    # measured: 4,849 of 7,507 (the rest are generated at run time: lambdas, whole-stage codegen)
    why = [line[:400] for line in (cds.read_text() if cds.is_file() else "no CDS log").splitlines()]
    why = [line for line in why if re.search(r"mismatch|unable|fail|error|disabl|not |differ|expect", line, re.I)][-40:]
    assert len(spark) > 1000 and len(from_archive) > 0.5 * len(spark), (len(spark), len(from_archive), why)


def _env(extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **extra}


def test_the_archives_of_spark_installs_that_are_gone_are_pruned(tmp_path: Path) -> None:
    for name, source in (("gone", tmp_path / "deleted-venv" / "jars"), ("kept", tmp_path)):
        (tmp_path / f"{name}.jsa").write_bytes(b"x")
        (tmp_path / f"{name}.source").write_text(f"{source}\n")
    (tmp_path / "unknown.jsa").write_bytes(b"x")  # no source: not this module's to judge
    spark_cds._prune(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.jsa", "kept.source", "unknown.jsa"]


def test_an_archive_replaced_by_one_of_a_new_install_at_the_same_path_is_pruned(tmp_path: Path) -> None:
    venv = tmp_path / "venv-jars"
    venv.mkdir()
    for name in ("old", "new", "other"):
        (tmp_path / f"{name}.jsa").write_bytes(b"x")
    (tmp_path / "old.source").write_text(f"{venv}\n")
    (tmp_path / "new.source").write_text(f"{venv}\n")
    (tmp_path / "other.source").write_text(f"{tmp_path}\n")  # another install, still there
    spark_cds._prune(tmp_path, tmp_path / "new.jsa")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["new.jsa", "new.source", "other.jsa", "other.source", "venv-jars"]


def test_the_archive_is_named_after_the_jars_the_jvm_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A jar rewritten at the same path (a fresh install where an older one was) gives the archive another name, so
    `make setup` makes a new one: the JVM would reject the old one for that jar."""
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "a.jar").write_bytes(b"one")
    monkeypatch.setattr(spark_cds, "_spark_jars", lambda: jars)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(spark_cds.ARCHIVE_ENV, raising=False)
    first = spark_cds.archive_path()
    assert first == spark_cds.archive_path()
    os.utime(jars / "a.jar", ns=(1, 1))
    second = spark_cds.archive_path()
    (jars / "a.jar").write_bytes(b"three")
    assert len({first, second, spark_cds.archive_path()}) == 3
    assert first is not None and first.parent == tmp_path / "cache" / "chaosbed" / "spark-cds"

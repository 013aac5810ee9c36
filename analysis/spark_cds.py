"""A class-data-sharing archive of Spark's classes for the JVMs chaosbed's checker starts (the local session's driver,
the Spark service's Connect server, a standalone cluster's master, workers and executors).

A Spark JVM spends most of its start loading and verifying some ten thousand classes; a dynamic CDS archive
(JDK 13+: `-XX:ArchiveClassesAtExit`, then `-XX:SharedArchiveFile`) maps them in ready-made. `make setup` makes one
(`python -m analysis.spark_cds`) by running a small check on a local session; every later Spark JVM that finds it uses
it. The JVM checks the archive itself (its JDK build, the classpath's jars): one that does not fit is ignored without a
word (`-Xlog:cds=off`) and the JVM starts as it would without it, so a stale archive costs nothing but the saving.
That saving is the point, so the archive's name is a digest of what the JVM checks: the JDK, and the path, size and
modification time of every Spark jar. A PySpark installed again at the same path (a fresh clone where an older one
was, `pip install` again) gets an archive of its own from `make setup`, and the one it replaces is pruned. (Keyed on
the path alone, a CI clone at a reused path kept the old install's archive and the JVM rejected it: "A jar file is
not the one used while building the shared archive file".)

Measured on the 2-core machine (2026-12-02, the warm-up check of a small synthetic run on a local session, twice
each): the driver JVM used 12.5 CPU-s and 9.0 s of wall without the archive, 7.1 CPU-s and 5.4 s with it, and
3.6 CPU-s with it and `-XX:TieredStopAtLevel=1` (which the test suite adds through $CHAOSBED_SPARK_JVM_OPTIONS;
chaosbed itself keeps the JIT's defaults, whose C2 pays on large histories).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

OPTIONS_ENV = "CHAOSBED_SPARK_JVM_OPTIONS"  # more options for every Spark JVM chaosbed starts
ARCHIVE_ENV = "CHAOSBED_SPARK_CDS"  # the archive's path (default: under the user's cache folder); "off": none
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")
DUMP_TIMEOUT = 180.0  # the JVM writes the archive as it exits: ~25 s on 2 cores


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return os.path.realpath(found) if found else "java"


def _spark_jars() -> Path | None:
    try:
        import pyspark  # only its location: no JVM, no session
    except ImportError:
        return None
    return Path(pyspark.__file__).parent / "jars"


def archive_path() -> Path | None:
    """Where this machine's archive is (or would be): one per JDK and Spark install. None when switched off."""
    chosen = os.environ.get(ARCHIVE_ENV)
    if chosen == "off":
        return None
    if chosen:
        return Path(chosen)
    jars = _spark_jars()
    if jars is None:
        return None
    key = hashlib.sha256(_identity(jars).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "chaosbed" / "spark-cds" / f"{key}.jsa"


def _identity(jars: Path) -> str:
    """What the JVM checks before it maps the archive: the JDK (its java and the size and time of its modules file)
    and each jar of the classpath (its path, size and modification time)."""
    java = _java()
    parts = [java]
    modules = Path(java).parent.parent / "lib" / "modules"
    with contextlib.suppress(OSError):
        st = modules.stat()
        parts.append(f"{st.st_size}:{st.st_mtime_ns}")
    root = jars.resolve()
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        entries = []
    parts.append(str(root))
    for e in entries:
        if e.name.endswith(".jar"):
            with contextlib.suppress(OSError):
                st = e.stat()
                parts.append(f"{e.name}:{st.st_size}:{st.st_mtime_ns}")
    return "\0".join(parts)


def archive_options() -> list[str]:
    """The JVM options that use the archive, if it exists (an absent archive file would switch off the JDK's own)."""
    path = archive_path()
    if path is None or not path.is_file():
        return []
    return [f"-XX:SharedArchiveFile={path}", *QUIET]


def extra_options() -> list[str]:
    """$CHAOSBED_SPARK_JVM_OPTIONS, split at spaces."""
    return os.environ.get(OPTIONS_ENV, "").split()


def make_archive(timeout: float = DUMP_TIMEOUT) -> Path:
    """Runs a small check on a local session whose driver dumps the classes it loaded as it exits, then moves the
    archive into place; returns its path. Raises RuntimeError (with the reason) when no archive came out."""
    path = archive_path()
    if path is None:
        raise RuntimeError(f"no archive to make: {ARCHIVE_ENV}=off or PySpark is not installed")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.stem}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    dump = f"{os.environ.get(OPTIONS_ENV, '')} -XX:ArchiveClassesAtExit={partial}".strip()
    env = dict(os.environ, **{ARCHIVE_ENV: "off", OPTIONS_ENV: dump})
    done = subprocess.run(
        [sys.executable, "-m", "analysis.spark_cds_dump"], env=env, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise RuntimeError(f"the dumping session failed: {(done.stderr or done.stdout).strip()[-800:]}")
    pids = [line.split()[-1] for line in done.stdout.splitlines() if line.startswith("driver pid ")]
    if not pids:
        raise RuntimeError(f"the dumping session named no driver: {done.stdout.strip()[-800:]}")
    pid = int(pids[-1])
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:  # the driver writes the archive on exit
        time.sleep(0.2)
    if Path(f"/proc/{pid}").exists() or not partial.is_file() or partial.stat().st_size == 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"the driver (pid {pid}) wrote no archive within {timeout:.0f} s")
    os.replace(partial, path)
    jars = _spark_jars()
    if jars is not None and os.environ.get(ARCHIVE_ENV) is None:
        path.with_suffix(".source").write_text(f"{jars.resolve()}\n")
        _prune(path.parent, path)
    return path


def _prune(folder: Path, current: Path | None = None) -> None:
    """Removes the archives of Spark installs that are gone (a deleted checkout's venv), and those that `current`
    replaces (an earlier install at its path): 150 MiB each."""
    mine = current.with_suffix(".source").read_text().strip() if current is not None else None
    for source in folder.glob("*.source"):
        where = source.read_text().strip()
        replaced = current is not None and where == mine and source.stem != current.stem
        if replaced or not Path(where).is_dir():
            source.with_suffix(".jsa").unlink(missing_ok=True)
            source.unlink(missing_ok=True)


def main() -> int:
    try:
        path = make_archive()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"setup: no Spark class-data archive ({exc}); Spark starts without one", file=sys.stderr)
        return 0  # an optimisation only: setup goes on
    print(f"setup: Spark class-data archive {path} ({path.stat().st_size // 2**20} MiB)")
    return 0


if __name__ == "__main__":  # python -m analysis.spark_cds: make the archive (make setup)
    sys.exit(main())

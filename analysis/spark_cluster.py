"""A Spark standalone cluster on this machine: one master and N workers, started from the pyspark installation's own
classes (`bin/spark-class org.apache.spark.deploy.master.Master` and `...deploy.worker.Worker` under pyspark's
SPARK_HOME, the way Spark's own sbin scripts start them, without their daemon wrapper that writes into
site-packages), bound to 127.0.0.1. `chaosbed check --spark spark://127.0.0.1:PORT` (or `--master`) then checks on
it: the executors parse the history files with local mode's reader and write the Parquet cache themselves
(analysis/spark_ingest.py), and read the cache's group files in the check job (analysis/spark_job.py); the driver
gets only each file's summary (counters, views, unparseable lines) and the violations.

State (`$CHAOSBED_STATE/spark-cluster/`, next to the Spark service's `spark/`):
  state.json          the running cluster (ClusterInfo): the master's URL and web UI port, every JVM's pid
  lock                flock: start and stop are serialised on it
  spark.conf          the properties file the master and workers read (its path in their command lines marks them)
  master.log, worker-<i>.log, work/   what the JVMs write (the workers' executors run in work/)

Every JVM is verified by its command line (its class and this folder) before it is signalled; stop() ends the
workers (which end their executors and those executors' Python workers), then the master, then whatever is left of
their process trees, and removes the state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from analysis.spark_config import jvm_options
from analysis.spark_service import (
    SparkServiceError,
    _free_port,
    _locked,
    _pythonpath,
    _terminate,
    _tree,
    _wait,
    state_root,
)

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
START_TIMEOUT = 120.0  # JVMs on a loaded 2-core machine: measured 5-15 s each
STOP_TIMEOUT = 20.0
DAEMON_MEMORY = "512m"  # the master's and each worker's own heap (not the executors')


class SparkClusterError(SparkServiceError):
    """The cluster could not start or be reached; the message says what is missing and what to do."""


@dataclass(frozen=True)
class ClusterInfo:
    url: str  # spark://127.0.0.1:PORT
    port: int
    webui_port: int
    master_pid: int
    worker_pids: list[int]
    cores: int  # per worker
    memory: str  # per worker, for its executors
    started: float  # epoch seconds

    @property
    def uptime(self) -> float:
        return time.time() - self.started


def cluster_dir() -> Path:
    return state_root() / "spark-cluster"


# --- processes -------------------------------------------------------------------------------------------------------


def _ours(pid: int, cls: str, folder: Path) -> psutil.Process | None:
    """The running JVM `pid` if its command line names `cls` and this cluster's folder (else None: gone, or the pid
    now belongs to another process)."""
    try:
        proc = psutil.Process(pid)
        cmdline = "\0".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None
    if cls in cmdline and str(folder) in cmdline and proc.status() != psutil.STATUS_ZOMBIE:
        return proc
    return None


def _env(home: Path, folder: Path) -> dict[str, str]:
    """The JVMs' environment: pyspark's SPARK_HOME, the loopback address, quiet logs, small daemon heaps, and this
    checkout first on the Python path of the executors' Python workers (they import analysis.streams)."""
    env = dict(os.environ)
    for var in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE", "PYSPARK_SUBMIT_ARGS"):
        env.pop(var, None)
    env |= {
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        "SPARK_DAEMON_JAVA_OPTS": jvm_options(),
        "SPARK_WORKER_DIR": str(folder / "work"),
        "SPARK_NO_DAEMONIZE": "1",
        "PYTHONPATH": _pythonpath(),
    }
    return env


def _properties(folder: Path) -> Path:
    """The properties file of the master and workers: no REST submission server, executors cleaned up with their
    application, quiet executors."""
    conf = {
        "spark.master.rest.enabled": "false",
        "spark.worker.cleanup.enabled": "false",
        "spark.ui.killEnabled": "false",
        "spark.executor.extraJavaOptions": jvm_options(),
    }
    path = folder / "spark.conf"
    path.write_text("".join(f"{k} {v}\n" for k, v in conf.items()))
    return path


def _spawn(cmd: list[str], log: Path, env: dict[str, str], folder: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=folder, start_new_session=True)  # fmt: skip


def master_json(webui_port: int, timeout: float = 2.0) -> dict[str, object] | None:
    """The master's own account of the cluster (its web UI's /json/: status, alive workers, cores), or None."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{webui_port}/json/", timeout=timeout) as reply:
            doc = json.loads(reply.read())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def alive_workers(webui_port: int) -> int:
    doc = master_json(webui_port)
    if doc is None:
        return 0
    workers = doc.get("workers")
    if not isinstance(workers, list):
        return 0
    return sum(1 for w in workers if isinstance(w, dict) and w.get("state") == "ALIVE")


# --- the cluster ---------------------------------------------------------------------------------------------------


def _read_state(folder: Path) -> ClusterInfo | None:
    try:
        return ClusterInfo(**json.loads((folder / "state.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _live(folder: Path) -> ClusterInfo | None:
    """The running cluster (under the lock); a cluster whose master is gone is stopped and its state removed."""
    info = _read_state(folder)
    if info is None:
        return None
    if _ours(info.master_pid, MASTER_CLASS, folder) is not None:
        return info
    _stop(info, folder)
    return None


def status(folder: Path | None = None) -> ClusterInfo | None:
    """The running cluster of this state root (or of `folder`), or None."""
    folder = folder or cluster_dir()
    if not (folder / "state.json").exists():
        return None
    with _locked(folder):
        return _live(folder)


def start(workers: int = 2, cores: int = 1, memory: str = "1g") -> tuple[ClusterInfo, bool]:
    """Starts a master and `workers` workers (each offering `cores` cores and `memory` to executors), or finds the
    running cluster. Returns it and whether this call started it. SparkClusterError if a JVM does not come up (the
    processes started so far are stopped again)."""
    if workers < 1 or cores < 1:
        raise SparkClusterError(f"a cluster needs at least one worker with one core (asked: {workers} x {cores})")
    folder = cluster_dir()
    with _locked(folder):
        running = _live(folder)
        if running is not None:
            return running, False
        return _start(folder, workers, cores, memory), True


def _preflight() -> Path:
    try:
        import pyspark
    except ImportError:
        raise SparkClusterError("a Spark cluster needs pyspark: pip install 'chaosbed[analysis]'") from None
    home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-class").exists() or not list((home / "jars").glob("spark-core_*.jar")):
        raise SparkClusterError(f"{home}: no bin/spark-class or spark-core jar; reinstall pyspark")
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and Path(java_home, "bin", "java").exists()) and not shutil.which("java"):
        raise SparkClusterError("no Java found: install Java 17+ and put it on PATH or set JAVA_HOME")
    return home


def _start(folder: Path, workers: int, cores: int, memory: str) -> ClusterInfo:
    home = _preflight()
    (folder / "work").mkdir(parents=True, exist_ok=True)
    env, props = _env(home, folder), _properties(folder)
    port, webui = _free_port(), _free_port()
    spark_class = str(home / "bin" / "spark-class")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        master = _spawn([spark_class, MASTER_CLASS, "--host", "127.0.0.1", "--port", str(port), "--webui-port",
                         str(webui), "--properties-file", str(props)], folder / "master.log", env, folder)  # fmt: skip
        procs.append(master)
        _wait_for(lambda: master_json(webui) is not None, master, folder / "master.log", "the master")
        url = f"spark://127.0.0.1:{port}"
        for i in range(workers):
            procs.append(_spawn([spark_class, WORKER_CLASS, "--host", "127.0.0.1", "--cores", str(cores), "--memory",
                                 memory, "--work-dir", str(folder / "work"), "--webui-port", "0", "--properties-file",
                                 str(props), url], folder / f"worker-{i}.log", env, folder))  # fmt: skip
        _wait_for(lambda: alive_workers(webui) >= workers, procs[-1], folder / "worker-0.log", f"{workers} workers")
    except BaseException:
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                _terminate(_tree(psutil.Process(p.pid)), STOP_TIMEOUT)
        raise
    info = ClusterInfo(url, port, webui, master.pid, [p.pid for p in procs[1:]], cores, memory, time.time())
    tmp = folder / "state.json.tmp"
    tmp.write_text(json.dumps(dataclasses.asdict(info)))
    tmp.replace(folder / "state.json")
    return info


def _wait_for(condition: object, proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
    """Waits for condition() (a callable) until START_TIMEOUT; SparkClusterError with the log's tail otherwise."""
    assert callable(condition)
    if _wait(lambda: bool(condition()) or proc.poll() is not None, START_TIMEOUT, 0.2) and proc.poll() is None:
        return
    tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-4:]) if log.exists() else ""
    why = f"exited with {proc.returncode}" if proc.poll() is not None else f"not up within {START_TIMEOUT:.0f} s"
    raise SparkClusterError(f"the Spark cluster's {what}: {why}" + (f": {tail}" if tail else "") + f" (log: {log})")


def stop(folder: Path | None = None) -> bool:
    """Stops the cluster of this state root (or of `folder`; True if one ran) and removes its state."""
    folder = folder or cluster_dir()
    if not folder.exists():
        return False
    with _locked(folder):
        info = _read_state(folder)
        if info is None:
            return False
        _stop(info, folder)
        return True


def _stop(info: ClusterInfo, folder: Path) -> None:
    """Workers first (each ends its executors), then the master, then whatever is left of their trees."""
    workers = [p for pid in info.worker_pids if (p := _ours(pid, WORKER_CLASS, folder)) is not None]
    master = _ours(info.master_pid, MASTER_CLASS, folder)
    everything = [q for p in [*workers, master] for q in _tree(p)]
    _terminate(workers, STOP_TIMEOUT)
    _terminate([master] if master is not None else [], STOP_TIMEOUT)
    _terminate(everything, 5.0)
    (folder / "state.json").unlink(missing_ok=True)
    shutil.rmtree(folder / "work", ignore_errors=True)


def processes(folder: Path | None = None) -> Iterator[psutil.Process]:
    """Every live process that names this state root's cluster folder (or `folder`) in its command line: the JVMs
    and executors (their working directory is there); what a test checks is gone after stop()."""
    where = str(folder or cluster_dir())
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            if any(where in part for part in proc.info["cmdline"] or []):
                yield proc


def code_zip(folder: Path) -> Path:
    """A zip of the analysis and node packages (what the executors' Python workers import: analysis.streams and the
    history table it reads), added to a cluster session's Python path, so that workers on other hosts need Python,
    pyspark, numpy, pyarrow and pandas, but no chaosbed installation. Written into `folder`, which the session owns
    and removes when it ends (the driver serves the file to the executors while the session lives)."""
    import zipfile

    root = Path(__file__).resolve().parent.parent
    sources = sorted([*(root / "analysis").glob("*.py"), *(root / "node").rglob("*.py")])
    path = folder / "chaosbed-checks.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sources:
            z.write(p, p.relative_to(root).as_posix())
    return path

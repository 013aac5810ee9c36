"""The warm Spark service: one local Spark Connect server per state root, shared by every check on the machine.

A check in a fresh process pays 7-11 s of JVM and session start-up (docs/architecture.md); against a running Spark
Connect server it pays only the client's imports and its jobs. The server is started by `start()` (`chaosbed spark
start`) or on demand by a check (no target, or the target `auto`), and lives in its own session: a small supervisor
process (`python -m analysis.spark_service serve ...`, the group leader) starts the JVM with spark-submit, writes the
state file once the gRPC port accepts connections, and stops the group after `idle_timeout` seconds with no check using
it (DEFAULT_IDLE_TIMEOUT for `start`, ON_DEMAND_IDLE_TIMEOUT for a service a check started).

State (`$CHAOSBED_STATE/spark/`, else /run/chaosbed/spark as root or /tmp/chaosbed/spark, as for clusters):
  state.json   the ServiceInfo of the running server (written by the supervisor when the port is open)
  lock         flock: start, stop, leases and the supervisor's idle decision are serialised on it
  last-used    its mtime is the last time a check finished or a session was handed out
  leases/      one file per check in flight (`<pid>-<n>`); a lease of a dead process does not count
  server.log   the JVM's and the supervisor's output (ERROR level only)

Whoever starts the server runs a first job on it (a warm-up, see `start`) before using it. The caller passes the
warm-up (the pipeline passes its own check of a tiny run, analysis/pipeline.py); a caller without one (`chaosbed spark
start`) gets that same check in a child process (`python -m analysis.warm_up URL`): this module sits below the
pipeline, which takes its leases, so it does not import it.

The supervisor records a fingerprint of the analysis code: the server's Python workers import `analysis.*` once and
keep it, so a server started before the code changed would check with the old code. Such a server is not used (and
is replaced when no check holds a lease on it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from analysis.spark_config import CONNECT_ENV, LOCAL, session_config

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_IDLE_TIMEOUT = 900.0  # a service started by `chaosbed spark start` (its --idle-timeout)
# A service a check started on demand (the default target, or auto): it outlives a check by a few minutes, so that
# the next one (a re-run, the next `chaosbed run`) finds it warm, and its JVM (1 GiB) does not linger for long after.
ON_DEMAND_IDLE_TIMEOUT = 300.0
START_TIMEOUT = 180.0  # JVM start on a loaded 2-core machine: measured 8-20 s
STOP_TIMEOUT = 20.0
LOCK_TIMEOUT = START_TIMEOUT + 60.0
_ANALYSIS = Path(__file__).resolve().parent
_leases = itertools.count()
WarmUp = Callable[[str], None]  # a first job on a new server, given its client URL
_stop_hooks: list[Callable[[str], None]] = []


class SparkServiceError(RuntimeError):
    """The service could not start (or be reached); the message says what is missing and what to do."""


@dataclass(frozen=True)
class ServiceInfo:
    pid: int  # the supervisor: the leader of the server's process group
    port: int
    url: str  # sc://127.0.0.1:PORT
    started: float  # epoch seconds
    idle_timeout: float  # seconds
    jvm_pid: int = 0
    code: str = ""  # fingerprint of the analysis code the server's Python workers import
    session_id: str = ""  # the one server-side session every chaosbed client shares

    @property
    def uptime(self) -> float:
        return time.time() - self.started

    @property
    def client_url(self) -> str:
        """The URL chaosbed's clients connect with: one shared server-side session, so its Python workers (which
        Spark Connect keeps per session) are warm for every check, not started anew by each process."""
        return f"{self.url}/;session_id={self.session_id}" if self.session_id else self.url


def state_root() -> Path:
    """The state root of clusters (orchestration.cluster.STATE_ROOT), computed the same way, at call time."""
    default = "/run/chaosbed" if os.geteuid() == 0 else "/tmp/chaosbed"
    return Path(os.environ.get("CHAOSBED_STATE", default))


def service_dir() -> Path:
    return state_root() / "spark"


def code_fingerprint() -> str:
    """Changes when any analysis module's content changes. Content, not mtimes: two checkouts of the same code (a CI
    clone next to a working tree) share one service instead of replacing each other's."""
    h = hashlib.sha256()
    for p in sorted(_ANALYSIS.glob("*.py")):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# --- files and processes ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(folder: Path | None = None, timeout: float = LOCK_TIMEOUT) -> Iterator[Path]:
    """Holds the service's file lock (waits for it up to `timeout`: a start in progress holds it while the JVM
    starts)."""
    folder = folder or service_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "a+") as f:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SparkServiceError(
                        f"{folder / 'lock'}: another process has held the Spark service's lock for {timeout:.0f} s"
                    ) from None
                time.sleep(0.05)  # poll the lock until the deadline: flock has no timeout of its own
        try:
            yield folder
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _pid_alive(pid: int) -> bool:
    """True for a running process (a zombie counts as gone). Says nothing about WHICH process it is: pids are reused
    within minutes here (pid_max 32768), so nothing is ever signalled on this alone (see _supervisor, _jvm)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, ValueError):
        return False
    except psutil.AccessDenied:
        return True


def _wait(condition: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    """Waits until condition() is true or the deadline passes; returns the last value."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


def _matching(pid: int, *needles: str) -> psutil.Process | None:
    """The running process `pid` if its command line contains every needle, else None (gone, or the pid now
    belongs to another process)."""
    try:
        proc = psutil.Process(pid)
        cmdline = "\0".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None
    return proc if all(n in cmdline for n in needles) and proc.status() != psutil.STATUS_ZOMBIE else None


def _supervisor(info: ServiceInfo, folder: Path) -> psutil.Process | None:
    """The service's supervisor, verified by its command line (`-m analysis.spark_service serve FOLDER PORT`)."""
    return _matching(info.pid, "analysis.spark_service", str(folder), str(info.port))


def _jvm(info: ServiceInfo) -> psutil.Process | None:
    """The service's JVM, verified by its command line (the Connect server class on the service's port)."""
    if not info.jvm_pid:
        return None
    return _matching(info.jvm_pid, SERVER_CLASS, f"spark.connect.grpc.binding.port={info.port}")


def _terminate(procs: list[psutil.Process], timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after `timeout` to those still there. psutil.Process objects remember their process's
    start time, so a pid reused meanwhile by another process is never signalled."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        live = [p for p in procs if p.is_running()]
        for p in live:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(sig)
        _, alive = psutil.wait_procs(live, wait)
        if not alive:
            return


def _tree(root: psutil.Process | None) -> list[psutil.Process]:
    if root is None:
        return []
    with contextlib.suppress(psutil.NoSuchProcess):
        return [root, *root.children(recursive=True)]
    return []


def _stop_service(info: ServiceInfo, folder: Path) -> None:
    """Stops a service's processes, each verified to be the service's own: SIGTERM to the supervisor (which stops
    the JVM in order), then whatever is left of the supervisor, the JVM and their descendants (Python daemons in
    process groups of their own)."""
    supervisor, jvm = _supervisor(info, folder), _jvm(info)
    procs = _tree(supervisor) + [p for p in _tree(jvm) if p.pid != (supervisor.pid if supervisor else None)]
    if supervisor is not None:
        with contextlib.suppress(psutil.NoSuchProcess):
            supervisor.terminate()
            supervisor.wait(STOP_TIMEOUT)
    _terminate(procs)


def _stop_child(proc: subprocess.Popen) -> None:
    """Stops a supervisor this process started (not yet published in a state file) and everything under it."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(psutil.NoSuchProcess):
        _terminate(_tree(psutil.Process(proc.pid)), STOP_TIMEOUT)


def _read_state(folder: Path) -> ServiceInfo | None:
    try:
        doc = json.loads((folder / "state.json").read_text())
        return ServiceInfo(**doc)
    except (OSError, ValueError, TypeError):
        return None


def _write_state(folder: Path, info: ServiceInfo) -> None:
    tmp = folder / f"state.json.{os.getpid()}"
    tmp.write_text(json.dumps(dataclasses.asdict(info)))
    os.replace(tmp, folder / "state.json")


def _clear(folder: Path) -> None:
    """Removes the state file and the leases (under the lock)."""
    (folder / "state.json").unlink(missing_ok=True)
    shutil.rmtree(folder / "leases", ignore_errors=True)


def _live_state(folder: Path) -> ServiceInfo | None:
    """The running service (under the lock); a stale state file (the supervisor is gone, or its JVM: killed, out of
    memory, and the supervisor not yet done noticing) is cleaned up and its processes stopped."""
    info = _read_state(folder)
    if info is None:
        (folder / "state.json").unlink(missing_ok=True)
        return None
    if _supervisor(info, folder) is not None and (not info.jvm_pid or _jvm(info) is not None):
        return info
    _stop_service(info, folder)  # the supervisor or the JVM died: what is left of the other goes too
    _clear(folder)
    return None


def _live_leases(folder: Path) -> int:
    n = 0
    for lease in (folder / "leases").glob("*"):
        pid = int(lease.name.split("-")[0]) if lease.name.split("-")[0].isdigit() else 0
        if _pid_alive(pid):
            n += 1
        else:
            lease.unlink(missing_ok=True)
    return n


def _touch(folder: Path) -> None:
    (folder / "last-used").touch()


# --- the API ------------------------------------------------------------------------------------------------------


def status() -> ServiceInfo | None:
    """The running service of this state root, or None (a stale state file is cleaned up)."""
    folder = service_dir()
    if not (folder / "state.json").exists():
        return None
    info = _read_state(folder)
    if info is not None and _supervisor(info, folder) is not None:
        return info
    with _locked(folder):
        return _live_state(folder)


def start(idle_timeout: float = DEFAULT_IDLE_TIMEOUT, warm_up: WarmUp | None = None) -> ServiceInfo:
    """Starts the service unless it runs (then returns it); safe when several processes call it at once. Returns once
    a client can connect and the server's Python workers are warm: `warm_up(client_url)` has run a first job (None:
    the pipeline's warm-up in a child process). Raises SparkServiceError when it cannot start, leaving nothing
    behind."""
    with _locked() as folder:
        info = _ensure_locked(folder, idle_timeout, warm_up)
        _touch(folder)
        return info


def stop() -> bool:
    """Stops the service of this state root: the whole process group, the state file. True if one was running."""
    with _locked() as folder:
        info = _read_state(folder)
        running = info is not None and _supervisor(info, folder) is not None
        if info is not None:
            for hook in _stop_hooks:  # this process's client must not retry a dead server at exit
                hook(info.url)
            _stop_service(info, folder)
        _clear(folder)
        return running


def on_stop(hook: Callable[[str], None]) -> None:
    """Calls `hook(url)` before this process stops a service (spark.py closes its Connect client to it)."""
    if hook not in _stop_hooks:
        _stop_hooks.append(hook)


@contextlib.contextmanager
def lease(
    start_if_needed: bool = False, idle_timeout: float = ON_DEMAND_IDLE_TIMEOUT, warm_up: WarmUp | None = None
) -> Iterator[ServiceInfo | None]:
    """Marks a check in flight: the idle timeout does not stop the service while this block runs. Yields the service
    (started first when `start_if_needed`, with `warm_up` as in `start`), or None when none runs with the current
    analysis code."""
    folder = service_dir()
    if not start_if_needed and not (folder / "state.json").exists():
        yield None
        return
    path = None
    with _locked(folder):
        info = _live_state(folder)
        if start_if_needed:
            info = _ensure_locked(folder, idle_timeout, warm_up)
        elif info is not None and info.code != code_fingerprint():
            info = None  # started with other analysis code: not used, see the module's docstring
        if info is not None:
            (folder / "leases").mkdir(exist_ok=True)
            path = folder / "leases" / f"{os.getpid()}-{threading.get_ident()}-{next(_leases)}"
            path.touch()
    try:
        yield info
    finally:
        if path is not None:
            path.unlink(missing_ok=True)
            _touch(folder)


def _ensure_locked(folder: Path, idle_timeout: float, warm_up: WarmUp | None) -> ServiceInfo:
    """The running service with the current code, else a new one (under the lock)."""
    info = _live_state(folder)
    if info is not None and info.code == code_fingerprint():
        return info
    if info is not None:
        if _live_leases(folder):
            print(
                f"chaosbed: the Spark service {info.url} runs older analysis code and a check is using it; "
                "that check keeps it (stop it with `chaosbed spark stop` once it is done)",
                file=sys.stderr,
            )
            return info
        _stop_service(info, folder)
        _clear(folder)
    return _spawn(folder, idle_timeout, warm_up)


def _preflight() -> Path:
    """SPARK_HOME of the installed pyspark, after checking what the server needs."""
    try:
        import grpc  # noqa: F401  (the Connect client)
        import pyspark
    except ImportError as exc:
        raise SparkServiceError(
            f"the Spark service needs pyspark with its connect extra ({exc}): pip install 'pyspark[connect]'"
        ) from None
    home = Path(pyspark.__file__).parent
    if not list((home / "jars").glob("spark-connect_*.jar")):
        raise SparkServiceError(f"{home / 'jars'}: no spark-connect jar; install pyspark >= 4 (pip install pyspark)")
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and Path(java_home, "bin", "java").exists()) and not shutil.which("java"):
        raise SparkServiceError("no Java found: install Java 17+ and put it on PATH or set JAVA_HOME")
    return home


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(folder: Path, idle_timeout: float, warm_up: WarmUp | None) -> ServiceInfo:
    """Starts the supervisor in a session of its own and waits for its state file (or its failure)."""
    home = _preflight()
    log = folder / "server.log"
    cmd = [sys.executable, "-m", "analysis.spark_service", "serve", str(folder), str(_free_port()), str(idle_timeout)]
    env = dict(os.environ, SPARK_HOME=str(home))
    for var in CONNECT_ENV:  # the caller's Connect client
        env.pop(var, None)
    env["PYTHONPATH"] = _pythonpath()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=folder, start_new_session=True)  # fmt: skip
    threading.Thread(target=proc.wait, daemon=True).start()  # reaps it when it ends while this process lives

    def settled() -> bool:
        return (folder / "state.json").exists() or proc.poll() is not None

    if not _wait(settled, START_TIMEOUT, 0.1) or proc.poll() is not None:
        _stop_child(proc)
        _clear(folder)
        tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
        what = "exited at start" if proc.poll() is not None else f"did not start within {START_TIMEOUT:.0f} s"
        raise SparkServiceError(
            f"the Spark Connect server {what}"
            + (": " + " | ".join(tail) if tail else "")
            + f" (log: {log}; it needs Java 17+ and pyspark[connect])"
        )
    info = _read_state(folder)
    try:
        if info is None:
            raise SparkServiceError("its state file is unreadable")
        (warm_up or _warm_up_in_child)(info.client_url)
    except Exception as exc:
        _stop_child(proc)
        _clear(folder)
        where = f" at {info.url}" if info is not None else ""
        raise SparkServiceError(f"the Spark Connect server{where} started but its first job failed: {exc}") from exc
    return info


def _pythonpath() -> str:
    """PYTHONPATH for the service's processes: this checkout's analysis package first."""
    return os.pathsep.join(filter(None, [str(_ANALYSIS.parent), os.environ.get("PYTHONPATH")]))


def _warm_up_in_child(url: str) -> None:
    """The pipeline's warm-up (analysis/warm_up.py) in a child process, for a caller that brings none."""
    env = dict(os.environ, PYTHONPATH=_pythonpath())
    for var in CONNECT_ENV:
        env.pop(var, None)
    cmd = [sys.executable, "-m", "analysis.warm_up", url]
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                              timeout=START_TIMEOUT)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise SparkServiceError(f"the warm-up job did not end within {START_TIMEOUT:.0f} s") from None
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise SparkServiceError(f"the warm-up job exited with {proc.returncode}: {tail}")


# --- the supervisor -----------------------------------------------------------------------------------------------


def server_command(home: Path, port: int, scratch: Path) -> list[str]:
    """spark-submit of the Connect server with chaosbed's session settings, bound to 127.0.0.1:port, its temporary
    files (Spark's block manager and artifact dirs, native libraries it unpacks) in `scratch`: the JVM leaves them in
    /tmp when it is stopped, so the supervisor removes `scratch` instead."""
    conf = session_config(LOCAL)
    conf = conf | {
        "spark.driver.extraJavaOptions": f"{conf.get('spark.driver.extraJavaOptions', '')} -Djava.io.tmpdir={scratch}",
        "spark.local.dir": str(scratch),
        "spark.app.name": "chaosbed-spark-service",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        # the shared session must outlive quiet spells: the service's own idle timeout ends it all
        "spark.connect.session.manager.defaultSessionTimeout": "3650d",
    }
    cmd = [str(home / "bin" / "spark-submit"), "--master", LOCAL, "--class", SERVER_CLASS]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    return cmd


def _accepting(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def serve(folder: Path, port: int, idle_timeout: float) -> int:
    """The supervisor (the group leader): runs the JVM, publishes the state file, stops everything when idle or
    signalled. Exit 0 after an idle stop or a signal, 1 when the server did not come up."""
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stopping.set())
    scratch = folder / f"scratch-{os.getpid()}"
    scratch.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1", TMPDIR=str(scratch))  # fmt: skip
    try:
        jvm = subprocess.Popen(
            server_command(Path(env["SPARK_HOME"]), port, scratch), stdin=subprocess.DEVNULL, env=env
        )
        return _supervise(jvm, folder, port, idle_timeout, stopping)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _supervise(jvm: subprocess.Popen, folder: Path, port: int, idle_timeout: float, stopping: threading.Event) -> int:
    code = code_fingerprint()
    deadline = time.monotonic() + START_TIMEOUT
    while not _accepting(port):
        if jvm.poll() is not None or stopping.is_set() or time.monotonic() > deadline:
            return _finish(jvm, folder, None, 1)
        stopping.wait(0.1)
    url = f"sc://127.0.0.1:{port}"
    info = ServiceInfo(os.getpid(), port, url, time.time(), idle_timeout, jvm.pid, code, str(uuid.uuid4()))
    _write_state(folder, info)
    _touch(folder)
    step = max(0.05, min(1.0, idle_timeout / 10))
    while not stopping.wait(step):
        if jvm.poll() is not None:
            break
        if time.time() - _last_used(folder) < idle_timeout:
            continue
        with _locked(folder):  # a lease is taken under the lock: decide under it too
            if _live_leases(folder) == 0 and time.time() - _last_used(folder) >= idle_timeout:
                return _finish(jvm, folder, info, 0)
    return _finish(jvm, folder, info, 0)  # signalled (stop() holds the lock then) or the JVM ended


def _last_used(folder: Path) -> float:
    try:
        return (folder / "last-used").stat().st_mtime
    except OSError:
        return 0.0


def _finish(jvm: subprocess.Popen, folder: Path, info: ServiceInfo | None, code: int) -> int:
    """Removes the state file (if it is this server's), stops the JVM and whatever else runs in the group."""
    current = _read_state(folder)
    if info is not None and current is not None and current.pid == info.pid:
        _clear(folder)
    tree: list[psutil.Process] = []
    if jvm.poll() is None:
        with contextlib.suppress(psutil.NoSuchProcess):
            tree = _tree(psutil.Process(jvm.pid))
    if jvm.poll() is None:
        jvm.terminate()
        try:
            jvm.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            jvm.kill()
            jvm.wait()
    _terminate(tree)  # Python daemons and workers the JVM left behind
    return code


if __name__ == "__main__":  # python -m analysis.spark_service serve FOLDER PORT IDLE_TIMEOUT
    if len(sys.argv) != 5 or sys.argv[1] != "serve":
        sys.exit("usage: python -m analysis.spark_service serve FOLDER PORT IDLE_TIMEOUT (use `chaosbed spark`)")
    sys.exit(serve(Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])))

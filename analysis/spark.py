"""The one Spark session of a process: quiet and fast in local mode, any master on request.

A "spark target" names where the checks run (one notion everywhere: the CLI's --spark and --master, analyze's
`master`, the CHAOSBED_SPARK environment variable when none is given):
  None          the running Spark service of this state root (analysis/spark_service.py), else an in-process
                local session (no service is started: a cold check costs what it always did)
  "auto"        the Spark service, started on demand
  "local"       always an in-process local session (also "local[N]", "local[*]")
  "sc://H:P"    that Spark Connect server
  anything else a classic master URL (spark://..., yarn, k8s://...), as --master always did

Settings measured on a 2-core machine (see DESIGN.md, "Performance notes"): no UI, 2 shuffle partitions, bound to
127.0.0.1, an ERROR-level log4j2 file given to the driver JVM at start (setLogLevel comes too late), 1 GiB driver.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOCAL = "local[*]"
TARGET_ENV = "CHAOSBED_SPARK"
AUTO = "auto"
CONNECT_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")  # PySpark's Connect mode markers
_LOG4J = Path(__file__).with_name("log4j2.properties")
_lock = threading.Lock()
_session: SparkSession | None = None
_master: str | None = None


def _log4j_file() -> Path:
    """The shipped log4j2 file, or a copy in the temp dir when the package was installed without it."""
    if _LOG4J.is_file():
        return _LOG4J
    fallback = Path(tempfile.gettempdir()) / "chaosbed-log4j2.properties"
    fallback.write_text(
        "rootLogger.level = error\nrootLogger.appenderRef.stderr.ref = console\n"
        "appender.console.type = Console\nappender.console.name = console\n"
        "appender.console.target = SYSTEM_ERR\n"
    )
    return fallback


def requested(target: str | None) -> str | None:
    """The target asked for: `target`, else $CHAOSBED_SPARK, else None (the service if running, else local)."""
    return target or os.environ.get(TARGET_ENV) or None


def is_connect(target: str | None) -> bool:
    return bool(target) and target.startswith("sc://")


def is_local(master: str | None) -> bool:
    """True when the target's Python workers run on this machine and read its files: an in-process session, the
    Spark service (local or auto) or a Connect server on the loopback address."""
    if master is None or master in (AUTO, "local") or master.startswith("local"):
        return True
    if is_connect(master):
        host = master[len("sc://") :].split("/")[0].split(";")[0].rsplit(":", 1)[0]
        return host in ("127.0.0.1", "localhost", "[::1]")
    return False


def check_target(target: str | None) -> None:
    """Raises ValueError for a target that names nothing (an empty string, an sc:// URL without a port)."""
    if target is None:
        return
    if not target.strip():
        raise ValueError("an empty Spark target: use auto, local, sc://HOST:PORT or a master URL")
    if is_connect(target) and not target[len("sc://") :].split("/")[0].split(";")[0].rsplit(":", 1)[-1].isdigit():
        raise ValueError(f"{target}: a Spark Connect URL is sc://HOST:PORT")


@contextlib.contextmanager
def using(target: str | None) -> Iterator[str]:
    """Resolves a target to a concrete one (LOCAL, an sc:// URL or a master) for one check. When that is the Spark
    service, the check holds a lease on it: the service's idle timeout does not stop it mid-check."""
    from analysis import spark_service

    t = requested(target)
    check_target(t)
    if t is None or t == AUTO or (is_connect(t) and _is_service(t)):
        with spark_service.lease(start_if_needed=t == AUTO) as info:
            if info is not None:
                yield info.client_url
                return
            if t is not None:  # an sc:// URL of a service that just stopped: connect fails with a clear message
                yield t
                return
    yield LOCAL if t in (None, "local") else t


def _is_service(url: str) -> bool:
    from analysis import spark_service

    info = spark_service.status()
    return info is not None and info.url == url.split("/;")[0].rstrip("/")


def resolve(target: str | None) -> str:
    """The concrete target (without a lease): None -> the service's URL if one runs, else LOCAL; auto -> the
    service's URL (started if needed); local -> LOCAL."""
    with using(target) as concrete:
        return concrete


def session_config(master: str | None = None) -> dict[str, str]:
    """The configuration of chaosbed's session (a dict, so a test or a user can see and extend it)."""
    conf = {
        "spark.app.name": "chaosbed-check",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "1g",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={_log4j_file().as_uri()}",
        "spark.executor.extraJavaOptions": f"-Dlog4j2.configurationFile={_log4j_file().as_uri()}",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.pythonUDF.arrow.enabled": "true",
        # the per-sender groups are large; bigger Arrow batches cut per-batch overhead (measured: 2.8 s -> 2.0 s/1M)
        "spark.sql.execution.arrow.maxRecordsPerBatch": "200000",
    }
    if is_local(master):
        conf |= {
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.host": "127.0.0.1",
        }
    return conf


JVM_LOG = Path(tempfile.gettempdir()) / f"chaosbed-spark-{os.getuid() if hasattr(os, 'getuid') else 0}.log"


@contextlib.contextmanager
def _jvm_stderr_to(path: Path) -> Iterator[None]:
    """The gateway JVM started in this block writes its stderr (a start-up warning about incubator modules, and any
    log line at ERROR level) to `path` instead of the terminal. Done by giving PySpark's launcher a Popen with
    `stderr` set, so this process's own stderr is never touched (safe while another thread prints)."""
    from pyspark import java_gateway

    original = getattr(java_gateway, "Popen", None)
    if original is None:  # another PySpark layout: stay correct, just not quiet
        yield
        return
    with open(path, "ab") as log:

        def popen(*args: object, **kwargs: object) -> object:
            kwargs.setdefault("stderr", log)
            return original(*args, **kwargs)

        java_gateway.Popen = popen
        try:
            yield
        finally:
            java_gateway.Popen = original


def get_spark(master: str | None = None) -> SparkSession:
    """Returns the process's session for a target (see the module's docstring), starting it on first use. Another
    target stops and replaces it."""
    global _session, _master
    wanted = requested(master)
    concrete = wanted if is_connect(wanted) else resolve(wanted)  # an sc:// URL as is: no lock, no lease here
    with _lock:
        if _session is not None and _master == concrete:
            return _session
        if _session is not None:
            _end_session(_session)
            _session = None
            _master = None
        if is_connect(concrete):
            from pyspark.sql import SparkSession

            _probe(concrete)
            _session = SparkSession.builder.remote(concrete).getOrCreate()
            if "session_id=" in concrete:  # the service's shared session: stopping a client must not close it
                _session.release_session_on_close = False
            # at exit the client would release the session and clean up over RPCs, retrying for minutes when the
            # server is gone; closing the channel first (atexit runs the later handler first) skips all that
            atexit.register(_close_client, _session)
            _master = concrete
            return _session
        master = None if concrete == LOCAL else concrete
        for var in CONNECT_ENV:  # set by an earlier Connect session: the builder would make a Connect one again
            os.environ.pop(var, None)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        if is_local(master):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.master(master or LOCAL)
        for key, value in session_config(master).items():
            builder = builder.config(key, value)
        with _jvm_stderr_to(JVM_LOG):
            _session = builder.getOrCreate()
        _session.sparkContext.setLogLevel("ERROR")
        _master = master or LOCAL
        return _session


def _probe(url: str) -> None:
    """Fails at once when nothing listens at a Connect URL (the client would retry for minutes)."""
    import socket

    hostport = url[len("sc://") :].split("/")[0].split(";")[0]
    host, _, port = hostport.rpartition(":")
    try:
        socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=5).close()
    except (OSError, ValueError) as exc:
        raise ConnectionError(f"nothing answers at {url.split('/;')[0]} ({exc})") from None


def _close_client(session: SparkSession) -> None:
    with contextlib.suppress(Exception):
        session.client.close()


def drop_connect_session(url: str) -> None:
    """Closes this process's Connect client when it points at `url` (the service is being stopped)."""
    global _session, _master
    with _lock:
        if _session is not None and _master is not None and _master.split("/;")[0].rstrip("/") == url:
            _close_client(_session)
            _session = None
            _master = None


def stop_spark() -> None:
    """Stops the process's session (tests and the benchmark call this to measure a cold start). For a Connect
    session this closes the client only; the server keeps running."""
    global _session, _master
    with _lock:
        if _session is not None:
            _end_session(_session)
        _session = None
        _master = None


def _end_session(session: SparkSession) -> None:
    """Ends this process's use of a session. A Connect session is only closed on the client side: stopping it would
    release the service's shared session over RPCs, retrying for minutes when the server has gone (a worker of the
    test suite hung there when the service it had used was replaced)."""
    with contextlib.suppress(Exception):
        if session_is_connect(session):
            _close_client(session)  # the server and its shared session keep running
        else:
            session.stop()


def session_is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect session (no sparkContext, no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def default_parallelism(spark: SparkSession) -> int:
    """The session's task slots: sparkContext.defaultParallelism, or the server's setting on Spark Connect."""
    if not session_is_connect(spark):
        return spark.sparkContext.defaultParallelism
    value = spark.conf.get("spark.default.parallelism", None)
    return int(value) if value and value.isdigit() else (os.cpu_count() or 2)


def warm_up_job(url: str) -> None:
    """Checks a tiny synthetic run on a Connect server: its Python workers import the checks and its JVM compiles
    the job's path once, so the first real check is as quick as the later ones (measured: 4.7 s -> 1.4 s)."""
    from analysis.pipeline import run_pipeline
    from analysis.synth import write_run

    with tempfile.TemporaryDirectory(prefix="chaosbed-warm-up-") as tmp:
        write_run(Path(tmp) / "run", members=3, rounds=10, inject=("gap",), seed=0)
        run_pipeline(Path(tmp) / "run", url)

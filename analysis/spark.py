"""The one Spark session of a process, for any Spark target (spark_config.py says what a target names).

A local target is an in-process session, quiet and fast (spark_config.session_config); the Spark service's target is
a Spark Connect client of its shared server-side session, taken under a lease (spark_service.lease) for each check.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis import spark_service
from analysis.spark_cluster import code_zip
from analysis.spark_config import (
    AUTO,
    CONNECT_ENV,
    LOCAL,
    check_target,
    connect_host_port,
    is_connect,
    is_local,
    requested,
    session_config,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import RetryPolicy

_lock = threading.Lock()
_session: SparkSession | None = None
_master: str | None = None
# the folder of the checks' code zip that a cluster session's executors fetch from the driver; removed with the
# session (or at exit: TemporaryDirectory's finalizer)
_code_folder: tempfile.TemporaryDirectory[str] | None = None


@contextlib.contextmanager
def using(target: str | None, warm_up: spark_service.WarmUp | None = None) -> Iterator[str]:
    """Resolves a target to a concrete one (LOCAL, an sc:// URL or a master) for one check. When that is the Spark
    service, the check holds a lease on it: the service's idle timeout does not stop it mid-check. `warm_up` is
    the first job of a service this starts (spark_service.start)."""
    t = requested(target)
    check_target(t)
    if t is None or t == AUTO or (is_connect(t) and _is_service(t)):
        with contextlib.ExitStack() as stack:
            try:
                lease = spark_service.lease(start_if_needed=t in (None, AUTO), warm_up=warm_up)
                info = stack.enter_context(lease)
            except (spark_service.SparkServiceError, OSError) as exc:
                if t is not None:  # asked for by name: the caller reports it
                    raise
                print(f"chaosbed: the Spark service could not start ({exc}); checking in this process", file=sys.stderr)
                info = None
            if info is not None:
                yield info.client_url
                return
            if t is not None:  # an sc:// URL of a service that just stopped: connect fails with a clear message
                yield t
                return
    yield LOCAL if t in (None, "local") else t


def _is_service(url: str) -> bool:
    info = spark_service.status()
    return info is not None and info.url == url.split("/;")[0].rstrip("/")


def resolve(target: str | None) -> str:
    """The concrete target (without a lease): None and auto -> the service's URL (started if needed; None falls
    back to LOCAL where it cannot start); local -> LOCAL."""
    with using(target) as concrete:
        return concrete


JVM_LOG = Path(tempfile.gettempdir()) / f"chaosbed-spark-{os.getuid() if hasattr(os, 'getuid') else 0}.log"


@contextlib.contextmanager
def _jvm_stderr_to(path: Path) -> Iterator[None]:
    """The gateway JVM started in this block writes its stderr (a start-up warning about incubator modules, and any
    log line at ERROR level) to `path` instead of the terminal. Done by giving PySpark's launcher a Popen with
    `stderr` set, so this process's own stderr is never touched (safe while another thread prints)."""
    from unittest import mock

    from pyspark import java_gateway

    original = getattr(java_gateway, "Popen", None)
    if original is None:  # another PySpark layout: stay correct, just not quiet
        yield
        return
    with open(path, "ab") as log:

        def popen(*args: Any, **kwargs: Any) -> subprocess.Popen:
            kwargs.setdefault("stderr", log)
            return original(*args, **kwargs)

        with mock.patch.object(java_gateway, "Popen", popen):  # restored however the block ends
            yield


def get_spark(master: str | None = None) -> SparkSession:
    """Returns the process's session for a target (see the module's docstring), starting it on first use. Another
    target stops and replaces it."""
    global _session, _master, _code_folder
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
            from pyspark.sql.connect.session import SparkSession as ConnectSession

            _probe(concrete)
            _session = SparkSession.builder.remote(concrete).getOrCreate()
            if isinstance(_session, ConnectSession):
                _session.client.set_retry_policies([_connect_retries()])
            spark_service.on_stop(drop_connect_session)  # stopping the service first closes this client
            if "session_id=" in concrete and isinstance(_session, ConnectSession):
                _session.release_session_on_close = False  # the service's shared session: a client must not close it
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
        if not is_local(master):  # executors on other hosts get the checks' code with the job, not an installation
            _code_folder = tempfile.TemporaryDirectory(prefix="chaosbed-checks-")
            _session.sparkContext.addPyFile(str(code_zip(Path(_code_folder.name))))
        _master = master or LOCAL
        return _session


CONNECT_RETRIES = 8  # a server that went away is given up after ~16 s of retries (the client's default: 10 minutes)
CONNECT_MAX_BACKOFF_MS = 3000


def _connect_retries() -> RetryPolicy:
    """The Connect client's retry policy: its default retries an unavailable server for at least 10 minutes, so a
    check whose service died hung that long; a local service that answers does within seconds."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    return DefaultPolicy(max_retries=CONNECT_RETRIES, max_backoff=CONNECT_MAX_BACKOFF_MS)


def _probe(url: str) -> None:
    """Fails at once when nothing listens at a Connect URL (the client would retry for minutes)."""
    import socket

    host, _, port = connect_host_port(url).rpartition(":")
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
    global _code_folder
    with contextlib.suppress(Exception):
        if session_is_connect(session):
            _close_client(session)  # the server and its shared session keep running
        else:
            session.stop()
    if _code_folder is not None:
        _code_folder.cleanup()
        _code_folder = None


def session_is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect session (no sparkContext, no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def default_parallelism(spark: SparkSession) -> int:
    """The session's task slots: sparkContext.defaultParallelism, or the server's setting on Spark Connect."""
    if not session_is_connect(spark):
        return spark.sparkContext.defaultParallelism
    value = spark.conf.get("spark.default.parallelism", None)
    return int(value) if value and value.isdigit() else (os.cpu_count() or 2)

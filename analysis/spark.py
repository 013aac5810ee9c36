"""The one Spark session of a process: quiet and fast in local mode, any master on request.

Settings measured on a 2-core machine (see DESIGN.md, "Performance notes"): no UI, 2 shuffle partitions, bound to
127.0.0.1, an ERROR-level log4j2 file given to the driver JVM at start (setLogLevel comes too late), 1 GiB driver.
"""

from __future__ import annotations

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


def is_local(master: str | None) -> bool:
    return master is None or master.startswith("local")


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
    """Returns the process's session, starting it on first use. A different master stops and replaces it."""
    global _session, _master
    with _lock:
        if _session is not None and _master == (master or LOCAL):
            return _session
        if _session is not None:
            _session.stop()
            _session = None
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


def stop_spark() -> None:
    """Stops the process's session (tests and the benchmark call this to measure a cold start)."""
    global _session, _master
    with _lock:
        if _session is not None:
            _session.stop()
        _session = None
        _master = None

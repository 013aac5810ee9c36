"""Where the checks run (a Spark target) and how chaosbed configures Spark: plain functions, no Spark import.

A "spark target" names where the checks run (one notion everywhere: the CLI's --spark and --master, analyze's
`master`, the CHAOSBED_SPARK environment variable when none is given):
  None          the default: the Spark service of this state root (analysis/spark_service.py), started on demand
                and stopped by itself after a few idle minutes; where it cannot start (no state root, no Connect
                client), an in-process local session, with a note on stderr
  "auto"        the Spark service, started on demand (an error where it cannot start)
  "local"       always an in-process local session (also "local[N]", "local[*]")
  "sc://H:P"    that Spark Connect server
  anything else a classic master URL (spark://..., yarn, k8s://...), as --master always did

Settings measured on a 2-core machine (docs/benchmarks.md): no UI, 2 shuffle partitions, bound to
127.0.0.1, an ERROR-level log4j2 file given to the driver JVM at start (setLogLevel comes too late), 1 GiB driver.
Both the in-process session (spark.py) and the Spark service's server (spark_service.py) use them.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TypeGuard

from analysis.spark_cds import archive_options, extra_options

LOCAL = "local[*]"
TARGET_ENV = "CHAOSBED_SPARK"
AUTO = "auto"
CONNECT_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")  # PySpark's Connect mode markers
_LOG4J = Path(__file__).with_name("log4j2.properties")


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


def jvm_options() -> str:
    """The options of every Spark JVM chaosbed starts: the quiet log4j2 file, the class-data archive where `make setup`
    made one (analysis/spark_cds.py), then $CHAOSBED_SPARK_JVM_OPTIONS."""
    return " ".join([f"-Dlog4j2.configurationFile={_log4j_file().as_uri()}", *archive_options(), *extra_options()])


def requested(target: str | None) -> str | None:
    """The target asked for: `target`, else $CHAOSBED_SPARK, else None (the default: the service, started on
    demand)."""
    return target or os.environ.get(TARGET_ENV) or None


def is_connect(target: str | None) -> TypeGuard[str]:
    """A Spark Connect URL (sc://...)."""
    return target is not None and target.startswith("sc://")


def connect_host_port(url: str) -> str:
    """ "HOST:PORT" of a Spark Connect URL (sc://HOST:PORT/;param=...)."""
    return url[len("sc://") :].split("/")[0].split(";")[0]


def is_local(master: str | None) -> bool:
    """True when the target's Python workers run on this machine and read its files: an in-process session, the
    Spark service (local or auto) or a Connect server on the loopback address."""
    if master is None or master in (AUTO, "local") or master.startswith("local"):
        return True
    if is_connect(master):
        host = connect_host_port(master).rsplit(":", 1)[0]
        return host in ("127.0.0.1", "localhost", "[::1]")
    return False


def is_loopback_master(master: str | None) -> bool:
    """A standalone master on this machine's loopback address (`chaosbed spark cluster start`): its executors reach
    the driver there, so the driver binds there too (else it binds to the host name's address)."""
    if master is None or not master.startswith("spark://"):
        return False
    host = master[len("spark://") :].split(",")[0].rsplit(":", 1)[0]
    return host in ("127.0.0.1", "localhost")


def check_target(target: str | None) -> None:
    """Raises ValueError for a target that names nothing (an empty string, an sc:// URL without a port)."""
    if target is None:
        return
    if not target.strip():
        raise ValueError("an empty Spark target: use auto, local, sc://HOST:PORT or a master URL")
    if is_connect(target) and not connect_host_port(target).rsplit(":", 1)[-1].isdigit():
        raise ValueError(f"{target}: a Spark Connect URL is sc://HOST:PORT")


def session_config(master: str | None = None) -> dict[str, str]:
    """The configuration of chaosbed's session (a dict, so a test or a user can see and extend it)."""
    conf = {
        "spark.app.name": "chaosbed-check",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "1g",
        "spark.driver.extraJavaOptions": jvm_options(),
        "spark.executor.extraJavaOptions": jvm_options(),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.pythonUDF.arrow.enabled": "true",
        # the per-sender groups are large; bigger Arrow batches cut per-batch overhead (measured: 2.8 s -> 2.0 s/1M)
        "spark.sql.execution.arrow.maxRecordsPerBatch": "200000",
    }
    if is_local(master):
        conf |= {"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"}
    if is_local(master) or is_loopback_master(master):
        conf |= {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}
    return conf

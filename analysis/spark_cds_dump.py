"""`python -m analysis.spark_cds_dump`: the session whose driver dumps Spark's classes into the class-data archive as
it exits (the child of analysis/spark_cds.py's make_archive, which gives it the dumping option and waits for the
driver to end). A module of its own: it sits above the pipeline, spark_cds below it."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from analysis.pipeline import run_pipeline
from analysis.spark import get_spark
from analysis.spark_config import LOCAL
from analysis.synth import write_run


def dump() -> int:
    """The dumping session (the child of make_archive): checks a small synthetic run locally, prints its driver's pid
    and stops; the driver writes the archive when it exits after this process."""
    with tempfile.TemporaryDirectory(prefix="chaosbed-cds-") as tmp:
        write_run(Path(tmp) / "run", members=3, rounds=10, inject=("gap",), seed=0)
        run_pipeline(Path(tmp) / "run", LOCAL)
        spark = get_spark(LOCAL)
        jvm = spark.sparkContext._jvm
        assert jvm is not None  # a local session has its gateway
        pid = jvm.java.lang.ProcessHandle.current().pid()
        spark.stop()
    print(f"driver pid {pid}")
    return 0


if __name__ == "__main__":
    sys.exit(dump())

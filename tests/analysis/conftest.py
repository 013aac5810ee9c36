"""One local Spark session for the whole test process: starting one costs 10-20 s on a 2-core machine."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    pytest.importorskip("pyspark")
    from analysis.spark import get_spark, stop_spark

    session = get_spark()
    yield session
    stop_spark()

"""One Spark session for the whole test process (on the warm service, or local): starting one costs 10-20 s."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark_target() -> Iterator[str]:
    """The suite's Spark target. On the warm Spark service (CHAOSBED_SPARK=auto, set by the chaosbed plugin) it holds
    a lease while this process's tests run, so the service is neither idled out nor replaced under them."""
    pytest.importorskip("pyspark")
    from analysis.spark import stop_spark, using

    with using(None) as target:
        yield target
    stop_spark()


@pytest.fixture
def spark(spark_target: str) -> object:
    """The process's session on the suite's target, asked for by each test (cheap: it is cached): a session kept
    from an earlier test may have been closed since (a check on another target replaces the process's session)."""
    from analysis.spark import get_spark

    return get_spark(spark_target)

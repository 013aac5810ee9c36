"""One Spark session for the whole test process (on the warm service, or local): starting one costs 10-20 s."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    pytest.importorskip("pyspark")
    from analysis.spark import get_spark, stop_spark, using

    # on the warm Spark service (CHAOSBED_SPARK=auto, set by the chaosbed plugin) the session holds a lease while the
    # tests use it, so the service is neither idled out nor replaced under them
    with using(None) as target:
        yield get_spark(target)
    stop_spark()

"""The known-bug catalogue on real members in network namespaces: the same verdicts as on the simulator, i.e. every
flawed variant violates exactly the checks its file names and every fixed variant passes; the bugs of the real
JGroups 2.12 jar (marked `jgroups`) run here too. One bug per test (its two variants side by side), so pytest-xdist
spreads the catalogue over its workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bug_catalogue import BUG_FILES, assert_reproduced, bug_params, run_catalogue
from tests.clusters import chaos_tests

pytestmark = [
    pytest.mark.netns,
    pytest.mark.spark,
    pytest.mark.slow,
    *chaos_tests(),
]


@pytest.mark.parametrize("path", bug_params(BUG_FILES))
def test_flawed_fails_with_the_named_checks_and_fixed_passes_on_netns(path: Path, tmp_path: Path) -> None:
    entries, result = run_catalogue("netns", tmp_path, only=path)  # one bug per test: xdist spreads them
    assert_reproduced(result, path, entries)

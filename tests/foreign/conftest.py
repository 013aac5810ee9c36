"""tests/foreign: foreign members (docs/scenario-format.md, "Foreign members"). The JGroups tests run the real jars
(JGroups 2.12.2 from Debian, the 5.x releases from Maven Central; marked `jgroups`, skipped with the reason when no
JDK or jar is found, which CHAOSBED_REQUIRE turns into a failure) through the Cluster API (tests/foreign/
jgroups_clusters.py) on the process backend, and in network namespaces too when root is there (that half marked
`netns`)."""

from __future__ import annotations

import pytest

from foreign import jgroups

JGROUPS_MISSING = jgroups.missing()

skip_without_jgroups = pytest.mark.skipif(JGROUPS_MISSING is not None, reason=str(JGROUPS_MISSING))


@pytest.fixture(scope="session")
def jgroups_built() -> None:
    """The 2.12 member is built (make jgroups) once per session."""
    if JGROUPS_MISSING is not None:
        pytest.skip(JGROUPS_MISSING)
    jgroups.build()

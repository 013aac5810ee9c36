"""tests/process: real member processes on loopback, no root needed. Tests parametrised with tests.clusters.BACKENDS
run on netns too when root is there (that half is marked `netns`)."""

from tests.clusters import make_cluster  # noqa: F401 - the fixture

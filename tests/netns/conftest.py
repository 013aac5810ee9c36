"""tests/netns: tests that need root (network namespaces, nft, iptables, NFQUEUE); each module skips itself
without them and is marked `netns`."""

from tests.clusters import make_cluster  # noqa: F401 - the fixture

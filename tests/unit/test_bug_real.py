"""A bug file's real-release pair ([bug.real]) and the registry's list of releases: parsed and refused by key, the
variants it adds, and the releases between two versions in release order (a synthetic maven-metadata.xml: no
network here; tests/netns/test_bisect.py uses Maven Central's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from foreign.jgroups.registry import RegistryError, between, parse_versions
from orchestration.matrix.bugs import bug_matrix, catalogue
from orchestration.scenario import ScenarioError, load

BASE = """
name = "b"
[bug]
id = "JGRP-1"
title = "t"
violates = ["timeout"]
{bug}
[cluster]
members = 2
{cluster}
[[workload]]
kind = "unicast"
to = "B"
from = "A"
count = 1
"""


def write(tmp_path: Path, bug: str, cluster: str = "") -> Path:
    p = tmp_path / "b.toml"
    p.write_text(BASE.format(bug=bug, cluster=cluster))
    return p


def test_a_real_pair_adds_two_variants_with_the_releases(tmp_path: Path) -> None:
    real = '[bug.real]\nsystem = "jgroups-5"\nflawed = "5.4.6"\nfixed = "5.4.7"\nviolates = ["complete"]'
    p = write(tmp_path, 'flawed = { "cluster.stack" = "unicast2" }\nfixed = {}\n' + real)
    bug = load(p).bug
    assert bug is not None and bug.real is not None
    assert bug.variants == ("flawed", "fixed", "real-flawed", "real-fixed")
    assert bug.settings("real-fixed") == {"cluster.system": "jgroups-5", "cluster.version": "5.4.7"}
    assert bug.must_violate("flawed") == ["timeout"] and bug.must_violate("real-flawed") == ["complete"]
    assert bug.must_violate("real-fixed") is None


def test_a_bug_with_only_real_releases_has_no_model_variants(tmp_path: Path) -> None:
    p = write(tmp_path, '[bug.real]\nsystem = "jgroups-5"\nflawed = "5.4.8"\nfixed = "5.4.10"')
    bug = load(p).bug
    assert bug is not None and not bug.modelled and bug.variants == ("real-flawed", "real-fixed")
    assert bug.must_violate("real-flawed") == ["timeout"]  # the bug's violates by default


@pytest.mark.parametrize(
    ("real", "message"),
    [
        ('system = "jgroups-5"\nflawed = "5.4.8"', "bug.real.fixed: a non-empty string is required"),
        ('system = "jgroups-5"\nflawed = "5.4.8"\nfixed = "5.4.8"', "bug.real.fixed: the fixing release must differ"),
        ('system = "jgroups-5"\nflawed = "5.4.8"\nfixed = "5.4.10"\nwhen = 1', "bug.real.when: unknown key"),
        ('system = "jgroups-5"\nflawed = "5.4.8"\nfixed = "5.4.10"\nviolates = ["nope"]',
         "bug.real.violates: unknown check 'nope'"),
    ],
)  # fmt: skip
def test_a_bad_real_pair_is_refused_naming_the_key(tmp_path: Path, real: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        load(write(tmp_path, f"[bug.real]\n{real}"))


def test_the_catalogue_runs_its_real_pairs_beside_the_models() -> None:
    real = [e for e in catalogue() if e.bug.real is not None]
    assert {e.path.stem for e in real} >= {
        "mcast-window-full-two-stop-acking", "nakack4-spurious-ack-left-member", "nakack4-highest-seqno-no-ack",
        "nakack2-stable-over-retransmits",
    }  # fmt: skip
    cells = bug_matrix(real, ["netns"]).cells
    by_label = {(c.scenario.stem, c.label): c for c in cells}
    c = by_label[("mcast-window-full-two-stop-acking", "real-flawed")]
    assert c.settings == {"cluster.system": "jgroups-5", "cluster.version": "5.4.6"}
    assert c.expect.violates == ["views_converge", "timeout"] and "nakack4-window-100.xml" in c.system
    assert ("nakack4-spurious-ack-left-member", "flawed") not in by_label  # not modelled: the real pair only
    c = by_label[("nakack2-stable-over-retransmits", "real-flawed")]
    assert c.settings == {"cluster.system": "jgroups-5", "cluster.version": "5.2.12"}
    assert c.expect.violates == ["control_per_heal"] and "udp-fast-stable-500ms.xml" in c.system
    assert by_label[("nakack4-highest-seqno-no-ack", "real-fixed")].settings["cluster.version"] == "5.4.6"


METADATA = """<metadata><groupId>org.jgroups</groupId><artifactId>jgroups</artifactId><versioning><versions>
<version>5.4.8.Final</version><version>5.4.10.Final</version><version>5.4.0.Final</version>
<version>5.5.0.CR1</version><version>5.5.0.Final</version><version>3.6.4</version><version>3.6.4.Final</version>
<version>not-a-release</version></versions></versioning></metadata>"""


def test_the_registry_list_is_in_release_order_and_ranges_keep_to_it() -> None:
    releases = parse_versions(METADATA)
    assert [r.version for r in releases] == ["3.6.4", "5.4.0", "5.4.8", "5.4.10", "5.5.0.CR1", "5.5.0"]
    assert [r.version for r in between(releases, "5.4.8", "5.5.0")] == ["5.4.8", "5.4.10", "5.5.0"]
    assert "5.5.0.CR1" in [r.version for r in between(releases, "5.4.8", "5.5.0", finals_only=False)]
    with pytest.raises(RegistryError, match=r"5.4.9 is not a release Maven Central serves; served 5.4.x: 5.4.0, "):
        between(releases, "5.4.0", "5.4.9")
    with pytest.raises(RegistryError, match="comes before"):
        between(releases, "5.5.0", "5.4.0")

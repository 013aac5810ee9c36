"""What the onset probes conclude from which probes arrived (orchestration/onset_probes.py observed_onsets), on
synthetic probe records: one probe per link per millisecond."""

from __future__ import annotations

from chaos.faults import FaultRecord, FaultWindow
from chaos.normalize import normalize
from orchestration.onset_probes import LOOKBACK_NS, SETTLE_NS, observed_onsets

MS = 1_000_000
P = 10_000 * MS  # a fault's planned instant
NAMES = ["A", "B", "C"]
LINKS = [(a, b) for a in NAMES for b in NAMES if a != b]
SENT = {link: [P - 1000 * MS + i * MS for i in range(3000)] for link in LINKS}  # from P - 1 s to P + 2 s
NOW = P + 2000 * MS + SETTLE_NS


def record(fault_id: str, kind: str, start: int, until: int | None, **args: object) -> FaultRecord:
    return FaultRecord(fault_id, normalize(kind, args, NAMES), window=FaultWindow(start, until))


def arrived(dropped: dict[tuple[str, str], range]) -> dict[tuple[str, str], set[int]]:
    """Every probe arrived but those sent in the given time ranges (ns) on each link."""
    return {link: {i for i, t in enumerate(SENT[link]) if t not in dropped.get(link, range(0))} for link in LINKS}


def test_the_first_probe_dropped_is_the_observed_onset() -> None:
    f = record("f1", "partition", P, P + 300 * MS, **{"from": "A", "to": "B", "one_way": True})
    got = arrived({("A", "B"): range(P + 2 * MS, P + 300 * MS)})
    (onset,) = observed_onsets(SENT, got, [f], NOW).values()
    assert (onset.link, onset.planned, onset.observed, onset.last_through) == (("A", "B"), P, P + 2 * MS, P + MS)


def test_early_within_the_lookback_shows_and_earlier_drops_are_not_this_faults() -> None:
    f = record("f1", "loss", P, None, **{"from": "A", "to": "B", "probability": 1.0})
    early = arrived({("A", "B"): range(P - 50 * MS, NOW)})
    assert observed_onsets(SENT, early, [f], NOW)["f1"].observed == P - 50 * MS
    unrelated = arrived({("A", "B"): range(P - LOOKBACK_NS - 20 * MS, P - LOOKBACK_NS - 10 * MS)})
    assert observed_onsets(SENT, unrelated, [f], NOW) == {}  # nothing dropped from P - LOOKBACK_NS on


def test_a_link_another_fault_holds_says_nothing_about_this_one() -> None:
    held = record("f1", "partition", P - 500 * MS, None, **{"from": "A", "to": "B"})
    split = record("f2", "split", P, P + 300 * MS, groups=[["A"], ["B", "C"]])
    got = arrived({("A", "B"): range(P - 500 * MS, NOW), ("C", "A"): range(P + 5 * MS, P + 300 * MS)})
    onsets = observed_onsets(SENT, got, [held, split], NOW)
    assert onsets["f2"].link == ("C", "A") and onsets["f2"].observed == P + 5 * MS  # A<->B are f1's
    # a discard that dropped nothing is not credited with what a later fault on its link dropped (nor is the later
    # one judged: the discard still holds the link)
    discard = record("f3", "discard", P, None, match="UNICAST3.ACK()", **{"from": "C", "to": "A"})
    later = record("f4", "partition", P + 500 * MS, None, **{"from": "C", "to": "A", "one_way": True})
    got = arrived({("C", "A"): range(P + 500 * MS, NOW)})
    assert observed_onsets(SENT, got, [discard, later], NOW) == {}


def test_only_faults_that_drop_probes_and_only_settled_probes_are_judged() -> None:
    delay = record("f1", "delay", P, None, **{"from": "A", "to": "B", "delay": 0.5})
    slow = record("f2", "discard", P, None, match="UNICAST3.DATA()", action="delay", delay=0.5, **{"from": "B"})
    everything_lost = arrived(dict.fromkeys(LINKS, range(P, NOW)))
    assert observed_onsets(SENT, everything_lost, [delay, slow], NOW) == {}
    f = record("f3", "loss", P, None, **{"from": "A", "to": "B", "probability": 1.0})
    assert observed_onsets(SENT, everything_lost, [f], P + SETTLE_NS) == {}  # its probes may still be in flight
    assert observed_onsets(SENT, everything_lost, [f], P + SETTLE_NS + MS)["f3"].observed == P


def test_a_probe_stamped_early_but_sent_late_counts_from_when_its_sendto_returned() -> None:
    """The sender stalled 50 ms between stamping probe P - 47 ms and sending it: the fault dropped it on time."""
    f = record("f1", "discard", P, None, match="UNICAST3.DATA()", count=1, **{"from": "C", "to": "A"})
    sent = {link: list(times) for link, times in SENT.items()}
    returned = {link: list(times) for link, times in SENT.items()}
    stalled = sent[("C", "A")].index(P - 47 * MS)
    returned[("C", "A")][stalled] = P + 3 * MS
    got = arrived({("C", "A"): range(P - 47 * MS, P - 46 * MS)})
    onset = observed_onsets(sent, got, [f], NOW, returned)["f1"]
    assert (onset.observed, onset.observed_sent_by) == (P - 47 * MS, P + 3 * MS)
    assert observed_onsets(sent, got, [f], NOW)["f1"].observed_sent_by == P - 47 * MS  # without: the stamp

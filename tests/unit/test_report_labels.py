"""analysis/report.py label_rows: fault labels that would run into each other go to rows of their own."""

from __future__ import annotations

from analysis.report import label_rows


def test_labels_starting_together_get_rows_of_their_own_and_free_rows_are_reused() -> None:
    # (start s, length in characters), one character = 0.1 s: a label of 10 characters spans 1 s
    labels = [(0.0, 10), (0.0, 10), (0.5, 3), (1.2, 5), (1.3, 5), (5.0, 40)]
    assert label_rows(labels, 0.1) == [0, 1, 2, 0, 1, 0]


def test_one_label_and_none() -> None:
    assert label_rows([(3.0, 7)], 0.5) == [0]
    assert label_rows([], 0.5) == []

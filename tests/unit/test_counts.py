"""The one count of records lost and read twice (``multikafka.devstack.counts``),
which the demo's verification, the chaos soak and the tests share."""

from __future__ import annotations

from multikafka.devstack.counts import ReadCounts, count_keys, sequence_report


def test_lost_duplicated_and_unexpected_records() -> None:
    counts = count_keys(["r:0", "r:1", "r:1", "r:1", "r:5", "b:0", "__fence__"])
    report = counts.report({"r": 4})
    assert report.missing == ["r:2", "r:3"]
    assert report.lost == 2
    assert report.duplicated == {"r:1": 3}
    assert report.read_again == 2
    assert report.unexpected == ["r:5", "b:0"]


def test_counts_of_a_grouped_read_and_what_was_read_before() -> None:
    counts = ReadCounts()
    assert counts.add("r:3", times=2) == 0
    assert counts.add("r:3") == 2
    assert counts.add("__fence__") == -1
    assert counts.count("r", 3) == 3
    assert counts.count("r", 4) == counts.count("x", 0) == 0


def test_the_tests_report_ignores_fences_and_counts_odd_keys() -> None:
    missing, duplicated = sequence_report(["a:0", "a:0", "a:2", "k", "k", "__fence__"], {"a": 3})
    assert missing == ["a:1"]
    assert duplicated == {"a:0": 2, "k": 2}

"""Finding a mirror's copy of the last records read
(:class:`multikafka.coordinator.translation.matching.Matcher`), and the
fingerprints both sides compute (:mod:`multikafka.core._fingerprint`): a
faithful copy at shifted offsets, a re-sent batch (the latest copy), identical
records in a row (the first place: never a skip), a mirror that lags (the
longest beginning), records of other times never fingerprinted, a changed
record (no match), and a run of one."""

from __future__ import annotations

import pytest

from multikafka.coordinator.translation.matching import Found, Matcher
from multikafka.core._fingerprint import Fingerprint, decode, encode, fingerprint, pairs

INTERNALS = (
    "multikafka.coordinator.translation.matching",
    "multikafka.core._fingerprint",
)


def rec(n: int, ts: int | None = None) -> Fingerprint:
    """Record ``n`` of a source: key ``k<n>``, value ``v<n>``, time 1000 + n."""
    return fingerprint(b"k%d" % n, b"v%d" % n, 1000 + n if ts is None else ts)


def feed(matcher: Matcher, mirror: list[Fingerprint], first_offset: int = 0) -> Found | None:
    for i, fp in enumerate(mirror):
        matcher.feed(first_offset + i, fp if fp.timestamp_ms in matcher.times else None)
    return matcher.found()


def test_a_fingerprint_is_the_time_and_a_digest_of_key_and_value() -> None:
    a = fingerprint(b"k", b"v", 5)
    assert a == fingerprint(b"k", b"v", 5)
    assert a.timestamp_ms == 5
    assert 0 <= a.digest < 2**64
    # every part counts, a null is not an empty value, and the cut between
    # key and value is part of it
    others = [
        fingerprint(b"k", b"v", 6),
        fingerprint(b"k", b"w", 5),
        fingerprint(b"j", b"v", 5),
        fingerprint(None, b"v", 5),
        fingerprint(b"", b"v", 5),
        fingerprint(b"k", None, 5),
        fingerprint(b"kv", b"", 5),
    ]
    assert len({a, *others}) == 1 + len(others)
    assert decode(encode([a, *others])) == (a, *others)
    assert decode("") == ()
    assert pairs([5, 6], [a.digest, 7]) == (a, Fingerprint(6, 7))
    with pytest.raises(ValueError, match="2 fingerprint times but 1 digests"):
        pairs([5, 6], [1])
    with pytest.raises(ValueError):
        decode("5:zz")


def test_a_faithful_copy_at_shifted_offsets_is_found_at_its_last_record() -> None:
    source = [rec(n) for n in range(20)]
    matcher = Matcher(source[6:10])  # the query read up to record 9
    found = feed(matcher, source, first_offset=100)
    assert found == Found(109, 4, 4, 1)


def test_a_re_sent_batch_is_passed_over_to_its_latest_copy() -> None:
    source = [rec(n) for n in range(20)]
    # the mirror copied 0..11, then re-sent 4..11 (a task restarted), then on
    mirror = source[:12] + source[4:12] + source[12:]
    found = feed(Matcher(source[6:10]), mirror)
    assert found is not None
    assert (found.offset, found.places) == (12 + 5, 2)  # the re-sent copy of record 9
    assert mirror[found.offset + 1] == source[10]  # goes on with what was not read


def test_identical_records_in_a_row_are_matched_at_the_first_place() -> None:
    same = rec(1, ts=5000)
    source = [rec(0), same, same, same, same, same, same, rec(7)]
    # the query read up to the fourth identical record (index 4)
    found = feed(Matcher(source[1:5]), source)
    assert found is not None
    assert found.offset == 4  # never later: a later place would skip records
    assert found.places == 3


def test_a_mirror_that_lags_gives_the_longest_beginning_of_the_run() -> None:
    source = [rec(n) for n in range(20)]
    mirror = source[:8]  # the source died before records 8 and 9 were copied
    found = feed(Matcher(source[6:10]), mirror)
    assert found == Found(7, 2, 4, 1)


def test_records_at_other_times_are_never_fingerprinted() -> None:
    matcher = Matcher([rec(5), rec(6)])
    assert matcher.times == {1005, 1006}
    matcher.feed(0, None)  # another time: nothing to compare
    matcher.feed(1, rec(5))
    matcher.feed(2, rec(6))
    assert matcher.found() == Found(2, 2, 2, 1)
    assert matcher.fed == 3


def test_a_changed_record_is_no_copy() -> None:
    source = [rec(n) for n in range(10)]
    changed = [fingerprint(b"k%d" % n, b"V%d" % n, 1000 + n) for n in range(10)]  # a transform
    assert feed(Matcher(source[5:9]), changed) is None


def test_a_run_of_one_is_taken_where_first_found() -> None:
    source = [rec(n) for n in range(10)]
    found = feed(Matcher([source[3]]), source + source)
    assert found == Found(3, 1, 1, 2)


def test_an_empty_run_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        Matcher([])


def test_offsets_with_gaps_are_passed_over_by_record() -> None:
    """A compacted mirror or one with transaction markers has gaps between
    its records' offsets: the run is one of records, not of offsets."""
    source = [rec(n) for n in range(8)]
    matcher = Matcher(source[2:6])
    for offset, fp in zip([10, 13, 14, 20, 21, 27, 30, 31], source, strict=True):
        matcher.feed(offset, fp)
    assert matcher.found() == Found(27, 4, 4, 1)

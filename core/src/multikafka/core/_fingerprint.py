"""Record fingerprints: what a record keeps when a mirror copies it.

A mirror (MirrorMaker 2, Confluent Replicator, uReplicator, a home-made
copier) writes each record again on another cluster: at another offset,
maybe under another topic name, maybe twice when it re-sends a batch, but
with the same key, value and record time, in the same order within a
partition. A :class:`Fingerprint` is those three: the record time as it is
and a 64-bit BLAKE2b digest of key and value (128 bits in all). The reader
keeps the fingerprints of the last few records it read of each range
(:data:`TRAILING`), and on failover the coordinator finds the mirror's copy
of the last record a query read by them (``multikafka.coordinator.translation``).

Headers are left out on purpose: copiers add or rewrite them (Replicator's
provenance header, a tracing library's ``traceparent``), and Spark's reader
does not convert them unless a query asks for them. The time is kept
verbatim, so a mirror's records can be passed over by their time alone, and
only those at one of the times sought are hashed.

Both sides compute fingerprints with :func:`fingerprint`: the reader from
the Arrow columns it built, the coordinator from the records it fetches.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence
from typing import NamedTuple

__all__ = ["TRAILING", "Fingerprint", "decode", "encode", "fingerprint"]

#: Fingerprints kept of the records before a read position: enough that a run
#: of records must repeat (time included) to be taken for another.
TRAILING = 4

_LENGTHS = struct.Struct(">qq").pack


class Fingerprint(NamedTuple):
    """A record as a mirror keeps it: its time and a digest of key and value."""

    #: Record time, ms since the epoch (as stored: create or append time).
    timestamp_ms: int
    #: BLAKE2b-64 of the key's and value's lengths and bytes (a null is length -1).
    digest: int


def fingerprint(key: bytes | None, value: bytes | None, timestamp_ms: int) -> Fingerprint:
    """The fingerprint of one record."""
    head = _LENGTHS(-1 if key is None else len(key), -1 if value is None else len(value))
    h = hashlib.blake2b(head, digest_size=8)
    if key:
        h.update(key)
    if value:
        h.update(value)
    return Fingerprint(int(timestamp_ms), int.from_bytes(h.digest(), "big"))


def encode(fps: Iterable[Fingerprint]) -> str:
    """``time:digest`` pairs (digest in hex), comma-separated: the form kept in etcd."""
    return ",".join(f"{fp.timestamp_ms}:{fp.digest:016x}" for fp in fps)


def decode(text: str) -> tuple[Fingerprint, ...]:
    """The fingerprints :func:`encode` wrote; ``ValueError`` if malformed."""
    if not text:
        return ()
    out = []
    for part in text.split(","):
        ts, _, digest = part.partition(":")
        value = int(digest, 16)
        if not 0 <= value < 2**64:
            raise ValueError(f"fingerprint digest out of range: {digest!r}")
        out.append(Fingerprint(int(ts), value))
    return tuple(out)


def pairs(times: Sequence[int], digests: Sequence[int]) -> tuple[Fingerprint, ...]:
    """Fingerprints from their two columns (as they travel in a ``ReadMark``)."""
    if len(times) != len(digests):
        raise ValueError(f"{len(times)} fingerprint times but {len(digests)} digests")
    return tuple(Fingerprint(int(t), int(d)) for t, d in zip(times, digests, strict=True))

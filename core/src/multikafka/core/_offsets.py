"""Offset vectors: where a query stands, ``{split: next offset}``.

A stream may have 100,000 splits, and every micro-batch carries its whole
vector from Spark to the coordinator and back several times, so a vector is
kept in columns (:class:`SplitOffsets`): the splits grouped by
``(cluster, topic)``, partitions and offsets as numpy arrays, sorted by
``(cluster, topic, partition)``. Planning works on the arrays; the vector is
also a read-only ``Mapping`` from split ids (``"cluster/topic/partition"``)
for code that looks up a few splits.

Three forms leave a process, and this module is the one place that writes and
reads them:

* the **document** that Spark stores in its offsets log every batch
  (:func:`to_document`, :func:`parse`): ``{"cluster": {"topic": [offset of
  partition 0, of partition 1, ...]}}``, or ``{"topic": {"partition":
  offset}}`` for a topic whose partitions are not exactly ``0..n-1``. Spark
  compares offsets as raw JSON text, so one vector has exactly one document
  (clusters and topics sorted), and it is never empty: a stream with no split
  yet is the placeholder :data:`NO_SPLITS`. The flat form of earlier versions,
  ``{"cluster/topic/partition": offset}`` (about 2.8 times the bytes), is
  read forever: old checkpoints hold it.
* the **wire** form (:func:`to_columns`, :func:`from_columns`): the same
  columns as packed protobuf fields, which decode into numpy without a
  Python object per split.
* a plain ``dict`` (:meth:`SplitOffsets.to_dict`), for small vectors and tests.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from multikafka.core.exceptions import ValidationError, shown
from multikafka.core.model import SplitId
from multikafka.v1 import planner_pb2

#: Placeholder entry of the vector of a stream that has no splits (yet).
NO_SPLITS = "<no splits>"

OFFSET_MAX = 2**63 - 1
#: Partitions are 32-bit (``0 <= partition < 2**31``).
PARTITION_LIMIT = 2**31

#: The flat form: ``{split id: offset}``.
OffsetVector = dict[str, int]
#: ``(cluster, topic)``: the splits of one topic in one cluster.
Group = tuple[str, str]
I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

_SHIFT = 32
_MASK = (1 << _SHIFT) - 1
#: Vectors up to this size remember where their splits are in others
#: (:meth:`Splits.positions`), up to this many answers each.
_MEMO_SPLITS = 10_000
_MEMO_ENTRIES = 16


def _empty() -> I64:
    return np.zeros(0, dtype=np.int64)


class Splits:
    """A set of splits in columns. ``groups`` are the ``(cluster, topic)``
    pairs, sorted, each holding at least one split; ``codes[i]`` is
    ``group index << 32 | partition``, strictly increasing, so the splits are
    sorted by ``(cluster, topic, partition)``. Immutable."""

    __slots__ = ("_bounds", "_index", "_memo", "codes", "groups")

    def __init__(self, groups: Sequence[Group], codes: I64) -> None:
        """Trusted input (see the class docstring); build with
        :meth:`from_arrays` or :meth:`from_ids` otherwise."""
        self.groups: tuple[Group, ...] = tuple(groups)
        self.codes = codes
        self._bounds: I64 | None = None
        self._index: dict[Group, int] | None = None
        #: (id of the other Splits, slice) -> (it, positions there, found):
        #: :meth:`positions` answers asked of this set in that one.
        self._memo: dict[tuple[int, int | None, int | None], tuple[Splits, I64, Bools]] | None = (
            None
        )

    def __getstate__(self) -> tuple[tuple[Group, ...], I64]:
        """Pickled without what it remembers (other sets' answers)."""
        return self.groups, self.codes

    def __setstate__(self, state: tuple[tuple[Group, ...], I64]) -> None:
        self.__init__(*state)  # type: ignore[misc]

    # -- building ------------------------------------------------------------

    @classmethod
    def from_arrays(
        cls, groups: Sequence[Group], group: I64, partitions: I64, *, field: str = "splits"
    ) -> tuple[Splits, I64 | None]:
        """Splits from a group table in any order (duplicates allowed), the
        group index and partition of each split. Returns the splits and the
        permutation that sorted them (``None``: they were in order already).
        Refuses a split given twice."""
        table = sorted(set(groups))
        if len(table) != len(groups) or any(a != b for a, b in zip(table, groups, strict=True)):
            at = {g: i for i, g in enumerate(table)}
            group = np.array([at[g] for g in groups], dtype=np.int64)[group]
        codes = (group.astype(np.int64) << _SHIFT) | partitions.astype(np.int64)
        order: I64 | None = None
        if len(codes) > 1 and not bool(np.all(codes[1:] > codes[:-1])):
            order = np.argsort(codes, kind="stable")
            codes = codes[order]
            twice = np.flatnonzero(codes[1:] == codes[:-1])
            if twice.size:
                c = int(codes[twice[0]])
                g = table[c >> _SHIFT]
                raise ValidationError(
                    field, f"split {shown(f'{g[0]}/{g[1]}/{c & _MASK}')} is given twice"
                )
        return cls(table, codes)._compact(), order

    @classmethod
    def from_counts(cls, cluster: str, counts: Mapping[str, int]) -> Splits:
        """Partitions ``0..n-1`` of each topic: what discovery found."""
        topics = sorted(t for t, n in counts.items() if n > 0)
        sizes = np.array([counts[t] for t in topics], dtype=np.int64)
        group = np.repeat(np.arange(len(topics), dtype=np.int64), sizes)
        starts = np.repeat(np.cumsum(sizes) - sizes, sizes)
        partitions = np.arange(len(group), dtype=np.int64) - starts
        return cls([(cluster, t) for t in topics], (group << _SHIFT) | partitions)

    @classmethod
    def from_ids(cls, ids: Iterable[SplitId]) -> Splits:
        items = sorted(set(ids))
        groups = sorted({(s.cluster, s.topic) for s in items})
        at = {g: i for i, g in enumerate(groups)}
        codes = np.array(
            [(at[(s.cluster, s.topic)] << _SHIFT) | s.partition for s in items], dtype=np.int64
        )
        return cls(groups, codes)

    @classmethod
    def union(cls, parts: Sequence[Splits]) -> Splits:
        """Every split of any of ``parts``."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return EMPTY_SPLITS
        if len(parts) == 1:
            return parts[0]
        table = sorted({g for p in parts for g in p.groups})
        codes = np.unique(np.concatenate([p.rekeyed(table) for p in parts]))
        return cls(table, codes)._compact()

    def _compact(self) -> Splits:
        """The same splits with groups that hold none dropped."""
        if not len(self.codes):
            return EMPTY_SPLITS if self.groups else self
        group = self.codes >> _SHIFT
        used = np.flatnonzero(np.bincount(group, minlength=len(self.groups)))
        if len(used) == len(self.groups):
            return self
        remap = np.full(len(self.groups), -1, dtype=np.int64)
        remap[used] = np.arange(len(used))
        codes = (remap[group] << _SHIFT) | (self.codes & _MASK)
        return Splits([self.groups[i] for i in used.tolist()], codes)

    # -- reading -------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.codes)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Splits):
            return NotImplemented
        return self.groups == other.groups and np.array_equal(self.codes, other.codes)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Splits({len(self)} splits in {len(self.groups)} topics of {len(self.clusters())} clusters)"

    @property
    def group(self) -> I64:
        """The group index of each split."""
        return self.codes >> _SHIFT

    @property
    def partitions(self) -> I64:
        return self.codes & _MASK

    def bounds(self) -> I64:
        """``bounds[g]:bounds[g + 1]`` are the splits of group ``g``."""
        if self._bounds is None:
            self._bounds = np.searchsorted(
                self.group, np.arange(len(self.groups) + 1, dtype=np.int64)
            ).astype(np.int64)
        return self._bounds

    def group_index(self) -> dict[Group, int]:
        if self._index is None:
            self._index = {g: i for i, g in enumerate(self.groups)}
        return self._index

    def clusters(self) -> list[str]:
        return sorted({c for c, _ in self.groups})

    def cluster_slice(self, cluster: str) -> slice:
        """The splits of ``cluster`` (contiguous: groups are sorted)."""
        names = [c for c, _ in self.groups]
        lo, hi = bisect.bisect_left(names, cluster), bisect.bisect_right(names, cluster)
        b = self.bounds()
        return slice(int(b[lo]), int(b[hi]))

    def ids(self) -> list[str]:
        """The split ids, in order."""
        out: list[str] = []
        parts = self.partitions.tolist()
        b = self.bounds().tolist()
        for g, (cluster, topic) in enumerate(self.groups):
            out.extend(map(f"{cluster}/{topic}/".__add__, map(str, parts[b[g] : b[g + 1]])))
        return out

    def split_ids(self) -> list[SplitId]:
        parts = self.partitions.tolist()
        b = self.bounds().tolist()
        return [
            SplitId(c, t, p) for g, (c, t) in enumerate(self.groups) for p in parts[b[g] : b[g + 1]]
        ]

    def topic_partitions(self) -> list[tuple[str, int]]:
        """``(topic, partition)`` of each split (what a cluster's metadata client takes)."""
        b = self.bounds()
        topics = np.repeat(np.array([t for _, t in self.groups], dtype=object), np.diff(b))
        return list(zip(topics.tolist(), self.partitions.tolist(), strict=True))

    def find(self, split: str) -> int | None:
        """The index of ``split`` (an id), or None."""
        try:
            sid = SplitId.parse(split)
        except ValueError:
            return None
        g = self.group_index().get((sid.cluster, sid.topic))
        if g is None:
            return None
        code = (g << _SHIFT) | sid.partition
        i = int(np.searchsorted(self.codes, code))
        return i if i < len(self.codes) and int(self.codes[i]) == code else None

    def __contains__(self, split: object) -> bool:
        return isinstance(split, str) and self.find(split) is not None

    def rekeyed(self, table: Sequence[Group]) -> I64:
        """The codes in ``table``, a sorted superset of :attr:`groups`."""
        at = {g: i for i, g in enumerate(table)}
        remap = np.array([at[g] for g in self.groups], dtype=np.int64)
        if not len(remap):
            return _empty()
        return (remap[self.group] << _SHIFT) | (self.codes & _MASK)

    def positions(self, other: Splits, where: slice = slice(None)) -> tuple[I64, Bools]:
        """For each split of ``other[where]``: its index here (any value when
        absent), and whether it is here. Read-only arrays.

        A query's vector keeps its splits from one micro-batch to the next,
        and is looked up in the same few others (each cluster's splits, their
        watermarks) every time: a vector of up to ``_MEMO_SPLITS`` splits
        remembers the answers (both sets are immutable)."""
        if other is self:
            at = np.arange(len(self.codes), dtype=np.int64)[where]
            found = np.ones(len(at), dtype=bool)
            at.flags.writeable = found.flags.writeable = False
            return at, found
        key = (id(self), where.start, where.stop)
        memo = other._memo
        if memo is not None:
            hit = memo.get(key)
            if hit is not None and hit[0] is self:
                return hit[1], hit[2]
        at, found = self._positions(other, where)
        at.flags.writeable = False
        found.flags.writeable = False
        if len(other.codes) <= _MEMO_SPLITS and where.step is None:
            if memo is None:
                memo = other._memo = {}
            elif len(memo) >= _MEMO_ENTRIES:
                memo.clear()
            memo[key] = (self, at, found)
        return at, found

    def _positions(self, other: Splits, where: slice) -> tuple[I64, Bools]:
        codes = other.codes[where]
        if not len(self.codes) or not len(codes):
            return np.zeros(len(codes), dtype=np.int64), np.zeros(len(codes), dtype=bool)
        index = self.group_index()
        remap = np.array([index.get(g, -1) for g in other.groups], dtype=np.int64)
        mine = remap[codes >> _SHIFT]
        key = (mine << _SHIFT) | (codes & _MASK)
        at = np.minimum(np.searchsorted(self.codes, key), len(self.codes) - 1)
        return at.astype(np.int64), (mine >= 0) & (self.codes[at] == key)

    def select(self, which: Bools | I64) -> Splits:
        """The splits picked by a mask or by sorted indices (a mask of all:
        this set itself)."""
        if which.dtype == np.bool_ and len(which) == len(self.codes) and which.all():
            return self
        return Splits(self.groups, self.codes[which])._compact()


EMPTY_SPLITS = Splits((), _empty())


class SplitOffsets(Mapping[str, int]):
    """An offset vector in columns: :attr:`splits` and the next offset of
    each (:attr:`offsets`). Immutable; a ``Mapping`` from split ids."""

    __slots__ = ("offsets", "splits")

    def __init__(self, splits: Splits, offsets: I64) -> None:
        if len(splits) != len(offsets):
            raise ValueError("one offset per split")
        self.splits = splits
        self.offsets = offsets

    @classmethod
    def from_arrays(
        cls,
        groups: Sequence[Group],
        group: I64,
        partitions: I64,
        offsets: I64,
        *,
        field: str = "offsets",
    ) -> SplitOffsets:
        splits, order = Splits.from_arrays(groups, group, partitions, field=field)
        return cls(splits, offsets if order is None else offsets[order])

    @classmethod
    def from_mapping(cls, items: Mapping[str, int], field: str = "offsets") -> SplitOffsets:
        """A vector from ``{split id: offset}`` (ids checked, offsets not)."""
        if isinstance(items, SplitOffsets):
            return items
        return _from_flat(dict(items), field, allow_special=True, check=False)

    @classmethod
    def union(cls, parts: Sequence[SplitOffsets]) -> SplitOffsets:
        """The entries of every part; the parts hold different splits."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return EMPTY
        if len(parts) == 1:
            return parts[0]
        table = sorted({g for p in parts for g in p.splits.groups})
        codes = np.concatenate([p.splits.rekeyed(table) for p in parts])
        offsets = np.concatenate([p.offsets for p in parts])
        order = np.argsort(codes, kind="stable")
        splits = Splits(table, codes[order])._compact()
        if len(splits) > 1 and not bool(np.all(splits.codes[1:] > splits.codes[:-1])):
            raise ValueError("the parts of a union hold the same split")
        return cls(splits, offsets[order])

    # -- reading -------------------------------------------------------------

    def __getitem__(self, split: str) -> int:
        i = self.splits.find(split)
        if i is None:
            raise KeyError(split)
        return int(self.offsets[i])

    def __contains__(self, split: object) -> bool:
        return split in self.splits

    def __iter__(self) -> Iterator[str]:
        return iter(self.splits.ids())

    def __len__(self) -> int:
        return len(self.offsets)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SplitOffsets):
            return self.splits == other.splits and np.array_equal(self.offsets, other.offsets)
        if isinstance(other, Mapping):  # the placeholder is the empty vector
            return self.to_dict() == {k: v for k, v in other.items() if k != NO_SPLITS}
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if len(self) <= 8:
            return f"SplitOffsets({self.to_dict()!r})"
        s = self.splits
        return f"SplitOffsets({len(s)} splits in {len(s.groups)} topics of {len(s.clusters())} clusters)"

    def to_dict(self) -> OffsetVector:
        return dict(zip(self.splits.ids(), self.offsets.tolist(), strict=True))

    def select(self, which: Bools | I64) -> SplitOffsets:
        return SplitOffsets(self.splits.select(which), self.offsets[which])

    def values_at(self, other: Splits, default: I64) -> I64:
        """The offset here of each split of ``other``, ``default`` where absent."""
        at, found = self.positions_of(other)
        return np.where(found, self.offsets[at] if len(self.offsets) else default, default)

    def positions_of(self, other: Splits, where: slice = slice(None)) -> tuple[I64, Bools]:
        return self.splits.positions(other, where)


EMPTY = SplitOffsets(EMPTY_SPLITS, _empty())


def as_offsets(value: Mapping[str, int] | None, field: str = "offsets") -> SplitOffsets:
    """``value`` as a :class:`SplitOffsets` (a flat mapping is converted,
    its placeholder dropped)."""
    if value is None:
        return EMPTY
    if isinstance(value, SplitOffsets):
        return value
    return SplitOffsets.from_mapping({k: v for k, v in value.items() if k != NO_SPLITS}, field)


def canonical(offsets: Mapping[str, int]) -> OffsetVector:
    """The flat form with keys sorted as text, ``{NO_SPLITS: 0}`` when there
    is no split: what clients before the columns send and are answered."""
    real = {k: int(v) for k, v in offsets.items() if k != NO_SPLITS}
    return dict(sorted(real.items())) if real else {NO_SPLITS: 0}


def clusters_of(offsets: Mapping[str, int]) -> set[str]:
    """The clusters whose splits the vector holds."""
    if isinstance(offsets, SplitOffsets):
        return set(offsets.splits.clusters())
    return {SplitId.parse(s).cluster for s in offsets if s != NO_SPLITS}


# -- the document (what Spark stores) ------------------------------------------------


def to_document(offsets: Mapping[str, int]) -> dict[str, Any]:
    """The JSON object of a vector (see the module docstring); one vector has
    exactly one document."""
    v = as_offsets(offsets)
    if not len(v):
        return {NO_SPLITS: 0}
    out: dict[str, dict[str, Any]] = {}
    parts = v.splits.partitions.tolist()
    offs = v.offsets.tolist()
    b = v.splits.bounds().tolist()
    for g, (cluster, topic) in enumerate(v.splits.groups):
        lo, hi = b[g], b[g + 1]
        topics = out.setdefault(cluster, {})
        if parts[hi - 1] == hi - lo - 1:  # sorted, distinct, >= 0: exactly 0..n-1
            topics[topic] = offs[lo:hi]
        else:
            topics[topic] = dict(zip(map(str, parts[lo:hi]), offs[lo:hi], strict=True))
    return out


def to_json(offsets: Mapping[str, int]) -> str:
    """The document as JSON text, as Spark's Python data source writes it."""
    return json.dumps(to_document(offsets))


def parse(value: object, field: str = "offsets", *, allow_special: bool = False) -> SplitOffsets:
    """Validate a decoded document (nested, flat, or both). With
    ``allow_special``, ``-2`` (earliest) and ``-1`` (latest) are accepted, as
    in Spark's ``startingOffsets`` JSON."""
    if isinstance(value, SplitOffsets):
        return value
    if not isinstance(value, dict):
        raise ValidationError(
            field,
            'must be a JSON object like {"cluster": {"topic": [offset, ...]}} '
            'or {"cluster/topic/partition": offset}',
        )
    flat = {k: v for k, v in value.items() if not isinstance(v, (dict, list))}
    nested = {k: v for k, v in value.items() if isinstance(v, (dict, list))}
    parts = [_from_flat(flat, field, allow_special=allow_special, check=True)]
    groups: list[Group] = []
    partitions: list[I64] = []
    offsets: list[I64] = []
    for cluster, topics in nested.items():
        where = f"{field}.{cluster}"
        check_name(cluster, "cluster", where)
        if not isinstance(topics, dict):
            raise ValidationError(where, 'must be an object like {"topic": [offset, ...]}')
        for topic, offs in topics.items():
            at = f"{where}.{topic}"
            check_name(topic, "topic", at)
            if isinstance(offs, list):
                ps = np.arange(len(offs), dtype=np.int64)
                values = offs
            elif isinstance(offs, dict):
                ps = np.array([_partition(p, at) for p in offs], dtype=np.int64)
                values = list(offs.values())
            else:
                raise ValidationError(at, "must be a list of offsets or {partition: offset}")
            groups.append((cluster, topic))
            partitions.append(ps)
            offsets.append(_offsets(values, at, allow_special))
    if groups:
        sizes = np.array([len(p) for p in partitions], dtype=np.int64)
        group = np.repeat(np.arange(len(groups), dtype=np.int64), sizes)
        parts.append(
            SplitOffsets.from_arrays(
                groups, group, np.concatenate(partitions), np.concatenate(offsets), field=field
            )
        )
    try:
        return SplitOffsets.union(parts)
    except ValueError:
        raise ValidationError(field, "a split is given twice (nested and flat)") from None


def parse_json(text: str, field: str = "offsets", *, allow_special: bool = False) -> SplitOffsets:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValidationError(field, f"not valid JSON: {exc}") from None
    return parse(value, field, allow_special=allow_special)


def check_name(value: object, what: str, field: str) -> str:
    """``value`` as a cluster or topic name (``what``) of a split id: a
    non-empty string without ``/``."""
    if not isinstance(value, str) or not value or "/" in value:
        raise ValidationError(field, f"{what} name {shown(value)} must be non-empty, without '/'")
    return value


def _partition(text: str, field: str) -> int:
    try:
        return SplitId.parse(f"c/t/{text}").partition
    except ValueError:
        raise ValidationError(
            f"{field}.{text}", "a partition is written like 0, 7, 12 (below 2**31)"
        ) from None


def _allowed(allow_special: bool) -> str:
    return "-2 (earliest), -1 (latest) or an offset >= 0" if allow_special else "an offset >= 0"


def _offsets(values: list[object], field: str, allow_special: bool) -> I64:
    """``values`` as int64, each checked to be an int (not a bool) in range."""
    low = -2 if allow_special else 0
    if set(map(type, values)) <= {int}:
        try:
            arr = np.array(values, dtype=np.int64)
        except OverflowError:
            arr = None
        if arr is not None and (not len(arr) or int(arr.min()) >= low):
            return arr
    for i, v in enumerate(values):
        if type(v) is not int or not low <= v <= OFFSET_MAX:
            raise ValidationError(
                f"{field}[{i}]", f"must be {_allowed(allow_special)}, got {shown(v)}"
            )
    raise AssertionError("unreachable")  # pragma: no cover


def _from_flat(
    items: Mapping[str, object], field: str, *, allow_special: bool, check: bool
) -> SplitOffsets:
    """The flat form ``{"cluster/topic/partition": offset}``."""
    low = -2 if allow_special else 0
    ids: list[SplitId] = []
    values: list[int] = []
    for key, off in items.items():
        if key == NO_SPLITS:
            continue
        try:
            ids.append(SplitId.parse(key))
        except (ValueError, AttributeError) as exc:
            raise ValidationError(f"{field}.{key}", str(exc)) from None
        if check and (
            isinstance(off, bool) or not isinstance(off, int) or not low <= off <= OFFSET_MAX
        ):
            raise ValidationError(
                f"{field}.{key}", f"must be {_allowed(allow_special)}, got {shown(off)}"
            )
        values.append(off)  # type: ignore[arg-type]
    if not ids:
        return EMPTY
    groups = sorted({(s.cluster, s.topic) for s in ids})
    at = {g: i for i, g in enumerate(groups)}
    group = np.array([at[(s.cluster, s.topic)] for s in ids], dtype=np.int64)
    partitions = np.array([s.partition for s in ids], dtype=np.int64)
    return SplitOffsets.from_arrays(
        groups, group, partitions, np.array(values, dtype=np.int64), field=field
    )


# -- the wire form ----------------------------------------------------------------------


def to_columns(offsets: Mapping[str, int]) -> planner_pb2.OffsetColumns:
    v = as_offsets(offsets)
    msg = planner_pb2.OffsetColumns(
        clusters=[c for c, _ in v.splits.groups],
        topics=[t for _, t in v.splits.groups],
    )
    msg.counts.extend(np.diff(v.splits.bounds()).tolist())
    msg.partitions.extend(v.splits.partitions.tolist())
    msg.offsets.extend(v.offsets.tolist())
    return msg


def from_columns(
    msg: planner_pb2.OffsetColumns, field: str = "offsets", *, allow_special: bool = False
) -> SplitOffsets:
    """Decode and check the columns a client sent."""
    if not len(msg.clusters) == len(msg.topics) == len(msg.counts):
        raise ValidationError(field, "clusters, topics and counts must have the same length")
    if not len(msg.partitions) == len(msg.offsets):
        raise ValidationError(field, "partitions and offsets must have the same length")
    if not len(msg.clusters):  # the empty vector (no cap, no commit): nothing to check
        if len(msg.partitions):
            raise ValidationError(field, "counts must add up to the number of partitions")
        return EMPTY
    groups = list(zip(msg.clusters, msg.topics, strict=True))
    for i, (cluster, topic) in enumerate(groups):
        check_name(cluster, "cluster", f"{field}.clusters[{i}]")
        check_name(topic, "topic", f"{field}.topics[{i}]")
    counts = np.array(msg.counts, dtype=np.int64)
    if int(counts.sum()) != len(msg.partitions):
        raise ValidationError(field, "counts must add up to the number of partitions")
    partitions = np.array(msg.partitions, dtype=np.int64)
    offsets = np.array(msg.offsets, dtype=np.int64)
    if len(partitions) and int(partitions.min()) < 0:
        raise ValidationError(f"{field}.partitions", "must be >= 0")
    if len(offsets) and int(offsets.min()) < (-2 if allow_special else 0):
        raise ValidationError(f"{field}.offsets", f"must be {_allowed(allow_special)}")
    group = np.repeat(np.arange(len(groups), dtype=np.int64), counts)
    return SplitOffsets.from_arrays(groups, group, partitions, offsets, field=field)

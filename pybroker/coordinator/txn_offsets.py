"""Offsets committed inside transactions (TxnOffsetCommit, KIP-98): written at once,
committed only when the producer's transaction commits (Kafka's
``OffsetMetadataManager.pendingTransactionalOffsets``).

A transactional offset commit is a transactional batch of ``OffsetCommitValue`` records
in the group's ``__consumer_offsets`` partition, carrying the producer's id and epoch.
Its offsets are pending for that producer until the transaction coordinator writes the
producer's marker to that partition: a COMMIT makes them the group's committed offsets,
an ABORT drops them. Meanwhile OffsetFetch with ``require_stable`` answers
UNSTABLE_OFFSET_COMMIT for the partitions concerned (KIP-447).

Kafka keeps the most recent write of a key when committed and transactional commits mix:
a pending offset is overtaken by any write of its key committed with a later record
offset (a plain commit, a tombstone, another producer's transactional offset committed
first), so a commit marker applies only the pending offsets nothing overtook. Order in
the log decides, through each write's record offset: ``PendingOffsets.committed`` notes
the last committed write of a key while writes of it are pending, and ``end`` applies a
pending write only above it. An overtaken write still counts as pending until its
marker (Kafka's ``hasPendingTransactionalOffsets``).

One ``PendingOffsets`` per offsets partition holds the live state (keys ``OffsetKey``,
values ``OffsetAndMetadata``); the load replays a partition into one over raw record
bytes (``OffsetsReplay``), last value per key as before, so the same rules rebuild the
same state in log order, and the transactions still open at the end are installed pending.

Not thread-safe: the event loop thread only.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import TYPE_CHECKING, Generic, NamedTuple, TypeVar

from pybroker._native.records import CONTROL_COMMIT
from pybroker.coordinator import internal_topic

if TYPE_CHECKING:
    from pybroker._native.records import BatchInfo

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Pending(NamedTuple, Generic[V]):
    value: V
    record_offset: int  # where its record is in the offsets partition


class PendingOffsets(Generic[K, V]):
    """Each producer's pending offset writes, by key, until its transaction ends."""

    def __init__(self) -> None:
        self._by_producer: dict[int, dict[K, Pending[V]]] = {}
        self._producers_of: dict[K, set[int]] = {}
        # the record offset of the last committed write of a key with writes pending
        self._committed_at: dict[K, int] = {}

    def __bool__(self) -> bool:
        return bool(self._by_producer)

    def write(self, producer_id: int, key: K, value: V, record_offset: int) -> None:
        """A transactional write of ``key`` by ``producer_id`` at ``record_offset``."""
        self._by_producer.setdefault(producer_id, {})[key] = Pending(value, record_offset)
        self._producers_of.setdefault(key, set()).add(producer_id)

    def is_pending(self, key: K) -> bool:
        return key in self._producers_of

    def committed(self, key: K, record_offset: int) -> None:
        """A write of ``key`` at ``record_offset`` became committed: the pending writes of
        the key below it are overtaken."""
        if key in self._producers_of and record_offset > self._committed_at.get(key, -1):
            self._committed_at[key] = record_offset

    def end(self, producer_id: int, commit: bool) -> list[tuple[K, V]]:
        """The producer's marker: what its transaction commits (nothing when aborted),
        the writes nothing overtook, which then overtake the others' below them."""
        writes = self._by_producer.pop(producer_id, {})
        applied = []
        for key, pending in writes.items():
            if commit and pending.record_offset > self._committed_at.get(key, -1):
                applied.append((key, pending.value))
                self._committed_at[key] = pending.record_offset
            producers = self._producers_of[key]
            producers.discard(producer_id)
            if not producers:
                del self._producers_of[key]
                self._committed_at.pop(key, None)
        return applied

    def items(self) -> Iterator[tuple[int, K, Pending[V]]]:
        """``(producer id, key, pending write)`` of every open transaction."""
        for producer_id, writes in self._by_producer.items():
            for key, pending in writes.items():
                yield producer_id, key, pending

    def committed_at(self, key: K) -> int:
        """The record offset of the last committed write of a pending key (-1: none)."""
        return self._committed_at.get(key, -1)

    def keys(self) -> list[K]:
        return list(self._producers_of)


class OffsetsReplay:
    """A ``__consumer_offsets`` partition read back at load, batch after batch: the last
    committed value of each key (None: a tombstone) and the writes of the transactions
    still open, all as raw record bytes; ``count`` records read."""

    def __init__(self, start: int) -> None:
        self.start = start  # the log start: records below it are not read
        self.latest: dict[bytes, bytes | None] = {}
        self.pending: PendingOffsets[bytes, bytes | None] = PendingOffsets()
        self.count = 0

    def add(self, info: BatchInfo, data: memoryview) -> None:
        if info.is_control:  # a transaction's marker
            for key, value in self.pending.end(info.producer_id,
                                               info.control_type == CONTROL_COMMIT):
                self.latest[key] = value
            return
        batch = internal_topic.batch_records(info, data, self.start)
        if info.is_transactional:
            self.count += len(batch)
            for record in batch:
                if record.key is not None:  # a coordinator record always has a key
                    self.pending.write(info.producer_id, record.key, record.value,
                                       record.offset)
            return
        self.count += internal_topic.latest_values(self.latest, batch)
        if self.pending:
            for record in batch:
                if record.key is not None:
                    self.pending.committed(record.key, record.offset)

"""Idempotent-producer state of one partition: epochs, sequences, the last five batches.

Kafka's rules (``ProducerStateManager`` / ``ProducerAppendInfo``), per producer id:
- a batch whose (epoch, first sequence, last sequence) matches one of the last five batches
  appended for that producer is a duplicate (a retry): it is not appended again and is
  answered with the offsets it got the first time;
- an epoch below the current one is fenced: INVALID_PRODUCER_EPOCH;
- a new epoch must start at sequence 0, unless the producer is unknown here (its state
  may have been lost to retention), which accepts any sequence;
- within an epoch the first sequence must follow the last one (wrapping at 2^31-1),
  else OUT_OF_ORDER_SEQUENCE_NUMBER.

Producers idle longer than ``producer.id.expiration.ms`` (a day) are forgotten, as Kafka
does, so the table does not grow with every producer that ever wrote. State survives
restarts: :meth:`ProducerStateTable.to_json` is written with the log end
offset it describes on clean shutdown (and periodically); after a crash the snapshot is
loaded if the log still reaches its offset with the same leader epoch there (a replica
that truncated below it since holds other batches: ``Partition.restore_producers``), and
the batches after it are replayed from the log tail with
:meth:`ProducerStateTable.replay`.

Not thread-safe: used from the event loop thread only. ``check`` and ``record`` for one
batch run without an ``await`` between them, so no other request can interleave.
"""

from __future__ import annotations

import collections
from typing import Any, NamedTuple

from pybroker.errors import InvalidProducerEpochError, OutOfOrderSequenceError

NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
CACHED_BATCHES = 5


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int  # log append time of the batch, -1 for CreateTime topics


class ProducerEntry:
    __slots__ = ("epoch", "batches", "last_ms")

    def __init__(self, epoch: int, last_ms: int = 0) -> None:
        self.epoch = epoch
        self.last_ms = last_ms  # wall clock of the last append, for expiration
        self.batches: collections.deque[BatchMetadata] = collections.deque(maxlen=CACHED_BATCHES)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """base + delta, wrapping past INT32_MAX to 0 as Kafka's sequences do."""
    if base_sequence > INT32_MAX - last_offset_delta:
        return last_offset_delta - (INT32_MAX - base_sequence) - 1
    return base_sequence + last_offset_delta


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateTable:
    """Producer id -> :class:`ProducerEntry` for one partition."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, producer_id: int, epoch: int, first_seq: int,
              last_offset_delta: int) -> BatchMetadata | None:
        """Validate a batch before it is appended; the original metadata if it is a retry.

        Raises InvalidProducerEpochError or OutOfOrderSequenceError.
        """
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"Producer {producer_id} epoch {epoch} is older than the current {entry.epoch}")
        if epoch != entry.epoch:  # an epoch bump starts the sequence again
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"Invalid sequence {first_seq} for new epoch {epoch} of producer "
                    f"{producer_id}: expected 0")
            return None
        last_seq = last_sequence(first_seq, last_offset_delta)
        for batch in entry.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        current = entry.last_seq
        if current == NO_SEQUENCE and first_seq != 0 or \
                current != NO_SEQUENCE and not _in_sequence(current, first_seq):
            raise OutOfOrderSequenceError(
                f"Out of order sequence number for producer {producer_id}: found {first_seq}, "
                f"expected {current + 1 if current != INT32_MAX else 0}")
        return None

    def record(self, producer_id: int, epoch: int, first_seq: int, last_offset_delta: int,
               first_offset: int, timestamp: int, now_ms: int) -> None:
        """Remember an appended batch (after :meth:`check`, or when replaying the log)."""
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = self.producers[producer_id] = ProducerEntry(epoch)
        elif epoch < entry.epoch:
            return  # a fenced producer's batch seen in replay: it cannot change state
        entry.last_ms = max(entry.last_ms, now_ms)
        entry.batches.append(BatchMetadata(
            first_seq, last_sequence(first_seq, last_offset_delta), first_offset,
            first_offset + last_offset_delta, timestamp))

    def replay(self, info: Any, first_offset: int) -> None:
        """Apply one batch header (a ``BatchInfo``) read back from the log."""
        if info.producer_id >= 0 and not info.is_control and info.base_sequence >= 0:
            timestamp = info.max_timestamp if info.timestamp_type == 1 else -1
            self.record(info.producer_id, info.producer_epoch, info.base_sequence,
                        info.last_offset_delta, first_offset, timestamp, info.max_timestamp)

    def expire(self, before_ms: int) -> int:
        """Forget producers idle since ``before_ms`` (Kafka's producer.id.expiration.ms)."""
        stale = [pid for pid, e in self.producers.items() if e.last_ms < before_ms]
        for pid in stale:
            del self.producers[pid]
        return len(stale)

    def to_json(self) -> dict[str, Any]:
        return {str(pid): {"epoch": e.epoch, "last_ms": e.last_ms,
                           "batches": [list(b) for b in e.batches]}
                for pid, e in self.producers.items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProducerStateTable:
        table = cls()
        for pid, item in data.items():
            entry = table.producers[int(pid)] = ProducerEntry(int(item["epoch"]),
                                                              int(item.get("last_ms", 0)))
            entry.batches.extend(BatchMetadata(*b) for b in item["batches"])
        return table

"""Idempotent-producer state of one partition: epochs, sequences, the last five batches,
and each producer's ongoing transaction, kept by the partition's log as one of its state
machines (``state_machine``).

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
does (``expire``, and when a snapshot is loaded), so the table does not grow with every
producer that ever wrote; a producer with a transaction still open is kept (Kafka too).

Transactions (Kafka's ``currentTxnFirstOffset``): a producer's first transactional batch
opens its transaction at that batch's base offset, its next control batch (the commit or
abort marker the coordinator writes) closes it. ``first_unstable_offset`` is the first
offset of the earliest transaction still open: the log's last stable offset is bounded
by it. An abort marker (the header's ``control_type``, read natively) that closes a
transaction is handed to ``on_abort`` as the aborted-transaction index's entry
(transaction_index.py): the log files it in the marker's segment, on append and on
replay alike. A marker's coordinator epoch becomes its producer's (Kafka's
``coordinatorEpoch``, which DescribeProducers reports).

A batch a coordinator writes for a producer (a transactional offset commit, a marker)
carries no sequence: only its epoch is checked (``check_epoch``), and a marker's
coordinator epoch must not go back (``check_marker``: TRANSACTION_COORDINATOR_FENCED, as
Kafka's ``appendEndTxnMarker``). A marker of a newer epoch moves the producer to it (its
cached batches go, as at any epoch bump), a marker of an unknown producer makes its
entry, and a coordinator's transactional batch opens the producer's transaction.

Snapshots: ``<20-digit offset>.snapshot`` in the partition directory, the state of the
batches below that offset, written when a segment rolls and when the log closes, deleted
with the segment that starts at its offset, and above a truncation. Kafka's layout in
spirit (versioned, CRC32C over the body, big-endian), not in bytes: it keeps all five
cached batches of a producer where Kafka keeps the last one, so a retry of any of them
is still recognised after a restart::

    magic    4   b"PBPS" (Kafka's own snapshot files start with their version, 0x0001)
    version  2   3 (1 without the transaction field and 2 without the coordinator epoch
                 are still read)
    crc      4   CRC32C of everything after this field
    offset   8   the offset the snapshot describes (also its name)
    count    4   producers
    count x      producer id 8, epoch 2, last append (ms) 8, ongoing transaction's
                 first offset 8 (-1: none; not in version 1), coordinator epoch of its
                 last marker 4 (-1: none; from version 3), batches 1 (0-5), then per
                 batch: first seq 4, last seq 4, first offset 8, last offset 8,
                 timestamp 8 (its LogAppendTime, -1 for CreateTime)

A file that does not read back whole (a crash tore it before its fsync) is deleted when
found and the next older one is used.

Not thread-safe: used from the event loop thread only. ``check`` and ``record`` for one
batch run without an ``await`` between them, so no other request can interleave.
"""

from __future__ import annotations

import bisect
import collections
import logging
import os
import re
import struct
from collections.abc import Callable
from typing import NamedTuple

from pybroker._native.crc32c import crc32c
from pybroker._native.records import CONTROL_ABORT, BatchInfo
from pybroker.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from pybroker.log.checkpoints import fsync_dir
from pybroker.log.state_machine import snapshot_path
from pybroker.log.transaction_index import AbortedTxn

log = logging.getLogger("pybroker.log")

NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
CACHED_BATCHES = 5
DEFAULT_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms

SNAPSHOT_MAGIC = b"PBPS"
SNAPSHOT_VERSION = 3
_HEADER = struct.Struct(">4shI")        # magic, version, crc
_BODY_HEAD = struct.Struct(">qi")       # offset, producer count
# producer id, epoch, last append ms, txn, coordinator epoch, batches
_PRODUCER = struct.Struct(">qhqqiB")
_PRODUCER_V2 = struct.Struct(">qhqqB")  # producer id, epoch, last append ms, txn, batches
_PRODUCER_V1 = struct.Struct(">qhqB")   # producer id, epoch, last append ms, batches
_BATCH = struct.Struct(">iiqqq")        # first seq, last seq, first offset, last offset, ts
_SNAPSHOT_FILE = re.compile(r"^(\d{20})\.snapshot$")


class CorruptSnapshotError(ValueError):
    """A snapshot file that does not read back whole; the caller deletes it."""


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int  # log append time of the batch, -1 for CreateTime topics


class ProducerEntry:
    __slots__ = ("epoch", "batches", "last_ms", "txn_first_offset", "coordinator_epoch")

    def __init__(self, epoch: int, last_ms: int = 0, txn_first_offset: int = -1,
                 coordinator_epoch: int = -1) -> None:
        self.epoch = epoch
        self.last_ms = last_ms  # wall clock of the last append, for expiration
        self.txn_first_offset = txn_first_offset  # of the ongoing transaction, -1: none
        self.coordinator_epoch = coordinator_epoch  # of its last marker, -1: none
        self.batches: collections.deque[BatchMetadata] = collections.deque(maxlen=CACHED_BATCHES)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProducerEntry) and \
            (self.epoch, self.last_ms, self.txn_first_offset, self.coordinator_epoch,
             self.batches) == \
            (other.epoch, other.last_ms, other.txn_first_offset, other.coordinator_epoch,
             other.batches)

    def __repr__(self) -> str:
        return f"ProducerEntry(epoch={self.epoch}, last_ms={self.last_ms}, " \
               f"txn_first_offset={self.txn_first_offset}, " \
               f"coordinator_epoch={self.coordinator_epoch}, batches={list(self.batches)})"


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """base + delta, wrapping past INT32_MAX to 0 as Kafka's sequences do."""
    if base_sequence > INT32_MAX - last_offset_delta:
        return last_offset_delta - (INT32_MAX - base_sequence) - 1
    return base_sequence + last_offset_delta


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def encode_snapshot(offset: int, producers: dict[int, ProducerEntry]) -> bytes:
    """The snapshot file's bytes (layout in the module doc)."""
    parts = [_BODY_HEAD.pack(offset, len(producers))]
    for producer_id, entry in producers.items():
        parts.append(_PRODUCER.pack(producer_id, entry.epoch, entry.last_ms,
                                    entry.txn_first_offset, entry.coordinator_epoch,
                                    len(entry.batches)))
        parts.extend(_BATCH.pack(*batch) for batch in entry.batches)
    body = b"".join(parts)
    return _HEADER.pack(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, crc32c(body)) + body


def decode_snapshot(data: bytes, offset: int) -> dict[int, ProducerEntry]:
    """The producers of a snapshot file's bytes; ``CorruptSnapshotError`` unless the file
    is whole: magic, version, CRC, the offset it is named by, every producer in bounds."""
    if len(data) < _HEADER.size + _BODY_HEAD.size:
        raise CorruptSnapshotError(f"{len(data)} bytes is too short")
    magic, version, crc = _HEADER.unpack_from(data)
    if magic != SNAPSHOT_MAGIC or version not in (1, 2, SNAPSHOT_VERSION):
        raise CorruptSnapshotError(f"unknown magic {magic!r} or version {version}")
    body = memoryview(data)[_HEADER.size:]
    if crc32c(body) != crc:
        raise CorruptSnapshotError("CRC mismatch")
    described, count = _BODY_HEAD.unpack_from(body)
    if described != offset:
        raise CorruptSnapshotError(f"describes offset {described}, named {offset}")
    producers: dict[int, ProducerEntry] = {}
    position = _BODY_HEAD.size
    try:
        for _ in range(count):
            txn_first_offset = coordinator_epoch = -1
            if version == 1:
                producer_id, epoch, last_ms, batches = _PRODUCER_V1.unpack_from(body, position)
                position += _PRODUCER_V1.size
            elif version == 2:
                producer_id, epoch, last_ms, txn_first_offset, batches = \
                    _PRODUCER_V2.unpack_from(body, position)
                position += _PRODUCER_V2.size
            else:
                producer_id, epoch, last_ms, txn_first_offset, coordinator_epoch, batches = \
                    _PRODUCER.unpack_from(body, position)
                position += _PRODUCER.size
            if batches > CACHED_BATCHES:
                raise CorruptSnapshotError(f"{batches} batches for producer {producer_id}")
            entry = producers[producer_id] = ProducerEntry(epoch, last_ms, txn_first_offset,
                                                           coordinator_epoch)
            for _ in range(batches):
                entry.batches.append(BatchMetadata(*_BATCH.unpack_from(body, position)))
                position += _BATCH.size
    except struct.error as exc:
        raise CorruptSnapshotError(f"truncated: {exc}") from None
    if position != len(body):
        raise CorruptSnapshotError(f"{len(body) - position} bytes after the last producer")
    return producers


class ProducerState:
    """Producer id -> :class:`ProducerEntry` for one partition, and its snapshot files in
    ``directory`` (None: kept in memory only). A ``LogStateMachine``."""

    producer_batches_only = True

    def __init__(self, directory: str | None = None,
                 expiration_ms: int = DEFAULT_EXPIRATION_MS,
                 on_abort: Callable[[AbortedTxn], None] | None = None) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.on_abort = on_abort
        # producer id -> first offset of its ongoing transaction (the entries' field, kept
        # apart so the last stable offset costs a look at the few open ones only)
        self.ongoing: dict[int, int] = {}
        self.directory = directory
        self.expiration_ms = expiration_ms
        self._snapshots: list[int] = []  # offsets of the snapshot files, ascending
        if directory is not None:
            self._snapshots = sorted(int(m.group(1)) for m in map(
                _SNAPSHOT_FILE.match, os.listdir(directory)) if m)

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

    def check_epoch(self, producer_id: int, epoch: int) -> None:
        """Validate a batch a coordinator writes for a producer (no sequence): its epoch
        must not be older than the producer's. Raises InvalidProducerEpochError."""
        entry = self.producers.get(producer_id)
        if entry is not None and epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"Producer {producer_id} epoch {epoch} is older than the current {entry.epoch}")

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """Validate a transaction marker (Kafka's ``appendEndTxnMarker``): its producer
        epoch as ``check_epoch``, and its transaction coordinator epoch not below the last
        one this partition saw for the producer (a zombie coordinator's marker).
        Raises InvalidProducerEpochError or TransactionCoordinatorFencedError."""
        self.check_epoch(producer_id, epoch)
        entry = self.producers.get(producer_id)
        if entry is not None and coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"Marker of producer {producer_id} from coordinator epoch {coordinator_epoch}"
                f" (zombie), {entry.coordinator_epoch} (current)")

    def record(self, producer_id: int, epoch: int, first_seq: int, last_offset_delta: int,
               first_offset: int, timestamp: int, now_ms: int) -> None:
        """Remember an appended batch (after :meth:`check`, or when replaying the log)."""
        entry = self._entry(producer_id, epoch)
        if entry is None:
            return  # a fenced producer's batch seen in replay: it cannot change state
        entry.last_ms = max(entry.last_ms, now_ms)
        entry.batches.append(BatchMetadata(
            first_seq, last_sequence(first_seq, last_offset_delta), first_offset,
            first_offset + last_offset_delta, timestamp))

    def _entry(self, producer_id: int, epoch: int) -> ProducerEntry | None:
        """The producer's entry for a batch of ``epoch``: a new one for a new epoch (an
        open transaction stays open across it: the coordinator's marker closes it), None
        for a fenced one."""
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = self.producers[producer_id] = ProducerEntry(
                epoch, txn_first_offset=entry.txn_first_offset if entry else -1,
                coordinator_epoch=entry.coordinator_epoch if entry else -1)
        elif epoch < entry.epoch:
            return None
        return entry

    def begin_transaction(self, producer_id: int, epoch: int, first_offset: int) -> None:
        """A transactional batch of ``epoch`` at ``first_offset`` was appended (after
        ``record``): it opens the producer's transaction unless one is open."""
        entry = self.producers.get(producer_id)
        if entry is not None and entry.epoch == epoch and entry.txn_first_offset < 0:
            entry.txn_first_offset = first_offset
            self.ongoing[producer_id] = first_offset

    def end_transaction(self, producer_id: int, coordinator_epoch: int = -1) -> int:
        """A control batch (commit or abort marker, written by the coordinator of
        ``coordinator_epoch``) of the producer was appended: its transaction is over.
        Returns the transaction's first offset, -1 if none was open."""
        first = self.ongoing.pop(producer_id, -1)
        entry = self.producers.get(producer_id)
        if entry is not None:
            entry.txn_first_offset = -1
            if coordinator_epoch >= 0:
                entry.coordinator_epoch = coordinator_epoch
        return first

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest ongoing transaction; None if none is open."""
        return min(self.ongoing.values()) if self.ongoing else None

    def expire(self, before_ms: int) -> int:
        """Forget producers idle since ``before_ms`` (Kafka's producer.id.expiration.ms)."""
        stale = [pid for pid, e in self.producers.items()
                 if e.last_ms < before_ms and e.txn_first_offset < 0]
        for pid in stale:
            del self.producers[pid]
        return len(stale)


    def expire_idle(self, now_ms: int) -> int:
        """``expire`` by ``producer.id.expiration.ms`` before ``now_ms``."""
        return self.expire(now_ms - self.expiration_ms)

    # the log's state machine ----------------------------------------------------------

    def apply(self, batch: BatchInfo, base_offset: int, log_append_time: int,
              now_ms: int) -> None:
        if batch.producer_id < 0:
            return
        if batch.is_control:
            # The marker's epoch is the producer's from now on (Kafka's
            # appendEndTxnMarker): a coordinator fencing a producer aborts under the
            # bumped epoch, and the fenced instance's next batch must be refused here.
            entry = self._entry(batch.producer_id, batch.producer_epoch)
            if entry is not None:
                entry.last_ms = max(entry.last_ms, now_ms)
            first = self.end_transaction(batch.producer_id, batch.coordinator_epoch)
            if first >= 0 and batch.control_type == CONTROL_ABORT and \
                    self.on_abort is not None:
                stable = min(self.ongoing.values(), default=base_offset + 1)
                self.on_abort(AbortedTxn(batch.producer_id, first, base_offset, stable))
            return
        if batch.base_sequence >= 0:
            self.record(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                        batch.last_offset_delta, base_offset, log_append_time, now_ms)
        else:  # a coordinator's batch for the producer (a transactional offset commit)
            entry = self._entry(batch.producer_id, batch.producer_epoch)
            if entry is not None:
                entry.last_ms = max(entry.last_ms, now_ms)
        if batch.is_transactional:
            self.begin_transaction(batch.producer_id, batch.producer_epoch, base_offset)

    def snapshot_offsets(self) -> list[int]:
        return list(self._snapshots)

    def take_snapshot(self, offset: int) -> str | None:
        if self.directory is None or self._snapshots and self._snapshots[-1] == offset:
            return None  # nothing was appended since the last one
        path = snapshot_path(self.directory, offset)
        try:
            with open(path, "wb") as f:
                f.write(encode_snapshot(offset, self.producers))
        except OSError as exc:  # a longer replay after a crash, not a failed append
            log.warning("%s: could not write the producer snapshot %s: %s",
                        self.directory, path, exc)
            self._unlink(path)
            return None
        bisect.insort(self._snapshots, offset)
        return path

    def load_snapshot(self, first_offset: int, end_offset: int, now_ms: int) -> int | None:
        self.producers = {}
        self.ongoing = {}
        for offset in reversed(self._snapshots):
            if offset > end_offset:
                self.delete_snapshot(offset)
                continue
            if offset < first_offset or self.directory is None:
                return None
            path = snapshot_path(self.directory, offset)
            try:
                with open(path, "rb") as f:
                    producers = decode_snapshot(f.read(), offset)
            except (OSError, CorruptSnapshotError) as exc:
                log.warning("%s: deleting unreadable producer snapshot %s: %s",
                            self.directory, path, exc)
                self.delete_snapshot(offset)
                continue
            self.producers = producers
            self.ongoing = {pid: e.txn_first_offset for pid, e in producers.items()
                            if e.txn_first_offset >= 0}
            self.expire_idle(now_ms)
            return offset
        return None

    def truncate_to(self, offset: int) -> None:
        above = self._snapshots[bisect.bisect_right(self._snapshots, offset):]
        for doomed in above:
            self.delete_snapshot(doomed)
        if above and self.directory is not None:
            fsync_dir(self.directory)  # a snapshot of a tail that is gone must not return

    def truncate_head(self, offset: int) -> None:
        for doomed in self._snapshots[:bisect.bisect_left(self._snapshots, offset)]:
            self.delete_snapshot(doomed)

    def delete_snapshot(self, offset: int) -> None:
        i = bisect.bisect_left(self._snapshots, offset)
        if i < len(self._snapshots) and self._snapshots[i] == offset:
            del self._snapshots[i]
        if self.directory is not None:
            self._unlink(snapshot_path(self.directory, offset))

    @staticmethod
    def _unlink(path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    # the broker-wide file of earlier versions -------------------------------------------

    def restore_legacy(self, producers: dict[str, dict[str, object]]) -> None:
        """Take the producers of one partition's entry of ``producer-state.json`` (what
        versions before per-partition snapshots wrote at shutdown): ``{producer id:
        {"epoch", "last_ms", "batches": [[first seq, last seq, first offset, last offset,
        timestamp], ...]}}``. A malformed entry raises KeyError, TypeError or ValueError
        and changes nothing."""
        adopted: dict[int, ProducerEntry] = {}
        for pid, item in producers.items():
            epoch, last_ms, batches = item["epoch"], item.get("last_ms", 0), item["batches"]
            if not isinstance(epoch, int) or not isinstance(last_ms, int) or \
                    not isinstance(batches, list):
                raise ValueError(f"malformed producer entry {pid}: {item!r}")
            entry = adopted[int(pid)] = ProducerEntry(epoch, last_ms)
            entry.batches.extend(BatchMetadata(*(int(v) for v in b)) for b in batches)
        self.producers = adopted

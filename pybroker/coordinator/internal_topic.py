"""What both coordinators (groups, pybroker/coordinator/; transactions, pybroker/txn/)
share about their internal compacted topics, ``__consumer_offsets`` and
``__transaction_state``: where a key (group id, transactional id) lives, how their
records are written and read back, and what a client is told when a write fails.

A key lives in partition ``abs(java_hash(key)) % partitions`` (Kafka's
``Utils.abs(key.hashCode) % partitions``), so all of its records are ordered in one log.
A record's key and value start with an int16 version, then the spec's layout of that
version (``decode_versioned``). Writes are one record batch per request through the
native encoder onto the native log (``CoordinatorLog``), answered once the ISR has them;
reading back (``data_records``, ``latest_values``) happens once per partition, when this
broker becomes its leader, and is the only Python loop over records here. Only the last
value of a key matters: the log cleaner compacts both topics like any compacted topic.

Where a topic is, how many partitions it has and which of them may be written are the
control plane's answers (:class:`InternalTopic`, supplied by the metadata
implementation, pybroker/metadata/): on one node the topic is created on first use and
every partition is written; in a cluster the controller creates it and only the
partitions this broker leads, with enough of an ISR, are.
"""

from __future__ import annotations

import functools
import struct
from typing import TYPE_CHECKING, NamedTuple, Protocol

from pybroker.errors import CorruptRecordError, ErrorCode, KafkaError
from pybroker.net.protocol.codec import decode_data

if TYPE_CHECKING:
    from pybroker._native.records import BatchInfo, Record
    from pybroker.broker.partition import Partition
    from pybroker.broker.topic_manager import Topic

_I16 = struct.Struct(">h")


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()``: over UTF-16 code units, 32-bit signed overflow."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=1 << 16)
def partition_for(key: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(key.hashCode) % partitions`` (abs(MIN_VALUE) is 0 there)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


def decode_versioned(name: str, data: bytes) -> dict:
    """A key or value of a coordinator topic: its int16 version, then the spec's layout
    of that version (``messages.DATA[name]``)."""
    if len(data) < _I16.size:
        raise CorruptRecordError(f"{name}: {len(data)} bytes, no version")
    version = _I16.unpack_from(data)[0]
    try:
        return decode_data(name, version, data, _I16.size)
    except KafkaError as exc:
        raise CorruptRecordError(f"{name}: {exc}") from None


class Written(NamedTuple):
    """Where an append went: the partition, and the offset after its last record (what
    the high watermark must reach for the write to be committed)."""

    partition: Partition
    end_offset: int

    def committed(self) -> bool:
        """Whether the write was committed as it was written: the ISR is this broker
        alone (one node, or a topic of one replica), so the high watermark moved with it."""
        return self.partition.high_watermark >= self.end_offset


class InternalTopic(Protocol):
    """A coordinator's internal topic as this broker's control plane has it (the
    metadata implementations supply one). Its answers are the only difference between
    one node and a cluster that the coordinators see."""

    def partition_count(self) -> int | None:
        """The topic's partition count as the control plane knows it; None while it knows
        of no such topic (the configured count is used then)."""
        ...

    def local(self) -> Topic | None:
        """The topic as this broker has it (None if absent); its partitions led here are
        the ones whose keys this broker coordinates."""
        ...

    def writable(self, index: int) -> Partition:
        """The partition a write of one of its keys goes to, or the ``KafkaError`` why
        none can take it now (led elsewhere, too small an ISR, being created)."""
        ...


class CoordinatorLog:
    """Appends a coordinator's records to its internal topic and says when they are
    committed.

    The topic is an ordinary (internal) topic to the broker, so Metadata, Fetch, the log
    cleaner and the dump tool see it like any other; ``topic`` says where it is
    (None: nothing is written, for tests of the protocol alone). The partition count is
    the topic's as the control plane knows it, else ``num_partitions``; once known it is
    kept, so every key keeps its partition. Not thread-safe (event loop only).
    """

    def __init__(self, topic: InternalTopic | None, num_partitions: int = 50,
                 commit_timeout_ms: int = 5000) -> None:
        self._topic = topic
        self._num_partitions = num_partitions
        self._commit_timeout_s = commit_timeout_ms / 1000

    @property
    def num_partitions(self) -> int:
        count = self._topic.partition_count() if self._topic else None
        if count:
            self._num_partitions = count  # kept: the topic's count never shrinks
        return self._num_partitions

    def partition_for(self, key: str) -> int:
        """The partition of a group id or transactional id."""
        return partition_for(key, self.num_partitions)

    def led_partitions(self) -> list[Partition]:
        """The partitions of the topic this broker leads and has a log of."""
        topic = self._topic.local() if self._topic else None
        return [p for p in (topic.partitions if topic is not None else ())
                if p.log is not None and p.is_leader]

    def append(self, key: str, records: list[tuple[bytes, bytes | None]],
               now_ms: int, producer_id: int = -1, producer_epoch: int = -1
               ) -> Written | None:
        """Write ``(key, value)`` records of one group or transactional id (``key``) as
        one batch (``value`` None =
        tombstone), a transactional batch of the producer when ``producer_id`` is given
        (a transactional offset commit: no sequence, the producer's epoch is checked);
        where they went, None when nothing was written. Raises ``KafkaError`` if the log
        refuses them."""
        if self._topic is None or not records:
            return None
        from pybroker._native.records import encode_batch, validate_batch

        partition = self._topic.writable(self.partition_for(key))
        keys: list[bytes | None] = [k for k, _ in records]
        values = [v for _, v in records]
        buf = bytearray(encode_batch(values, keys, [now_ms] * len(records),
                                     producer_id=producer_id, producer_epoch=producer_epoch,
                                     transactional=producer_id >= 0))
        partition.append(memoryview(buf), validate_batch(buf))
        return Written(partition, partition.log.log_end_offset)

    async def replicated(self, written: Written) -> ErrorCode:
        """Wait (at most the commit timeout: ``offsets.commit.timeout.ms`` for groups)
        until the ISR has a write; what
        the client is told if it did not get it (Kafka's mapping: the coordinator is
        unavailable for now, or is not this broker any more)."""
        code = await written.partition.wait_for_high_watermark(written.end_offset,
                                                               self._commit_timeout_s)
        if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
            return ErrorCode.NOT_COORDINATOR
        if code == ErrorCode.NONE:
            return ErrorCode.NONE
        return ErrorCode.COORDINATOR_NOT_AVAILABLE  # NOT_ENOUGH_REPLICAS*, REQUEST_TIMED_OUT


def store_error(exc: KafkaError) -> ErrorCode:
    """What a client is told when a coordinator's topic refused a write (Kafka's mapping)."""
    if exc.code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
                    ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:  # leadership moved
        return ErrorCode.NOT_COORDINATOR
    if exc.code == ErrorCode.INVALID_PRODUCER_EPOCH:  # a transactional commit's producer
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return ErrorCode.COORDINATOR_NOT_AVAILABLE


def data_records(info: BatchInfo, data: memoryview, start: int) -> list[Record] | None:
    """The records at or after ``start`` of a batch read back from the log, None for a
    control or transactional batch (outside a transaction, what a coordinator writes)."""
    if info.is_control or info.is_transactional:
        return None
    return batch_records(info, data, start)


def batch_records(info: BatchInfo, data: memoryview, start: int) -> list[Record]:
    """The records at or after ``start`` of a batch read back from the log."""
    from pybroker._native.records import decode_records

    batch = decode_records(data)
    if info.base_offset < start:  # the log starts inside this batch
        batch = [r for r in batch if r.offset >= start]
    return batch


def latest_values(latest: dict[bytes, bytes | None], batch: list[Record]) -> int:
    """Keep the last value of each key of a batch of records (None: a tombstone); returns
    the record count. A coordinator record always has a key: one without is skipped."""
    for record in batch:
        if record.key is not None:
            latest[record.key] = record.value
    return len(batch)

"""Committed offsets and group metadata in the internal compacted topic ``__consumer_offsets``.

A group lives in partition ``abs(java_hash(group_id)) % offsets.topic.num.partitions``, so
all of a group's records are ordered in one log. Records use Kafka's own key and value
layouts (apache/kafka group-coordinator ``OffsetCommitKey``/``OffsetCommitValue``,
``GroupMetadataKey``/``GroupMetadataValue``), so a dump of the topic reads like Kafka's::

    key   = record type int16, then the key fields
      type 0/1  OffsetCommitKey    group string, topic string, partition int32
      type 2    GroupMetadataKey   group string
    value = version int16, then the value fields; a null value is a tombstone
      OffsetCommitValue v1  offset int64, metadata string, commit_ts int64, expire_ts int64
      OffsetCommitValue v3  offset int64, leader_epoch int32, metadata string, commit_ts int64
      GroupMetadataValue v3 protocol_type string, generation int32, protocol string?,
                            leader string?, current_state_timestamp int64,
                            members [member_id string, group_instance_id string?,
                                     client_id string, client_host string,
                                     rebalance_timeout int32, session_timeout int32,
                                     subscription bytes, assignment bytes]

The layouts are the specs' (``group-coordinator/``, generated into ``messages.DATA``): the
codec reads every version of them (v4 is Kafka's flexible encoding, which pybroker never
writes) and writes the group records; offset commits, the hot write, are packed here and
a test holds them to the codec's bytes.
Writes are one record batch per request through the native encoder onto the native log;
reading back (``data_records``) happens once per partition, when this broker becomes its
leader (on one node: of every partition, at start), and is the only Python loop over
records here. The topic is compacted by the log cleaner like any topic whose
``cleanup.policy`` is ``compact``: a key's older records go once a later one (a tombstone
for a deletion) is in a cleaned segment.

Where the topic is, how many partitions it has and which of them may be written are the
control plane's answers (:class:`OffsetsTopic`, supplied by the metadata implementation,
pybroker/metadata/): on one node the topic is created on first use and every partition
is written; in a cluster the controller creates it and only the partitions this broker
leads, with enough of an ISR, are.
"""

from __future__ import annotations

import functools
import struct
from typing import TYPE_CHECKING, NamedTuple, Protocol

from pybroker.coordinator.group import OffsetAndMetadata
from pybroker.errors import CorruptRecordError, ErrorCode, KafkaError
from pybroker.net.protocol.codec import decode_data, encode_data

if TYPE_CHECKING:
    from pybroker._native.records import BatchInfo, Record
    from pybroker.broker.partition import Partition
    from pybroker.broker.topic_manager import Topic

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_COMMIT_KEY = 1
GROUP_METADATA_KEY = 2



def offsets_topic_config(segment_bytes: int) -> dict[str, str]:
    """The offsets topic's config, as Kafka creates it: compacted by the log cleaner (the
    tombstones the coordinator writes let it drop what was deleted or expired), in
    segments of ``offsets.topic.segment.bytes``."""
    return {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()``: over UTF-16 code units, 32-bit signed overflow."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=1 << 16)
def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % partitions`` (abs(MIN_VALUE) is 0 there)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# record layouts ------------------------------------------------------------------------

class MemberRecord(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


class GroupRecord(NamedTuple):
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: list[MemberRecord]


class OffsetKey(NamedTuple):
    group: str
    topic: str
    partition: int


class GroupKey(NamedTuple):
    group: str


# Offset commits are the hot write of the coordinator (one record per partition per
# commit), so their layouts are packed directly rather than through the codec (a test
# checks the bytes are the codec's).
_KEY_HEAD = struct.Struct(">hh")     # record type, group length
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_V3_HEAD = struct.Struct(">hqih")    # version 3, offset, leader epoch, metadata length
_V1_HEAD = struct.Struct(">hqh")     # version 1, offset, metadata length
_I64 = struct.Struct(">q")
_TWO_I64 = struct.Struct(">qq")


def offset_key(group: str, topic: str, partition: int) -> bytes:
    g, t = group.encode(), topic.encode()
    return b"".join((_KEY_HEAD.pack(OFFSET_COMMIT_KEY, len(g)), g, _I16.pack(len(t)), t,
                     _I32.pack(partition)))


def group_key(group: str) -> bytes:
    return _I16.pack(GROUP_METADATA_KEY) + encode_data("GroupMetadataKey", GROUP_METADATA_KEY,
                                                       {"group": group})


def offset_value(o: OffsetAndMetadata) -> bytes:
    # v1 is the only layout with an explicit expire timestamp (a v2-v4 OffsetCommit
    # request with a retention time); v3 otherwise, as Kafka writes.
    m = o.metadata.encode()
    if o.expire_timestamp >= 0:
        return b"".join((_V1_HEAD.pack(1, o.offset, len(m)), m,
                         _TWO_I64.pack(o.commit_timestamp, o.expire_timestamp)))
    return b"".join((_V3_HEAD.pack(3, o.offset, o.leader_epoch, len(m)), m,
                     _I64.pack(o.commit_timestamp)))


GROUP_VALUE_VERSION = 3  # the newest non-flexible version, as Kafka writes


def group_value(g: GroupRecord) -> bytes:
    members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                "client_id": m.client_id, "client_host": m.client_host,
                "rebalance_timeout": m.rebalance_timeout_ms,
                "session_timeout": m.session_timeout_ms, "subscription": m.subscription,
                "assignment": m.assignment} for m in g.members]
    value = {"protocol_type": g.protocol_type, "generation": g.generation,
             "protocol": g.protocol, "leader": g.leader,
             "current_state_timestamp": g.state_timestamp, "members": members}
    return _I16.pack(GROUP_VALUE_VERSION) + encode_data("GroupMetadataValue",
                                                        GROUP_VALUE_VERSION, value)


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


def parse_key(data: bytes) -> OffsetKey | GroupKey | None:
    """The key of a record; None for record types pybroker does not use."""
    kind = _I16.unpack_from(data)[0] if len(data) >= _I16.size else -1
    if kind in (0, OFFSET_COMMIT_KEY):
        key = decode_versioned("OffsetCommitKey", data)
        return OffsetKey(key["group"], key["topic"], key["partition"])
    if kind == GROUP_METADATA_KEY:
        return GroupKey(decode_versioned("GroupMetadataKey", data)["group"])
    return None


def parse_offset_value(data: bytes) -> OffsetAndMetadata:
    v = decode_versioned("OffsetCommitValue", data)
    return OffsetAndMetadata(v["offset"], v["leader_epoch"], v["metadata"],
                             v["commit_timestamp"], v["expire_timestamp"])


def parse_group_value(data: bytes) -> GroupRecord:
    v = decode_versioned("GroupMetadataValue", data)
    members = [MemberRecord(
        m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"],
        # none (before v1: -1) means the session timeout, as Kafka reads it
        m["rebalance_timeout"] if m["rebalance_timeout"] >= 0 else m["session_timeout"],
        m["session_timeout"], m["subscription"], m["assignment"]) for m in v["members"]]
    return GroupRecord(v["protocol_type"], v["generation"], v["protocol"], v["leader"],
                       v["current_state_timestamp"], members)


# the log -------------------------------------------------------------------------------

class Written(NamedTuple):
    """Where an append went: the partition, and the offset after its last record (what
    the high watermark must reach for the write to be committed)."""

    partition: Partition
    end_offset: int

    def committed(self) -> bool:
        """Whether the write was committed as it was written: the ISR is this broker
        alone (one node, or a topic of one replica), so the high watermark moved with it."""
        return self.partition.high_watermark >= self.end_offset


class OffsetsTopic(Protocol):
    """``__consumer_offsets`` as this broker's control plane has it (the metadata
    implementations supply one). Its answers are the only difference between one node
    and a cluster that the store sees."""

    def partition_count(self) -> int | None:
        """The topic's partition count as the control plane knows it; None while it knows
        of no such topic (the configured count is used then)."""
        ...

    def local(self) -> Topic | None:
        """The topic as this broker has it (None if absent); its partitions led here are
        the ones whose groups this broker coordinates."""
        ...

    def writable(self, index: int) -> Partition:
        """The partition a write of one of its groups goes to, or the ``KafkaError`` why
        none can take it now (led elsewhere, too small an ISR, being created)."""
        ...


class OffsetStore:
    """Appends coordinator records to ``__consumer_offsets`` and says when they are
    committed.

    The topic is an ordinary (internal) topic to the broker, so Metadata, Fetch, the log
    cleaner and the dump tool see it like any other; ``offsets_topic`` says where it is
    (None: nothing is written, for tests of the protocol alone). The partition count is
    the topic's as the control plane knows it, else ``num_partitions``; once known it is
    kept, so every group keeps its partition. Not thread-safe (event loop only).
    """

    def __init__(self, offsets_topic: OffsetsTopic | None, num_partitions: int = 50,
                 commit_timeout_ms: int = 5000) -> None:
        self._offsets_topic = offsets_topic
        self._num_partitions = num_partitions
        self._commit_timeout_s = commit_timeout_ms / 1000

    @property
    def num_partitions(self) -> int:
        count = self._offsets_topic.partition_count() if self._offsets_topic else None
        if count:
            self._num_partitions = count  # kept: the topic's count never shrinks
        return self._num_partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def led_partitions(self) -> list[Partition]:
        """The partitions of the topic this broker leads and has a log of."""
        topic = self._offsets_topic.local() if self._offsets_topic else None
        return [p for p in (topic.partitions if topic is not None else ())
                if p.log is not None and p.is_leader]

    def append(self, group_id: str, records: list[tuple[bytes, bytes | None]],
               now_ms: int, producer_id: int = -1, producer_epoch: int = -1
               ) -> Written | None:
        """Write ``(key, value)`` records of one group as one batch (``value`` None =
        tombstone), a transactional batch of the producer when ``producer_id`` is given
        (a transactional offset commit: no sequence, the producer's epoch is checked);
        where they went, None when nothing was written. Raises ``KafkaError`` if the log
        refuses them."""
        if self._offsets_topic is None or not records:
            return None
        from pybroker._native.records import encode_batch, validate_batch

        partition = self._offsets_topic.writable(self.partition_for(group_id))
        keys: list[bytes | None] = [k for k, _ in records]
        values = [v for _, v in records]
        buf = bytearray(encode_batch(values, keys, [now_ms] * len(records),
                                     producer_id=producer_id, producer_epoch=producer_epoch,
                                     transactional=producer_id >= 0))
        partition.append(memoryview(buf), validate_batch(buf))
        return Written(partition, partition.log.log_end_offset)

    async def replicated(self, written: Written) -> ErrorCode:
        """Wait (at most ``offsets.commit.timeout.ms``) until the ISR has a write; what
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
    """What a client is told when ``__consumer_offsets`` refused a write (Kafka's mapping)."""
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

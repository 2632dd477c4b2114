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
reading back happens once per partition (at broker start, or in cluster mode when this
broker becomes the partition's leader) and is the only Python loop over records here.

Cluster mode (``replicated``): the topic is created through the controller (the
FindCoordinator handler does it), so the store never creates it; it appends only to the
partitions this broker leads, refusing the others with NOT_LEADER_OR_FOLLOWER and a
partition whose ISR is below min.insync.replicas with NOT_ENOUGH_REPLICAS (acks=all, as
Kafka's coordinator writes). The partition count comes from the cluster's metadata, so
every broker hashes a group to the same partition.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from pybroker.coordinator.group import OffsetAndMetadata
from pybroker.errors import (
    CoordinatorNotAvailableError,
    CorruptRecordError,
    KafkaError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    TopicAlreadyExistsError,
)
from pybroker.net.protocol.codec import decode_data, encode_data

log = logging.getLogger("pybroker.coordinator")

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_COMMIT_KEY = 1
GROUP_METADATA_KEY = 2

# Kafka's defaults for the offsets topic (offsets.topic.segment.bytes, cleanup policy)
OFFSETS_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 100 * 1024 * 1024}

_LOAD_READ_BYTES = 1 << 20
_REWRITE_BATCH = 1000  # records per batch when rewriting: well under max.message.bytes


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()``: over UTF-16 code units, 32-bit signed overflow."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


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


def _decode(name: str, data: bytes) -> dict:
    """A key or value: its int16 version, then the spec's layout of that version."""
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
        key = _decode("OffsetCommitKey", data)
        return OffsetKey(key["group"], key["topic"], key["partition"])
    if kind == GROUP_METADATA_KEY:
        return GroupKey(_decode("GroupMetadataKey", data)["group"])
    return None


def parse_offset_value(data: bytes) -> OffsetAndMetadata:
    v = _decode("OffsetCommitValue", data)
    return OffsetAndMetadata(v["offset"], v["leader_epoch"], v["metadata"],
                             v["commit_timestamp"], v["expire_timestamp"])


def parse_group_value(data: bytes) -> GroupRecord:
    v = _decode("GroupMetadataValue", data)
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

    partition: Any
    end_offset: int

    def committed(self) -> bool:
        """Whether the write was committed as it was written: the ISR is this broker
        alone (one node, or a topic of one replica), so the high watermark moved with it."""
        return self.partition.high_watermark >= self.end_offset


class OffsetStore:
    """Appends coordinator records to ``__consumer_offsets`` and replays them.

    ``topics`` is the broker's ``TopicManager``: the offsets topic is an ordinary (internal)
    topic to it, so Metadata, Fetch and the dump tool see it like any other. On one node
    it is created on the first write, as Kafka creates it on first use, and an existing
    topic's partition count wins over the configured one. ``replicated`` (cluster mode):
    see the module docstring; ``partition_count`` then gives the topic's partition count
    as the cluster knows it (None while it has no such topic). Not thread-safe (event
    loop only).
    """

    def __init__(self, topics: Any, num_partitions: int = 50,
                 topic_config: dict[str, Any] | None = None, replicated: bool = False,
                 partition_count: Callable[[], int | None] | None = None) -> None:
        self._topics = topics
        self.replicated = replicated
        self._partition_count = partition_count
        existing = topics.get(OFFSETS_TOPIC)
        self._num_partitions = len(existing.partitions) \
            if existing and existing.partitions and not replicated else num_partitions
        self._creation: asyncio.Future[None] | None = None  # create_topic's, while it runs
        self._topic_config = {k: str(v) for k, v in
                              {**OFFSETS_TOPIC_CONFIG, **(topic_config or {})}.items()}

    @property
    def num_partitions(self) -> int:
        if self._partition_count is not None:
            count = self._partition_count()
            if count:
                self._num_partitions = count  # kept: the topic's count never shrinks
        return self._num_partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def _topic(self, create: bool) -> Any:
        """The offsets topic with all its partitions (None if absent and not ``create``).

        A topic recorded with no partitions (metadata saved, logs not yet attached when the
        broker stopped) is grown back to its count; the logs it had are picked up again.
        Cluster mode: the local topic as it is (its partitions are this broker's replicas
        and placeholders), never created here."""
        topic = self._topics.get(OFFSETS_TOPIC)
        if self.replicated:
            return topic
        if topic is None:
            if not create:
                return None
            # A client that skipped FindCoordinator: created here, on the loop
            return self._topics.create(OFFSETS_TOPIC, self.num_partitions, 1,
                                       self._topic_config)
        if len(topic.partitions) < self._topics.partition_count(topic):
            if not create:
                return topic
            raise CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} is being created")
        if not topic.partitions:
            log.warning("%s has no partitions; restoring %d", OFFSETS_TOPIC,
                        self.num_partitions)
            self._topics.add_partitions(OFFSETS_TOPIC, self.num_partitions)
        return self._topics.get(OFFSETS_TOPIC)

    def topic_exists(self) -> bool:
        """Whether the offsets topic exists with all its logs (always, in cluster mode:
        the controller creates it there)."""
        return self.replicated or self._creation is None and \
            self._topics.get(OFFSETS_TOPIC) is not None

    async def create_topic(self) -> None:
        """Create the offsets topic if it does not exist (one node), its logs a slice
        at a time off the loop: 50 partitions created at once held every client ~65 ms.
        Concurrent callers share one creation; a caller that goes away leaves it running.
        Raises ``KafkaError`` if the creation failed (a full disk)."""
        if self.replicated:
            return
        if self._creation is None:
            if self._topics.get(OFFSETS_TOPIC) is not None:
                return
            self._creation = asyncio.ensure_future(self._create_topic())
        await asyncio.shield(self._creation)

    async def _create_topic(self) -> None:
        try:
            [created] = await self._topics.create_all_async(
                [(OFFSETS_TOPIC, self.num_partitions, 1, dict(self._topic_config))])
        finally:
            self._creation = None
        # TOPIC_ALREADY_EXISTS: created by a client that skipped FindCoordinator (``_topic``)
        if isinstance(created, KafkaError) and not isinstance(created, TopicAlreadyExistsError):
            raise created

    def _partition(self, index: int) -> Any:
        """The partition to append to; in cluster mode only one this broker leads."""
        if not self.replicated:
            return self._topic(create=True).partitions[index]
        topic = self._topics.get(OFFSETS_TOPIC)
        partition = topic.partitions[index] \
            if topic is not None and index < len(topic.partitions) else None
        if partition is None or partition.log is None or not partition.is_leader:
            raise NotLeaderOrFollowerError(f"{OFFSETS_TOPIC}-{index} is not led here")
        if len(partition.isr) < partition.config.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{OFFSETS_TOPIC}-{index}: ISR {partition.isr} is below "
                f"min.insync.replicas={partition.config.min_insync_replicas}")
        return partition

    def append(self, group_id: str, records: list[tuple[bytes, bytes | None]],
               now_ms: int) -> Written:
        """Write ``(key, value)`` records of one group as one batch (``value`` None =
        tombstone). Raises ``KafkaError`` if the log refuses it."""
        partition = self._partition(self.partition_for(group_id))
        self._append_to(partition, records, now_ms)
        return Written(partition, partition.log.log_end_offset)

    @staticmethod
    def _append_to(partition: Any, records: list[tuple[bytes, bytes | None]],
                   now_ms: int) -> None:
        if not records:
            return
        from pybroker._native.records import encode_batch, validate_batch

        keys: list[bytes | None] = [k for k, _ in records]
        values = [v for _, v in records]
        buf = bytearray(encode_batch(values, keys, [now_ms] * len(records)))
        info = validate_batch(buf)
        partition.append(memoryview(buf), info)

    def extents(self) -> dict[int, tuple[int, int]]:
        """``partition -> (log start offset, log end offset)`` of the existing topic (in
        cluster mode: of the partitions this broker leads)."""
        topic = self._topic(create=False)
        return {p.index: (p.log.log_start_offset, p.log.log_end_offset)
                for p in (topic.partitions if topic is not None else ())
                if p.log is not None and (p.is_leader or not self.replicated)}

    def copy_live(self, index: int, records: list[tuple[bytes, bytes | None]],
                  now_ms: int) -> tuple[Written, int]:
        """Append ``records`` (the partition's whole live state): where they went, and the
        offset of the first, the log start once they are committed (the coordinator's
        ``compact``)."""
        partition = self._partition(index)
        first = partition.log.log_end_offset
        for i in range(0, len(records), _REWRITE_BATCH):
            self._append_to(partition, records[i:i + _REWRITE_BATCH], now_ms)
        return Written(partition, partition.log.log_end_offset), first

    def read_all(self) -> Iterator[list[Any]]:
        """The data records of the topic, a batch at a time (``Record`` lists with
        ``key``/``value``), in log order within each partition."""
        topic = self._topic(create=False)
        for partition in topic.partitions if topic is not None else ():
            if partition.log is not None:
                yield from read_log(partition.log)


def read_log(partition_log: Any) -> Iterator[list[Any]]:
    """The records of every data batch of a log, from its start to its end."""
    from pybroker._native.records import decode_records

    start = partition_log.log_start_offset
    for info, data in partition_log.batches(start, _LOAD_READ_BYTES):
        if info.is_control or info.is_transactional:
            continue
        batch = decode_records(data)
        if info.base_offset < start:  # the log starts inside this batch
            batch = [r for r in batch if r.offset >= start]
        yield batch

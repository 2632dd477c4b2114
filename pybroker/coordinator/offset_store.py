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
How they are written, read back and placed is what both coordinators share
(internal_topic.py: ``CoordinatorLog``, ``InternalTopic``). The topic is compacted by the
log cleaner like any topic whose ``cleanup.policy`` is ``compact``: a key's older
records go once a later one (a tombstone for a deletion) is in a cleaned segment.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from pybroker.coordinator.group import OffsetAndMetadata
from pybroker.coordinator.internal_topic import decode_versioned
from pybroker.net.protocol.codec import encode_data

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_COMMIT_KEY = 1
GROUP_METADATA_KEY = 2



def offsets_topic_config(segment_bytes: int) -> dict[str, str]:
    """The offsets topic's config, as Kafka creates it: compacted by the log cleaner (the
    tombstones the coordinator writes let it drop what was deleted or expired), in
    segments of ``offsets.topic.segment.bytes``."""
    return {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}


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

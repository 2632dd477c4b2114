"""The ``__consumer_offsets`` record layouts (golden bytes) and the group -> partition map."""

from __future__ import annotations

import pytest

from pybroker.coordinator import internal_topic
from pybroker.coordinator import offset_store as rec
from pybroker.coordinator.consumer_protocol import (
    assignment_partitions,
    encode_assignment,
    encode_subscription,
    subscription_topics,
)
from pybroker.coordinator.group import OffsetAndMetadata
from pybroker.errors import KafkaError
from pybroker.net.protocol.codec import encode_data


@pytest.mark.parametrize("text,expected", [
    ("", 0), ("abc", 96354), ("hello", 99162322),
    ("polygenelubricants", -(1 << 31)),  # the classic Integer.MIN_VALUE hash
    ("\u00e9t\u00e9", (0xE9 * 31 + ord("t")) * 31 + 0xE9),  # UTF-16 units, not UTF-8 bytes
    ("\U0001F600", 0xD83D * 31 + 0xDE00),  # a surrogate pair counts as two units
])
def test_java_string_hash(text: str, expected: int) -> None:
    assert internal_topic.java_string_hash(text) == expected


def test_partition_for_matches_kafka_abs() -> None:
    assert internal_topic.partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) == 0
    assert internal_topic.partition_for("abc", 50) == 96354 % 50
    assert internal_topic.partition_for("hello", 7) == 99162322 % 7
    assert internal_topic.java_string_hash("zzzzzz") < 0  # overflowed: abs() before the modulo
    assert internal_topic.partition_for("zzzzzz", 50) == abs(internal_topic.java_string_hash("zzzzzz")) % 50


def test_offset_commit_key_and_value_golden_bytes() -> None:
    assert rec.offset_key("g", "t", 1) == bytes.fromhex("0001" "000167" "000174" "00000001")
    value = rec.offset_value(OffsetAndMetadata(5, 2, "m", 1000))
    assert value == bytes.fromhex("0003" "0000000000000005" "00000002" "00016d"
                                  "00000000000003e8")
    expiring = rec.offset_value(OffsetAndMetadata(5, 2, "", 1000, 2000))
    assert expiring == bytes.fromhex("0001" "0000000000000005" "0000"
                                     "00000000000003e8" "00000000000007d0")
    assert rec.parse_key(rec.offset_key("g", "t", 1)) == rec.OffsetKey("g", "t", 1)
    assert rec.parse_offset_value(value) == OffsetAndMetadata(5, 2, "m", 1000, -1)
    # v1 has no leader epoch but an expire timestamp
    assert rec.parse_offset_value(expiring) == OffsetAndMetadata(5, -1, "", 1000, 2000)
    # v0: offset, metadata, commit timestamp
    v0 = bytes.fromhex("0000" "0000000000000009" "0000" "0000000000000001")
    assert rec.parse_offset_value(v0) == OffsetAndMetadata(9, -1, "", 1, -1)


def test_group_metadata_golden_bytes_and_round_trip() -> None:
    assert rec.group_key("g") == bytes.fromhex("0002" "000167")
    member = rec.MemberRecord("m", "i", "c", "/h", 300, 100, b"S", b"A")
    record = rec.GroupRecord("consumer", 3, "range", "m", 42, [member])
    data = rec.group_value(record)
    assert data == bytes.fromhex(
        "0003" "0008" + b"consumer".hex() + "00000003" "0005" + b"range".hex()
        + "00016d" "000000000000002a" "00000001"
        + "00016d" "000169" "000163" "00022f68" "0000012c" "00000064"
        + "0000000153" "0000000141")
    assert rec.parse_key(rec.group_key("g")) == rec.GroupKey("g")
    assert rec.parse_group_value(data) == record
    empty = rec.GroupRecord("consumer", 4, None, None, 43, [])
    assert rec.parse_group_value(rec.group_value(empty)) == empty


def test_packed_offset_records_are_the_codecs_bytes() -> None:
    for group, topic, partition in [("g", "t", 1), ("gr\u00fcppe", "topic-" * 40, 2**31 - 1)]:
        assert rec.offset_key(group, topic, partition) == b"\x00\x01" + encode_data(
            "OffsetCommitKey", 1, {"group": group, "topic": topic, "partition": partition})
    for o in [OffsetAndMetadata(5, 2, "m\u00e9ta", 1000), OffsetAndMetadata(2**62, -1, "", -1),
              OffsetAndMetadata(7, 3, "x", 1000, 2000)]:
        version = 1 if o.expire_timestamp >= 0 else 3
        assert rec.offset_value(o) == version.to_bytes(2, "big") + encode_data(
            "OffsetCommitValue", version, {
                "offset": o.offset, "leader_epoch": o.leader_epoch, "metadata": o.metadata,
                "commit_timestamp": o.commit_timestamp, "expire_timestamp": o.expire_timestamp})


def test_flexible_v4_values_are_read() -> None:
    # what Kafka 4 writes: compact strings and an empty tag buffer
    value = bytes.fromhex("0004" "0000000000000005" "00000002" "026d" "00000000000003e8" "00")
    assert rec.parse_offset_value(value) == OffsetAndMetadata(5, 2, "m", 1000, -1)


def test_unknown_versions_and_truncation_are_refused() -> None:
    with pytest.raises(KafkaError):
        rec.parse_offset_value(bytes.fromhex("0005") + bytes(20))
    with pytest.raises(KafkaError):
        rec.parse_group_value(rec.group_value(rec.GroupRecord("c", 1, None, None, 0, []))[:-2])
    assert rec.parse_key(bytes.fromhex("0003" "000167")) is None


def test_consumer_protocol_bytes() -> None:
    assert subscription_topics(encode_subscription(["a", "b"], b"x")) == ["a", "b"]
    assert subscription_topics(b"\x00") is None
    assert assignment_partitions(encode_assignment({"a": [0, 2], "b": [1]})) \
        == {"a": [0, 2], "b": [1]}
    assert assignment_partitions(b"") == {}
    assert encode_subscription(["a"], None) == bytes.fromhex("0000" "00000001" "000161" "ffffffff")
    v1 = b"\x00\x01" + encode_data("ConsumerProtocolSubscription", 1, {
        "topics": ["a"], "owned_partitions": [{"topic": "a", "partitions": [0]}]})
    assert subscription_topics(v1) == ["a"]
    # a version newer than the specs' is read with the newest layout known
    newer = b"\x00\x09" + encode_data("ConsumerProtocolSubscription", 3,
                                       {"topics": ["b"], "owned_partitions": []}) + b"later fields"
    assert subscription_topics(newer) == ["b"]

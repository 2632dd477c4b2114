"""The consumer protocol's subscription and assignment bytes, read by the coordinator.

The broker relays these opaquely between members; it reads them only to know which topics
a group subscribes to (offset retention, OffsetDelete) and to show assignments.

    ConsumerProtocolSubscription (v0-3): version int16, topics [string], user_data bytes,
        v1+ owned_partitions [topic string, partitions [int32]], v2+ generation_id int32,
        v3+ rack_id string
    ConsumerProtocolAssignment (v0-3): version int16,
        assigned_partitions [topic string, partitions [int32]], user_data bytes

Later versions only append fields, so a newer version is read with the fields we know.
"""

from __future__ import annotations

from pybroker.coordinator.wire import Reader, Writer
from pybroker.errors import KafkaError


def subscription_topics(data: bytes | None) -> list[str] | None:
    """Topics of a subscription, None when the bytes are not a consumer subscription."""
    if not data:
        return None
    try:
        reader = Reader(data)
        reader.int16()
        return [t or "" for t in reader.array(reader.string)]
    except (KafkaError, UnicodeDecodeError):
        return None


def assignment_partitions(data: bytes | None) -> dict[str, list[int]]:
    """Topic -> partitions of an assignment; empty for empty or unreadable bytes."""
    if not data:
        return {}
    try:
        reader = Reader(data)
        reader.int16()
        pairs = reader.array(lambda: (reader.string() or "", reader.array(reader.int32)))
    except (KafkaError, UnicodeDecodeError):
        return {}
    out: dict[str, list[int]] = {}
    for topic, partitions in pairs:
        out.setdefault(topic, []).extend(partitions)
    return out


def encode_subscription(topics: list[str], user_data: bytes | None = None) -> bytes:
    """Version 0 subscription (tests and tools)."""
    writer = Writer().int16(0).int32(len(topics))
    for topic in topics:
        writer.string(topic)
    return writer.blob(user_data).done()


def encode_assignment(partitions: dict[str, list[int]], user_data: bytes | None = None) -> bytes:
    """Version 0 assignment (tests and tools)."""
    writer = Writer().int16(0).int32(len(partitions))
    for topic, parts in partitions.items():
        writer.string(topic).int32(len(parts))
        for p in parts:
            writer.int32(p)
    return writer.blob(user_data).done()

"""The consumer protocol's subscription and assignment bytes, read by the coordinator.

The broker relays these opaquely between members; it reads them only to know which topics
a group subscribes to (offset retention, OffsetDelete) and to show assignments. The layouts
are the specs' ``ConsumerProtocolSubscription`` and ``ConsumerProtocolAssignment``
(generated into ``messages.DATA``; the codec reads and writes them)::

    version int16, then the struct of that version (v0-3, never flexible)

Later versions only append fields, so a version newer than the specs' is read with the
newest layout known, and the bytes after it are ignored.
"""

from __future__ import annotations

import struct

from pybroker.errors import KafkaError
from pybroker.net.protocol.codec import decode_data, encode_data
from pybroker.net.protocol.table import DATA

_VERSION = struct.Struct(">h")


def _decode(name: str, data: bytes) -> dict | None:
    """The struct after the version prefix; None when the bytes are not one."""
    if len(data) < _VERSION.size:
        return None
    version = _VERSION.unpack_from(data)[0]
    low, high = DATA[name].versions
    if version < low:
        return None
    try:
        return decode_data(name, min(version, high), data, _VERSION.size)
    except KafkaError:
        return None


def subscription_topics(data: bytes | None) -> list[str] | None:
    """Topics of a subscription, None when the bytes are not a consumer subscription."""
    if not data:
        return None
    subscription = _decode("ConsumerProtocolSubscription", data)
    return None if subscription is None else list(subscription["topics"])


def assignment_partitions(data: bytes | None) -> dict[str, list[int]]:
    """Topic -> partitions of an assignment; empty for empty or unreadable bytes."""
    if not data:
        return {}
    assignment = _decode("ConsumerProtocolAssignment", data)
    out: dict[str, list[int]] = {}
    for item in assignment["assigned_partitions"] if assignment else []:
        out.setdefault(item["topic"], []).extend(item["partitions"])
    return out


def encode_subscription(topics: list[str], user_data: bytes | None = None) -> bytes:
    """Version 0 subscription (tests and tools)."""
    return _VERSION.pack(0) + encode_data("ConsumerProtocolSubscription", 0,
                                          {"topics": topics, "user_data": user_data})


def encode_assignment(partitions: dict[str, list[int]], user_data: bytes | None = None) -> bytes:
    """Version 0 assignment (tests and tools)."""
    assigned = [{"topic": topic, "partitions": parts} for topic, parts in partitions.items()]
    return _VERSION.pack(0) + encode_data("ConsumerProtocolAssignment", 0, {
        "assigned_partitions": assigned, "user_data": user_data})

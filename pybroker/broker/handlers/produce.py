"""Produce (key 0), v3-v11: validate each partition's batch natively, then append it.

Per partition (one Python pass, no per-record loop, STYLE 10): the topic must exist
(UNKNOWN_TOPIC_OR_PARTITION; an illegal name INVALID_TOPIC_EXCEPTION; Kafka never
auto-creates on produce, clients ask Metadata first), the records must be exactly one v2
batch (none: INVALID_RECORD; more or torn: CORRUPT_MESSAGE), not larger than the topic's
``max.message.bytes`` (MESSAGE_TOO_LARGE), and pass ``validate_batch`` (CRC, framing,
codec: CORRUPT_MESSAGE / INVALID_RECORD / UNSUPPORTED_COMPRESSION_TYPE). The batch is
appended from the receive buffer itself: the frame is a writable ``bytearray`` of its own,
so offsets and LogAppendTime are stamped in place and nothing is copied. Batches are stored
as the producer compressed them (``compression.type=producer``; the broker never
recompresses). Idempotence: see :mod:`pybroker.broker.producer_state`.

acks: 0 gets no response (and a failed acks=0 request closes the connection, Kafka's way
of telling a producer that is not listening), 1 and -1 are answered once appended: on one
node the ISR is this broker, so all replicas have it (acks=-1 to a topic asking
``min.insync.replicas`` > 1 gets NOT_ENOUGH_REPLICAS, as Kafka would with an ISR of one).
Anything else: INVALID_REQUIRED_ACKS.
"""

from __future__ import annotations

import logging
from typing import Any

from pybroker._native.records import read_batch_header, validate_batch
from pybroker._native.wire import parse_produce
from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.broker.topic_manager import validate_topic_name
from pybroker.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRecordError,
    KafkaError,
    MessageTooLargeError,
    NotEnoughReplicasError,
)
from pybroker.net.connection import CloseConnection

log = logging.getLogger("pybroker.produce")

BATCH_HEADER_SIZE = 61


def _error(index: int, code: int, message: str | None = None) -> dict[str, Any]:
    return {"index": index, "error_code": code, "base_offset": -1, "log_append_time_ms": -1,
            "log_start_offset": -1, "record_errors": [], "error_message": message}


def _append(ctx: RequestContext, topic: str, index: int, records: Any,
            acks: int) -> dict[str, Any]:
    partition = ctx.broker.topics.partition(topic, index)
    if acks == -1 and partition.config.min_insync_replicas > 1:
        raise NotEnoughReplicasError(
            f"The size of the current ISR 1 is insufficient to satisfy the min.isr "
            f"requirement of {partition.config.min_insync_replicas} for partition "
            f"{topic}-{index}")
    if records is None or len(records) == 0:
        raise InvalidRecordError("Produce requests with version 3+ must have at least one "
                                 "record batch per partition")
    if len(records) > partition.config.max_message_bytes:
        raise MessageTooLargeError(
            f"The batch is {len(records)} bytes, larger than max.message.bytes "
            f"{partition.config.max_message_bytes}")
    if len(records) < BATCH_HEADER_SIZE:
        raise CorruptRecordError(f"{len(records)} bytes are not a record batch")
    if read_batch_header(records).size != len(records):
        raise CorruptRecordError("Produce requests must have exactly one record batch per "
                                 "partition")
    info = validate_batch(records)
    result = partition.append(records, info)
    return {"index": index, "error_code": ErrorCode.NONE, "base_offset": result.base_offset,
            "log_append_time_ms": result.log_append_time,
            "log_start_offset": result.log_start_offset, "record_errors": [],
            "error_message": None}


def _topic_error(topics: Any, name: str) -> int:
    if topics.get(name) is not None:
        return ErrorCode.NONE  # existing names were validated when created
    try:
        validate_topic_name(name)
    except KafkaError as exc:
        return exc.code
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@handler(api_key=0, versions=(3, 11), decode=parse_produce)
async def produce(ctx: RequestContext, request: tuple) -> dict | None:
    _transactional_id, acks, _timeout_ms, topic_data = request
    topics = ctx.broker.topics
    responses = []
    failed = False
    for name, partitions in topic_data:
        results = []
        topic_code = _topic_error(topics, name) if acks in (0, 1, -1) else \
            ErrorCode.INVALID_REQUIRED_ACKS
        for index, records in partitions:
            if topic_code:
                results.append(_error(index, topic_code))
                failed = True
                continue
            try:
                results.append(_append(ctx, name, index, records, acks))
            except KafkaError as exc:
                results.append(_error(index, exc.code, str(exc)))
                failed = True
            except Exception:
                log.exception("bug appending to %s-%d", name, index)
                results.append(_error(index, ErrorCode.UNKNOWN_SERVER_ERROR))
                failed = True
        responses.append({"name": name, "partition_responses": results})
    if acks == 0:
        if failed:
            raise CloseConnection("acks=0 produce failed: "
                                  + ", ".join(f"{r['name']}-{p['index']}: {p['error_code']}"
                                              for r in responses for p in r["partition_responses"]
                                              if p["error_code"]))
        return None
    return {"responses": responses, "throttle_time_ms": 0}

"""Produce (key 0), v3-v11: validate each partition's batch natively, then append it.

Per partition (one Python pass, no per-record loop, STYLE 10): the partition must exist
(UNKNOWN_TOPIC_OR_PARTITION; an illegal name, or an internal topic such as
``__consumer_offsets``, INVALID_TOPIC_EXCEPTION; Kafka never auto-creates on produce,
clients ask Metadata first; one of the cluster with no replica here:
NOT_LEADER_OR_FOLLOWER), the records must be exactly one v2 batch (none: INVALID_RECORD;
more or torn: CORRUPT_MESSAGE), not larger than the topic's ``max.message.bytes``
(MESSAGE_TOO_LARGE), and pass ``validate_batch`` (CRC, framing, codec: CORRUPT_MESSAGE /
INVALID_RECORD / UNSUPPORTED_COMPRESSION_TYPE; to a topic whose ``cleanup.policy``
includes ``compact``, a key in every record: else INVALID_RECORD with a KIP-467 record
error per record without one, found in the same native walk, as Kafka). The batch is
appended from the receive buffer itself: the frame is a writable ``bytearray`` of its
own, so offsets and LogAppendTime are stamped in place and nothing is copied. Batches
are stored as the producer compressed them (``compression.type=producer``; the broker
never recompresses). Idempotence: see :mod:`pybroker.log.producer_state`.

A request is handled in two passes, so that no request holds the event loop long however
many or large its batches (issue 19). The first checks every partition and validates the
batches that are cheap to check inline (small uncompressed ones, and a request's first
4 MiB of uncompressed bytes, see :mod:`pybroker.broker.validation`), which has no side
effect. The second hands the others, compressed ones among them, to the validation
threads in one job (taken in turn with other requests' jobs) and appends in request
order, each batch once its validation is done (the partition's leadership and ISR
checked again if that meant waiting). Both passes give the loop back every
``SLICE_SECONDS`` of work, so a request of thousands of partitions is served in slices
with other clients' requests in between; the one-record produce runs both without
suspending.

Each batch is appended with one call, ``Partition.append``, in request order; the
partition decides whether the write completes inline. A small batch to a partition with
nothing queued is written right there, so its answer is ready with no coroutine of its
own (the one-record produce round trip). Any other batch joins its partition's queue and
the handler awaits its future: a large batch's write is awaited by the partition's
writer task, so the loop serves other connections while the kernel copies it, and the
writes of one request's partitions reach io_uring in one submission. The partition keeps
its appends in arrival order, so the handler needs no ordering of its own.
The response is built by the Cython ``build_produce_response``.

Client quotas (``producer_byte_rate``, :mod:`pybroker.broker.quotas`): the request's size
counts against the producer's quota once it is handled; over it, the answer carries
``throttle_time_ms`` and the connection is muted that long, as Kafka does.

The first transactional batch of a producer's transaction on a partition is written only
once the transaction coordinator confirms the partition is in the transaction (KIP-890
part 1, pybroker/txn/verification.py): else INVALID_TXN_STATE.

Only the partition's leader appends (NOT_LEADER_OR_FOLLOWER: the client refreshes its
metadata; from v10, as KIP-951, the answer names the current leader and its endpoint
when the control plane knows them, so the client can go there at once). The partitions
are looked at for that only when some were refused or awaited, so a one-record produce
that succeeded inline does no more work. acks: 0 gets no response (and a failed acks=0
request closes the connection, Kafka's way of telling a producer that is not listening),
1 is answered once appended here, -1 (all) once every ISR member has the batch: refused
before the append with NOT_ENOUGH_REPLICAS when the ISR is smaller than
``min.insync.replicas``; after it the answer waits for the high watermark
(``Partition.wait_for_high_watermark``: REQUEST_TIMED_OUT after the request's timeout,
NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below the minimum meanwhile). On one
node the ISR is this broker, so acks=-1 is answered as acks=1. Anything else:
INVALID_REQUIRED_ACKS.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeAlias

from pybroker._native.records import BatchInfo
from pybroker._native.wire import (
    PRODUCE_NODE_ENDPOINTS_FIRST,
    build_produce_response,
    parse_produce,
)
from pybroker.broker import validation
from pybroker.broker.handlers import Encoded, handler
from pybroker.broker.leader_hints import LeaderHints
from pybroker.broker.partition import Partition
from pybroker.broker.quotas import PRODUCER_BYTE_RATE
from pybroker.broker.request import RequestContext
from pybroker.broker.topic_manager import validate_topic_name
from pybroker.errors import (
    ErrorCode,
    InvalidRecordError,
    KafkaError,
    MessageTooLargeError,
    RecordValidationError,
)
from pybroker.log.log import AppendInfo
from pybroker.net.connection import CloseConnection
from pybroker.security.acl import AclOperation, ResourceType

if TYPE_CHECKING:
    from pybroker._native.wire import NodeEndpoint, ProducePartition

log = logging.getLogger("pybroker.produce")

# Loop time a request's handling takes before giving the loop back to other clients.
SLICE_SECONDS = 0.001

# A partition's answer: (index, error_code, base_offset, log_append_time_ms,
# log_start_offset, error_message, record_errors, current_leader), what
# build_produce_response encodes.
PartitionResult: TypeAlias = "ProducePartition"


def _error(index: int, code: int, message: str | None = None,
           record_errors: list[tuple[int, str]] | None = None) -> PartitionResult:
    return index, code, -1, -1, -1, message, record_errors, None


def _leader(ctx: RequestContext, topic: str, index: int, acks: int) -> Partition:
    """The partition, if this broker may append to it now, or the KafkaError to answer."""
    return ctx.broker.topics.leader_for_write(topic, index, acks == -1,
                                              ctx.broker.metadata.partition_exists)


def _check_size(partition: Partition, records: Any) -> None:
    if records is None or len(records) == 0:
        raise InvalidRecordError("Produce requests with version 3+ must have at least one "
                                 "record batch per partition")
    if len(records) > partition.config.max_message_bytes:
        raise MessageTooLargeError(
            f"The batch is {len(records)} bytes, larger than max.message.bytes "
            f"{partition.config.max_message_bytes}")


def _topic_error(ctx: RequestContext, name: str) -> int:
    # (the hot path without an authorizer: one attribute test, no call)
    if ctx.broker.authorizer is not None and not ctx.authorize(
            AclOperation.WRITE, ResourceType.TOPIC, name):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    topic = ctx.broker.topics.get(name)
    if topic is not None:
        # Existing names were validated when created. Internal topics are the broker's
        # own log (the group coordinator's offsets): Kafka refuses clients' appends to
        # them with INVALID_TOPIC_EXCEPTION, and so do we.
        return ErrorCode.INVALID_TOPIC_EXCEPTION if topic.internal else ErrorCode.NONE
    try:
        validate_topic_name(name)
    except KafkaError as exc:
        return exc.code
    if ctx.broker.metadata.partition_exists(name, 0):
        return ErrorCode.NONE  # a topic of the cluster none of whose replicas is here
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _append(topic: str, index: int, partition: Partition, records: Any, info: Any,
            acks: int, timeout_ms: int
            ) -> PartitionResult | Coroutine[Any, Any, PartitionResult]:
    """Append the batch (``Partition.append``, which decides whether the write completes
    inline): the partition's answer when it did (the one-record produce, with no coroutine
    to create and await), else the coroutine that awaits the write (and, for acks=-1 with
    followers in the ISR, the high watermark)."""
    try:
        appended = partition.append(records, info)
    except Exception as exc:
        return _failed(topic, index, exc)
    if acks == -1 and len(partition.isr) > 1:
        return _in_isr(topic, index, partition, appended, info, timeout_ms)
    if isinstance(appended, AppendInfo):
        return _answer(index, appended)
    return _written(topic, index, appended)


async def _written(topic: str, index: int,
                   appended: asyncio.Future[AppendInfo]) -> PartitionResult:
    try:
        return _answer(index, await appended)
    except Exception as exc:
        return _failed(topic, index, exc)


async def _in_isr(topic: str, index: int, partition: Partition,
                      appended: AppendInfo | asyncio.Future[AppendInfo], info: Any,
                      timeout_ms: int) -> PartitionResult:
    """acks=-1: answer once the ISR has the batch."""
    try:
        result = appended if isinstance(appended, AppendInfo) else await appended
    except Exception as exc:
        return _failed(topic, index, exc)
    code = await partition.wait_for_high_watermark(
        result.base_offset + info.last_offset_delta + 1, max(timeout_ms, 0) / 1000)
    if code:
        return _error(index, code)
    return _answer(index, result)


def _answer(index: int, result: AppendInfo) -> PartitionResult:
    return (index, ErrorCode.NONE, result.base_offset, result.log_append_time,
            result.log_start_offset, None, None, None)


def _leader_hints(ctx: RequestContext, responses: list[tuple[str, list[PartitionResult]]]
                  ) -> list[NodeEndpoint] | None:
    """KIP-951: each partition refused with NOT_LEADER_OR_FOLLOWER gets its current leader
    (as Kafka, which names it for no other error of a produce), the response the
    endpoints of those leaders."""
    hints = LeaderHints(ctx.broker.metadata, ctx.listener)
    for name, results in responses:
        for slot, result in enumerate(results):
            if result[1] == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                leader = hints.current_leader(name, result[0])
                if leader is not None:
                    results[slot] = (*result[:7], leader)
    return hints.node_endpoints()


def _failed(topic: str, index: int, exc: BaseException) -> PartitionResult:
    if isinstance(exc, RecordValidationError):
        return _error(index, exc.code, str(exc), exc.record_errors)
    if isinstance(exc, KafkaError):
        return _error(index, exc.code, str(exc))
    log.error("bug appending to %s-%d", topic, index, exc_info=exc)
    return _error(index, ErrorCode.UNKNOWN_SERVER_ERROR)


# A batch ready to append: (its topic's results, its slot there, topic, index, partition,
# records, its BatchInfo, or None while the validation pool has it to check).
_Batch = tuple[list[PartitionResult], int, str, int, Partition, Any, BatchInfo | None]


@handler(api_key=0, versions=(3, 11), decode=parse_produce)
async def produce(ctx: RequestContext, request: tuple) -> Encoded | None:
    transactional_id, acks, timeout_ms, topic_data = request
    pool = ctx.broker.validation_pool
    clock = time.perf_counter
    responses: list[tuple[str, list[PartitionResult]]] = []
    # 1. Check and validate every batch: no side effect, the expensive ones in the pool.
    batches: list[_Batch] = []
    # (records, keyless_error) of the batches left to the pool, in order
    deferred: list[tuple[Any, str | None]] = []
    inline_bytes = 0
    refused = False  # a partition was refused, so leader hints may be due
    slice_end = clock() + SLICE_SECONDS
    request_code = ErrorCode.INVALID_REQUIRED_ACKS if acks not in (0, 1, -1) else \
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if transactional_id is not None \
        and not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                              transactional_id) else ErrorCode.NONE
    for name, partitions in topic_data:
        results: list[PartitionResult] = []
        topic_code = request_code or _topic_error(ctx, name)
        for index, records in partitions:
            if topic_code:
                results.append(_error(index, topic_code))
                continue
            try:
                partition = _leader(ctx, name, index, acks)
                _check_size(partition, records)
                keyless_error = validation.keyless_error(name, index) \
                    if partition.config.compacts else None
                info: BatchInfo | None = None  # None: for the pool, in the second pass
                if pool is None or validation.cheap(records, inline_bytes):
                    inline_bytes += len(records)
                    info = validation.validated(records, keyless_error)
                else:
                    deferred.append((records, keyless_error))
            except Exception as exc:
                results.append(_failed(name, index, exc))
                refused = True
                continue
            batches.append((results, len(results), name, index, partition, records, info))
            results.append(_error(index, ErrorCode.UNKNOWN_SERVER_ERROR))  # placeholder
            if clock() > slice_end:
                await asyncio.sleep(0)
                slice_end = clock() + SLICE_SECONDS
        responses.append((name, results))
    # 2. Append in request order, each batch once validated.
    validations = iter(pool.submit(deferred) if pool and deferred else ())
    appends: list[tuple[list[PartitionResult], int, Any]] = []  # (results, slot, coroutine)
    for results, slot, name, index, partition, records, info in batches:
        if info is None:
            try:
                outcome = await next(validations)
                partition = _leader(ctx, name, index, acks)  # it may have changed meanwhile
            except asyncio.CancelledError:
                for abandoned in validations:
                    abandoned.cancel()  # the pool skips them
                raise
            except Exception as exc:
                results[slot] = _failed(name, index, exc)
                refused = True
                continue
            if isinstance(outcome, KafkaError):  # returned, not raised: see ValidationPool
                results[slot] = _failed(name, index, outcome)
                continue
            info = outcome
        if info.is_transactional and info.producer_id not in \
                partition.log.producer_state.ongoing and ctx.broker.txn_verifier.enabled:
            # the first batch of a transaction here: is the partition in it? (KIP-890)
            code = await ctx.broker.txn_verifier.verify(
                transactional_id, info.producer_id, info.producer_epoch, (name, index))
            if code == ErrorCode.NONE:
                try:
                    partition = _leader(ctx, name, index, acks)  # it may have changed
                except KafkaError as exc:
                    code = ErrorCode(exc.code)
            if code != ErrorCode.NONE:
                results[slot] = _error(index, code)
                refused = True
                continue
        answer = _append(name, index, partition, records, info, acks, timeout_ms)
        if isinstance(answer, tuple):
            results[slot] = answer
        else:
            appends.append((results, slot, answer))
        if clock() > slice_end:
            await asyncio.sleep(0)
            slice_end = clock() + SLICE_SECONDS
    if len(appends) == 1:
        results, slot, append = appends[0]
        results[slot] = await append
    elif appends:
        # The partitions' writer tasks have their writes in flight together: the
        # appender submits the writes queued in one loop iteration with one
        # io_uring_enter, and the kernel copies them in parallel workers.
        for (results, slot, _), result in zip(
                appends, await asyncio.gather(*(a for _, _, a in appends)), strict=True):
            results[slot] = result
    # Kafka counts the whole request once it is handled, acks=0 too (muted, no answer)
    throttle_ms = ctx.record_quota(PRODUCER_BYTE_RATE, len(ctx.frame)) \
        if ctx.broker.quotas.active else 0
    if acks == 0:
        errors = [f"{name}-{p[0]}: {p[1]}" for name, results in responses for p in results
                  if p[1]]
        if errors:
            raise CloseConnection("acks=0 produce failed: " + ", ".join(errors))
        return None
    endpoints = None
    # An awaited append may have been refused too: leadership can move while it waits.
    if (refused or appends) and ctx.api_version >= PRODUCE_NODE_ENDPOINTS_FIRST:
        endpoints = _leader_hints(ctx, responses)
    # The Cython builder: the generic codec's field walk cost ~4 us a request.
    return Encoded([build_produce_response(ctx.api_version, ctx.correlation_id, throttle_ms,
                                           responses, endpoints)])

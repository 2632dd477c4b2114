"""Fetch (key 1), v4-v17: record bytes go from the segment files to the socket unread.

Per partition the log answers with ``FileRegion``s up to the high watermark; read_committed
(isolation level 1) reads up to the last stable offset, below the first offset of the
earliest transaction still open (``Log.last_stable_offset``), and lists the aborted
transactions overlapping what it returns (``Log.aborted_transactions``, in memory, per
transaction: the records stay unread). The response is built by the Cython
builder (``pybroker._native.wire.build_fetch``) as header bytes and those regions, which
the connection sends with sendfile/splice.

Limits, as Kafka applies them (KIP-74): ``max_bytes`` (capped by the broker's
``fetch.max.bytes``) bounds the whole response and ``partition_max_bytes`` each partition,
except that the first batch of the first partition with data is returned whole even if it
is larger, so a consumer can always make progress.

Long polling: if fewer than ``min_bytes`` are available and no partition has an error, the
request waits up to ``max_wait_ms`` for appends to any of its partitions, re-reading after
each, then answers with what there is. Shutdown wakes it at once; a client that goes away
ends it at once (``RequestContext.park``), releasing its socket.

Replication: only the leader serves a partition (NOT_LEADER_OR_FOLLOWER, also for a
partition of the cluster with no replica here; a ``current_leader_epoch`` older than ours
FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH).
From v16, as KIP-951, a partition refused with either of the first two names its current
leader and the response that leader's endpoint, when the control plane knows them.
A fetch with ``replica_id`` >= 0 comes from a follower: its fetch offset tells the leader
what it has (``Partition.follower_fetched``: ISR and high watermark), and it reads up to
the log end, not the high watermark.

Replication quota (KIP-73, :mod:`pybroker.repl.throttle`): while the leader's
``leader.replication.throttled.rate`` is exceeded, a follower's fetch gets no records
for the partitions whose ``leader.replication.throttled.replicas`` list this broker,
unless that follower is in the partition's ISR; the records sent of those partitions
count against the rate.

Client quotas (``consumer_byte_rate``, :mod:`pybroker.broker.quotas`): a consumer's
response counts against its quota; one that takes it over is answered empty with
``throttle_time_ms`` and its connection muted that long, and a consumer's ``max_bytes`` is
bounded by what its quota allows in the quota windows but one, as Kafka does.

Fetch sessions (KIP-227): the broker keeps none. Every response says session id 0, which
tells v7+ clients to send full requests; a request naming a session id gets
FETCH_SESSION_ID_NOT_FOUND, after which clients start over without one. v13+ address
topics by id: an unknown id gets UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from pybroker._native.wire import FETCH_NODE_ENDPOINTS_FIRST, build_fetch
from pybroker.broker.handlers import handler
from pybroker.broker.leader_hints import LeaderHints
from pybroker.broker.partition import Partition
from pybroker.broker.quotas import CONSUMER_BYTE_RATE
from pybroker.broker.request import Encoded, RequestContext
from pybroker.broker.topic_manager import check_leader
from pybroker.errors import ErrorCode, KafkaError
from pybroker.net.protocol.typed import FetchRequest
from pybroker.security.acl import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from pybroker._native.wire import CurrentLeader, NodeEndpoint
    from pybroker.repl.throttle import ReplicationQuota

log = logging.getLogger("pybroker.fetch")

READ_COMMITTED = 1
FIRST_TOPIC_ID_VERSION = 13
# the errors whose partitions are told where the leader is (KIP-951)
REDIRECTED = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)

# (partition index, the partition or None, error code, fetch offset, partition max bytes,
# the current leader to name when refused)
Wanted = tuple[int, "Partition | None", int, int, int, "CurrentLeader | None"]


def _replica_id(request: FetchRequest) -> int:
    """The fetching follower's broker id (v15+ in ``replica_state``), -1 for consumers."""
    state = request.get("replica_state")
    if state is not None and state.get("replica_id", -1) >= 0:
        return state["replica_id"]
    return request.get("replica_id", -1)


def _resolve(ctx: RequestContext, request: FetchRequest, replica_id: int
             ) -> tuple[list[tuple[Any, list[Wanted]]], list[NodeEndpoint] | None]:
    """The partitions asked for, and the endpoints of the leaders named to the refused."""
    topics = ctx.broker.topics
    metadata = ctx.broker.metadata
    by_id = ctx.api_version >= FIRST_TOPIC_ID_VERSION
    hints = LeaderHints(metadata, ctx.listener) if ctx.api_version >= FETCH_NODE_ENDPOINTS_FIRST else None
    wanted = []
    key: uuid.UUID | str
    name: str | None
    # a follower's fetch needs CLUSTER_ACTION, a consumer's READ on each topic (the hot
    # path without an authorizer: one attribute test, no call)
    checking = ctx.broker.authorizer is not None
    follower_allowed = replica_id >= 0 and ctx.authorize(
        AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    for t in request["topics"]:
        if by_id:
            key, missing = t["topic_id"], ErrorCode.UNKNOWN_TOPIC_ID
            topic = topics.by_id(key)
            name = topic.name if topic is not None else metadata.topic_name(key)
        else:
            key = name = t["topic"]
            topic, missing = topics.get(name), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        parts: list[Wanted] = []
        if checking and name is not None and not (follower_allowed if replica_id >= 0 else
                                     ctx.authorize(AclOperation.READ, ResourceType.TOPIC, name)):
            wanted.append((key, [_refused(None, name, p["partition"],
                                          ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                                 for p in t["partitions"]]))
            continue
        for p in t["partitions"]:
            index = p["partition"]
            if topic is None or not 0 <= index < len(topic.partitions):
                code = missing if topic is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if name is not None and metadata.partition_exists(name, index):
                    code = ErrorCode.NOT_LEADER_OR_FOLLOWER  # of the cluster, no replica here
                parts.append(_refused(hints, name, index, code))
                continue
            partition = topic.partitions[index]
            try:
                check_leader(partition, p.get("current_leader_epoch", -1))
            except KafkaError as exc:
                parts.append(_refused(hints, topic.name, index, exc.code))
                continue
            if replica_id >= 0:
                partition.follower_fetched(replica_id, p["fetch_offset"])
            parts.append((index, partition, ErrorCode.NONE, p["fetch_offset"],
                          p["partition_max_bytes"], None))
        wanted.append((key, parts))
    return wanted, hints.node_endpoints() if hints is not None else None


def _refused(hints: LeaderHints | None, name: str | None, index: int, code: int) -> Wanted:
    """A partition answered with ``code``, naming its leader where KIP-951 says to."""
    leader = None
    if hints is not None and name is not None and code in REDIRECTED:
        leader = hints.current_leader(name, index)
    return index, None, code, 0, 0, leader


def _held_back(throttle: ReplicationQuota, wanted: list[tuple[Any, list[Wanted]]],
               replica_id: int) -> set[Partition]:
    """The partitions the leader throttle answers with no records while it is exceeded:
    throttled here and not in sync on the fetching follower (Kafka's
    ``shouldLeaderThrottle``)."""
    return {partition for _, parts in wanted for _, partition, _, _, _, _ in parts
            if partition is not None and replica_id not in partition.isr
            and throttle.throttled(partition)}


def _read(wanted: list[tuple[Any, list[Wanted]]], max_bytes: int,
          committed: bool, follower: bool = False,
          held: Collection[Partition] = ()) -> tuple[list, int, bool, list]:
    """One pass over the partitions: (response topics, bytes found, any partition error,
    (partition, bytes) of each partition with records); those in ``held`` are answered
    with no records."""
    remaining = max_bytes
    total = 0
    errors = False
    out = []
    found: list[tuple[Partition, int]] = []
    for key, parts in wanted:
        out_parts: list[tuple] = []
        for index, partition, code, offset, partition_max, leader in parts:
            if partition is None or partition.deleted:
                out_parts.append((index, code or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1,
                                  -1, None, b"", leader))
                errors = True
                continue
            if partition.offline:  # its log directory failed while the fetch waited
                out_parts.append((index, ErrorCode.KAFKA_STORAGE_ERROR, -1, -1, -1, None, b"",
                                  leader))
                errors = True
                continue
            plog = partition.log
            try:
                hw = plog.high_watermark
                start = plog.log_start_offset
                records: Any = b""
                aborted: list[tuple[int, int]] | None = [] if committed else None
                if offset < start or offset > plog.log_end_offset:
                    raise KafkaError(f"offset {offset} not in [{start}, {plog.log_end_offset}]",
                                     ErrorCode.OFFSET_OUT_OF_RANGE)
                lso = plog.last_stable_offset
                bound = plog.log_end_offset if follower else lso if committed else hw
                if offset < bound and remaining > 0 and partition not in held:
                    result = plog.read(offset, min(partition_max, remaining), max_offset=bound,
                                       min_one=total == 0)
                    if result.size:
                        records = result.regions
                        total += result.size
                        remaining -= result.size
                        found.append((partition, result.size))
                        if committed:
                            aborted = [(txn.producer_id, txn.first_offset) for txn in
                                       plog.aborted_transactions(offset, lso)]
                out_parts.append((index, ErrorCode.NONE, hw, lso, start, aborted, records, None))
            except KafkaError as exc:
                out_parts.append((index, exc.code, plog.high_watermark, plog.last_stable_offset,
                                  plog.log_start_offset, None, b"", None))
                errors = True
        out.append((key, out_parts))
    return out, total, errors, found


@handler(api_key=1, versions=(4, 17))
async def fetch(ctx: RequestContext, request: FetchRequest) -> Encoded:
    broker = ctx.broker
    version = ctx.api_version
    if version >= 7 and request["session_id"] != 0:
        parts, _ = build_fetch(version, ctx.correlation_id, 0,
                               ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])
        return Encoded(parts)
    replica_id = _replica_id(request)
    ctx.quota_exempt = replica_id >= 0  # replication: no client quota holds it back
    wanted, endpoints = _resolve(ctx, request, replica_id)
    max_bytes = min(request["max_bytes"], broker.config["fetch.max.bytes"])
    if replica_id < 0 and broker.quotas.active:
        bound = broker.quotas.window_bound(CONSUMER_BYTE_RATE, ctx.principal, ctx.client_id)
        if bound is not None:
            max_bytes = min(max_bytes, int(bound))
    committed = request["isolation_level"] == READ_COMMITTED
    min_bytes = request["min_bytes"]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request["max_wait_ms"] / 1000
    throttle = broker.replication_quotas.leader if replica_id >= 0 else None
    while True:
        held: Collection[Partition] = (_held_back(throttle, wanted, replica_id)
                                       if throttle is not None and throttle.exceeded()
                                       else ())
        topics, total, errors, found = _read(wanted, max_bytes, committed, replica_id >= 0,
                                             held)
        remaining = deadline - loop.time()
        if total >= min_bytes or errors or remaining <= 0 or broker.shutting_down:
            break
        await _wait_for_append(ctx, loop, wanted, remaining)
    throttle_ms = 0
    if replica_id < 0 and broker.quotas.active:
        # throttled: answered empty, its bytes not counted; the consumer asks again
        throttle_ms = ctx.record_quota(CONSUMER_BYTE_RATE, total, unrecord_if_throttled=True)
        if throttle_ms:
            topics, found, endpoints = [], [], None
    if replica_id < 0:  # a consumer's: Kafka's BytesOut leaves replication out
        for partition, size in found:
            partition.bytes_out += size
    else:
        for partition, size in found:
            partition.replication_bytes_out += size
        if throttle is not None and throttle.active:
            throttle.record(sum(size for partition, size in found
                                if throttle.throttled(partition)))
    parts, _ = build_fetch(version, ctx.correlation_id, throttle_ms, ErrorCode.NONE, 0, topics,
                           endpoints)
    return Encoded(parts)


async def _wait_for_append(ctx: RequestContext, loop: asyncio.AbstractEventLoop,
                           wanted: list[tuple[Any, list[Wanted]]], timeout: float) -> None:
    fut: asyncio.Future[None] = loop.create_future()
    for _, parts in wanted:
        for _, partition, _, _, _, _ in parts:
            if partition is not None:
                partition.waiter(fut)
    timer = loop.call_later(timeout, _resolve_future, fut)
    try:
        await ctx.park(fut)
    finally:
        timer.cancel()


def _resolve_future(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)

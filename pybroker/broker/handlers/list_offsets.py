"""ListOffsets (key 2), v1-v10: offsets by timestamp, and the special timestamps.

-2 earliest (the log start offset), -1 latest (the high watermark; with isolation level 1,
read_committed, the last stable offset: ``Log.last_stable_offset``), -3 the record with
the largest timestamp (v7+, KIP-734), -4 earliest local (v8+, KIP-405: no tiered storage,
so the log start), -5 latest tiered (v9+, KIP-1005: nothing is tiered, so offset -1 with
no leader epoch, as Kafka answers for a topic without remote storage). v10 adds only a
timeout for remote reads (KIP-1075), which nothing here waits on. A special timestamp
newer than the request's version is UNSUPPORTED_VERSION for that partition, as Kafka
answers it. The leader epoch answered is Kafka's: the current one for latest, else the
epoch of the batch holding the offset found (-1 when none is). A timestamp >= 0 finds the first record with a timestamp at or after it
below that same bound; none gives offset and timestamp -1, as Kafka answers. Only the
leader answers (NOT_LEADER_OR_FOLLOWER; a stale or future ``current_leader_epoch``:
FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH).
"""

from __future__ import annotations

import logging

from pybroker.broker.handlers import handler
from pybroker.broker.partition import Partition
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode, KafkaError, UnsupportedVersionError
from pybroker.net.protocol.typed import (
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsResponsePartitionResponse,
    ListOffsetsResponseTopicResponse,
)
from pybroker.security.acl import AclOperation, ResourceType

log = logging.getLogger("pybroker.list_offsets")

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
READ_COMMITTED = 1


def _offset(partition: Partition, timestamp: int, version: int, committed: bool
            ) -> tuple[int, int, int]:
    """(timestamp, offset, leader epoch) answered for ``timestamp``; ``committed``:
    read_committed."""
    plog = partition.log
    epochs = plog.leader_epoch_cache
    bound = plog.last_stable_offset if committed else plog.high_watermark
    if timestamp == LATEST:
        return -1, bound, partition.leader_epoch
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        if timestamp == EARLIEST_LOCAL and version < 8:
            raise UnsupportedVersionError("earliest-local offsets need ListOffsets v8+")
        return -1, plog.log_start_offset, epochs.epoch_at(plog.log_start_offset)
    if timestamp == LATEST_TIERED:
        if version < 9:
            raise UnsupportedVersionError("latest-tiered offsets need ListOffsets v9+")
        return -1, -1, -1
    if timestamp == MAX_TIMESTAMP and version < 7:
        raise UnsupportedVersionError("max-timestamp offsets need ListOffsets v7+")
    if timestamp < 0 and timestamp != MAX_TIMESTAMP:
        raise UnsupportedVersionError(f"special timestamp {timestamp} is not supported")
    found = plog.offset_for_timestamp(timestamp)
    if found is None or found.offset >= bound:
        return -1, -1, -1
    return found.timestamp, found.offset, epochs.epoch_at(found.offset)


@handler(api_key=2, versions=(1, 10))
async def list_offsets(ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    topics = ctx.broker.topics
    committed = request.get("isolation_level", 0) == READ_COMMITTED
    out: list[ListOffsetsResponseTopicResponse] = []
    for t in request["topics"]:
        parts: list[ListOffsetsResponsePartitionResponse] = []
        for p in t["partitions"]:
            index = p["partition_index"]
            try:
                ctx.require(AclOperation.DESCRIBE, ResourceType.TOPIC, t["name"])
                partition = topics.led_partition(t["name"], index,
                                                 p.get("current_leader_epoch", -1))
                timestamp, offset, epoch = _offset(partition, p["timestamp"],
                                                   ctx.api_version, committed)
                parts.append({"partition_index": index, "error_code": ErrorCode.NONE,
                              "timestamp": timestamp, "offset": offset,
                              "leader_epoch": epoch})
            except KafkaError as exc:
                parts.append({"partition_index": index, "error_code": exc.code,
                              "timestamp": -1, "offset": -1, "leader_epoch": -1})
        out.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": out}

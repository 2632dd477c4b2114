"""OffsetForLeaderEpoch (key 23), v0-v4: where a leader epoch ended in this replica's log.

A follower asks its leader, before fetching, for the end of the follower's latest epoch;
it truncates what it has past that offset (a tail written by a leader that lost it,
docs/REPLICATION.md). Per partition the answer is ``(epoch, end offset)`` from the log's
leader epoch cache (Kafka's ``LeaderEpochFileCache.endOffsetFor``): the largest epoch at
or below the one asked and the offset where it ended (the log end for the latest epoch);
``(-1, -1)`` when the log knows no such epoch.

Errors per partition, as Kafka's ``Partition.lastOffsetForLeaderEpoch``:
- UNKNOWN_TOPIC_OR_PARTITION: no such topic or partition;
- NOT_LEADER_OR_FOLLOWER: this broker does not lead it (no log here, or a follower),
  except for ``replica_id`` -2 (v3+: Kafka's debugging replica id, which may read a
  follower's log; v0-v2 carry no replica id and are answered by leaders only);
- ``current_leader_epoch`` (v2+; -1 names none) newer than ours: UNKNOWN_LEADER_EPOCH
  (our LeaderAndIsr has not arrived yet), older: FENCED_LEADER_EPOCH.
Single node: every partition is its leader at epoch 0.
"""

from __future__ import annotations

from typing import Any

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode, KafkaError
from pybroker.log.leader_epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from pybroker.net.protocol.typed import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochRequestOffsetForLeaderPartition,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderEpochResponseEpochEndOffset,
    OffsetForLeaderEpochResponseOffsetForLeaderTopicResult,
)
from pybroker.security.acl import CLUSTER_NAME, AclOperation, ResourceType

DEBUGGING_REPLICA_ID = -2
FIRST_REPLICA_ID_VERSION = 3


def _epoch_end(topics: Any, topic: str, p: OffsetForLeaderEpochRequestOffsetForLeaderPartition,
               leader_only: bool) -> tuple[int, int, int]:
    """(error code, epoch, end offset) of one partition."""
    try:
        partition = topics.partition(topic, p["partition"])
    except KafkaError as exc:
        return exc.code, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    plog = partition.log
    if plog is None or (leader_only and not partition.is_leader):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    current = p["current_leader_epoch"]
    if current >= 0 and current != partition.leader_epoch:
        code = (ErrorCode.FENCED_LEADER_EPOCH if current < partition.leader_epoch
                else ErrorCode.UNKNOWN_LEADER_EPOCH)
        return code, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    epoch, end = plog.leader_epoch_cache.end_offset_for_epoch(p["leader_epoch"],
                                                               plog.log_end_offset)
    return ErrorCode.NONE, epoch, end


@handler(api_key=23, versions=(0, 4))
async def offset_for_leader_epoch(
        ctx: RequestContext, request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    topics = ctx.broker.topics
    leader_only = not (ctx.api_version >= FIRST_REPLICA_ID_VERSION
                       and request["replica_id"] == DEBUGGING_REPLICA_ID)
    # a follower's request needs CLUSTER_ACTION, a client's DESCRIBE on each topic
    follower = ctx.api_version >= FIRST_REPLICA_ID_VERSION and request["replica_id"] >= 0
    out: list[OffsetForLeaderEpochResponseOffsetForLeaderTopicResult] = []
    for t in request["topics"]:
        parts: list[OffsetForLeaderEpochResponseEpochEndOffset] = []
        refused = ctx.refusal(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME) \
            if follower else ctx.refusal(AclOperation.DESCRIBE, ResourceType.TOPIC, t["topic"])
        for p in t["partitions"]:
            code, epoch, end = _epoch_end(topics, t["topic"], p, leader_only) \
                if refused is None else (refused.code, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
            parts.append({"error_code": code, "partition": p["partition"],
                          "leader_epoch": epoch, "end_offset": end})
        out.append({"topic": t["topic"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": out}

"""DescribeProducers (key 61, KIP-664): the active producers of partitions, from their logs'
producer state (``kafka-transactions.sh describe-producers``, Admin.describeProducers).

Per partition, as Kafka's ``ReplicaManager.activeProducerState``: a broker with a replica
of the partition answers from its log (the leader usually; a follower too, which the
admin client asks when given a broker id), every producer the state still holds with its
epoch, last sequence (-1 before any batch), last timestamp (its last append's),
coordinator epoch (its last marker's, -1 before one) and the first offset of its open
transaction (-1: none). A partition of a known topic without a replica here is
NOT_LEADER_OR_FOLLOWER, an unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION.
Python work per producer: the state holds the producers alive within
``producer.id.expiration.ms``.
"""

from __future__ import annotations

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.errors import (
    ErrorCode,
    KafkaError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from pybroker.net.protocol.typed import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeProducersResponsePartitionResponse,
    DescribeProducersResponseProducerState,
    DescribeProducersResponseTopicResponse,
)
from pybroker.security.acl import AclOperation, ResourceType


def _active_producers(ctx: RequestContext, topic: str,
                      index: int) -> list[DescribeProducersResponseProducerState]:
    ctx.require(AclOperation.READ, ResourceType.TOPIC, topic)
    try:
        partition = ctx.broker.topics.partition(topic, index)
    except UnknownTopicOrPartitionError:
        if not ctx.broker.metadata.partition_exists(topic, index):
            raise
        partition = None  # a partition of the cluster with no replica here
    if partition is None or partition.log is None:
        raise NotLeaderOrFollowerError(f"No replica of {topic}-{index} on this broker")
    return [{"producer_id": producer_id, "producer_epoch": entry.epoch,
             "last_sequence": entry.last_seq, "last_timestamp": entry.last_ms,
             "coordinator_epoch": entry.coordinator_epoch,
             "current_txn_start_offset": entry.txn_first_offset}
            for producer_id, entry in partition.producers.producers.items()]


def _partition_response(ctx: RequestContext, topic: str,
                        index: int) -> DescribeProducersResponsePartitionResponse:
    try:
        producers = _active_producers(ctx, topic, index)
    except KafkaError as exc:
        return {"partition_index": index, "error_code": int(exc.code), "active_producers": []}
    return {"partition_index": index, "error_code": ErrorCode.NONE,
            "active_producers": producers}


@handler(api_key=61, versions=(0, 0))
async def describe_producers(ctx: RequestContext,
                             request: DescribeProducersRequest) -> DescribeProducersResponse:
    topics: list[DescribeProducersResponseTopicResponse] = [
        {"name": t["name"], "partitions": [_partition_response(ctx, t["name"], index)
                                           for index in t.get("partition_indexes") or []]}
        for t in request.get("topics") or []]
    return {"throttle_time_ms": 0, "topics": topics}

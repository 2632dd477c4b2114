"""DescribeTopicPartitions (key 75, KIP-966): Metadata's description of topics, a page of
partitions at a time.

The topics are Metadata's (:meth:`pybroker.metadata.Metadata.describe_topics`, or every
topic when the request names none), answered in name order, from the request's
``cursor`` (a topic and the partition to start at) on, until ``response_partition_limit``
partitions (at most ``max.request.partition.size.limit``, at least one) are in the answer.
``next_cursor`` then names the first partition left out, as Kafka 4.1 answers:
- the page ends inside a topic: that topic and its next partition; it ends exactly at a
  topic's end: the next topic (named or existing), partition 0; nothing is left: null;
- a topic named but unknown (or invalid) takes its place with its error and no partition,
  and uses none of the limit; a name given twice is answered once;
- a cursor before the first partition, or naming a topic the request does not name, is
  INVALID_REQUEST for every topic named.
Eligible leader replicas (KIP-966's ELR) are not kept here: both lists are empty.
"""

from __future__ import annotations

from pybroker.broker.authorized_operations import NOT_REQUESTED, authorized_operations
from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode
from pybroker.metadata import TopicAnswer, missing_topic
from pybroker.net.protocol.codec import ZERO_UUID
from pybroker.net.protocol.typed import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponseCursor,
    DescribeTopicPartitionsResponseTopic,
)
from pybroker.security.acl import AclOperation, ResourceType

_METADATA_VERSION = 12


@handler(api_key=75, versions=(0, 0))
async def describe_topic_partitions(ctx: RequestContext, request: DescribeTopicPartitionsRequest
                                    ) -> DescribeTopicPartitionsResponse:
    plane = ctx.broker.metadata
    cursor = request.get("cursor")
    first_name = cursor["topic_name"] if cursor is not None else ""
    named = [t["name"] for t in request["topics"]]
    if cursor is not None and (cursor["partition_index"] < 0
                               or (named and first_name not in named)):
        return {"throttle_time_ms": 0, "next_cursor": None,
                "topics": [_refused(name, ErrorCode.INVALID_REQUEST) for name in named]}
    if named:
        names = {name for name in named if name >= first_name}
        visible = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        answers = await plane.describe_topics(
            [{"name": name} for name in sorted(visible)], False, _METADATA_VERSION)
        answers = sorted(answers + [
            missing_topic(name, ZERO_UUID, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            for name in names - visible], key=lambda t: t["name"] or "")
    else:
        answers = sorted((t for t in plane.describe_all_topics()
                          if (t["name"] or "") >= first_name), key=lambda t: t["name"] or "")
        visible = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC,
                                 [t["name"] or "" for t in answers])
        answers = [t for t in answers if t["name"] in visible]
    limit = max(1, min(request["response_partition_limit"],
                       ctx.broker.config["max.request.partition.size.limit"]))
    topics, next_cursor = _page(ctx, answers, cursor, limit)
    return {"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor}


def _page(ctx: RequestContext, answers: list[TopicAnswer], cursor: DescribeTopicPartitionsResponseCursor | None,
          limit: int) -> tuple[list[DescribeTopicPartitionsResponseTopic],
                               DescribeTopicPartitionsResponseCursor | None]:
    """The topics of one page, and the cursor to the first partition it leaves out."""
    remaining = limit
    topics: list[DescribeTopicPartitionsResponseTopic] = []
    for answer in answers:
        name = answer["name"] or ""
        if remaining == 0:
            return topics, {"topic_name": name, "partition_index": 0}
        start = cursor["partition_index"] if cursor and cursor["topic_name"] == name else 0
        partitions = answer["partitions"][start:start + remaining]
        topics.append({
            "error_code": answer["error_code"], "name": name, "topic_id": answer["topic_id"],
            "is_internal": answer.get("is_internal", False),
            "topic_authorized_operations": authorized_operations(
                ctx, ResourceType.TOPIC, name),
            "partitions": [{
                "error_code": p["error_code"], "partition_index": p["partition_index"],
                "leader_id": p["leader_id"], "leader_epoch": p.get("leader_epoch", -1),
                "replica_nodes": p["replica_nodes"], "isr_nodes": p["isr_nodes"],
                "eligible_leader_replicas": [], "last_known_elr": [],
                "offline_replicas": p.get("offline_replicas", [])} for p in partitions]})
        if start + remaining < len(answer["partitions"]):
            return topics, {"topic_name": name, "partition_index": start + remaining}
        remaining -= len(partitions)
    return topics, None


def _refused(name: str, code: int) -> DescribeTopicPartitionsResponseTopic:
    return {"error_code": code, "name": name, "topic_id": ZERO_UUID, "is_internal": False,
            "topic_authorized_operations": NOT_REQUESTED, "partitions": []}

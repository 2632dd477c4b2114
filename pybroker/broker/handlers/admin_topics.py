"""DeleteTopics (key 20) and CreatePartitions (key 37).

Both answer per topic, as Kafka's controller does (``ControllerApis`` /
``ReplicationControlManager``): a topic named twice in one request gets INVALID_REQUEST and
is not acted on; an unknown name UNKNOWN_TOPIC_OR_PARTITION, an unknown id (DeleteTopics
v6) UNKNOWN_TOPIC_ID. Deleting a topic removes its logs and its persisted config; with
``delete.topic.enable=false`` every topic gets TOPIC_DELETION_DISABLED.

CreatePartitions only grows a topic: a count at or below the current one (the declared one,
while a topic is still being created) is INVALID_PARTITIONS, and so is one above
``MAX_PARTITIONS_PER_TOPIC`` (10,000). ``validate_only`` runs every check and changes
nothing.

The checks of the request itself are here; the topics are deleted and grown by the control
plane (``ctx.broker.metadata``, :mod:`pybroker.metadata`), whose module docstrings say how
(one node: all of a request's deletions in one durable write of ``topics.json`` before the
answer, new partition logs created a slice at a time; a cluster: through ZooKeeper and
the controller).

The partitions deleted and created count against the client's ``controller_mutation_rate``
quota (KIP-599, ``pybroker.broker.quotas``) before the control plane is asked, and are
given back when it refuses; a topic of a request asked for while the client is over its
quota is answered THROTTLING_QUOTA_EXCEEDED from DeleteTopics v5 and CreatePartitions v3.
"""

from __future__ import annotations

import uuid
from collections import Counter

from pybroker.broker.handlers import handler
from pybroker.broker.quotas import MutationQuota
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode, InvalidRequestError, KafkaError, TopicDeletionDisabledError
from pybroker.metadata import DeletedTopic
from pybroker.net.protocol.codec import ZERO_UUID
from pybroker.net.protocol.typed import (
    CreatePartitionsRequest,
    CreatePartitionsRequestTopic,
    CreatePartitionsResponse,
    CreatePartitionsResponseTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DeleteTopicsResponseDeletableTopicResult,
)
from pybroker.security.acl import AclOperation, ResourceType

# DeleteTopics -----------------------------------------------------------------------------


def _delete_targets(ctx: RequestContext,
                    request: DeleteTopicsRequest) -> list[tuple[str | None, uuid.UUID]]:
    """(name, id) per requested topic: v0-5 name them, v6 names or ids (one of the two)."""
    if ctx.api_version < 6:
        return [(name, ZERO_UUID) for name in request.get("topic_names") or []]
    return [(t.get("name"), t.get("topic_id") or ZERO_UUID) for t in request.get("topics") or []]


def _deletion(name: str | None, topic_id: uuid.UUID,
              error: KafkaError | None = None) -> DeleteTopicsResponseDeletableTopicResult:
    return {"name": name, "topic_id": topic_id,
            "error_code": ErrorCode.NONE if error is None else int(error.code),
            "error_message": None if error is None else str(error)}


def _refusal(ctx: RequestContext, name: str | None, topic_id: uuid.UUID,
             duplicated: bool) -> KafkaError | None:
    """Why the request may not delete this topic, or None."""
    if (name is None) == (topic_id == ZERO_UUID):
        return InvalidRequestError("Neither topic name nor id were specified." if name is None
                                   else "You may not specify both topic name and topic id.")
    if duplicated:
        return InvalidRequestError("Duplicate topic name." if name else "Duplicate topic id.")
    known = name if name is not None else ctx.broker.metadata.topic_name(topic_id)
    refused = ctx.refusal(AclOperation.DELETE, ResourceType.TOPIC, known) \
        if known is not None else None
    if refused is not None:
        return refused
    if not ctx.broker.config["delete.topic.enable"]:
        return TopicDeletionDisabledError("Topic deletion is disabled.")
    return None


@handler(api_key=20, versions=(0, 6))
async def delete_topics(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    targets = _delete_targets(ctx, request)
    seen = Counter(name if name is not None else topic_id for name, topic_id in targets)
    responses: list[DeleteTopicsResponseDeletableTopicResult] = []
    quota = ctx.mutation_quota(strict_since=5)
    # (slot in responses, target, partitions counted against the quota)
    deleting: list[tuple[int, str | None, uuid.UUID, int]] = []
    for name, topic_id in targets:
        refusal = _refusal(ctx, name, topic_id, seen[name if name is not None else topic_id] > 1)
        if refusal is None:
            known = name if name is not None else ctx.broker.metadata.topic_name(topic_id)
            counted = ctx.broker.metadata.partition_count(known) if known is not None else 0
            try:
                quota.record(counted)
                deleting.append((len(responses), name, topic_id, counted))
            except KafkaError as exc:
                refusal = exc
        responses.append(_deletion(name, topic_id, refusal))  # a deletion's is replaced below
    if deleting:
        deleted = await ctx.broker.metadata.delete_topics(
            [(name, topic_id) for _, name, topic_id, _ in deleting])
        for (slot, name, topic_id, counted), outcome in zip(deleting, deleted, strict=True):
            if isinstance(outcome, DeletedTopic):
                responses[slot] = _deletion(outcome.name, outcome.topic_id)
            else:
                quota.refund(counted)
                responses[slot] = _deletion(name, topic_id, outcome)
    return {"throttle_time_ms": ctx.mutation_throttle(quota), "responses": responses}


# CreatePartitions --------------------------------------------------------------------------


def _partitions_result(name: str,
                       error: KafkaError | None = None) -> CreatePartitionsResponseTopicResult:
    return {"name": name, "error_code": ErrorCode.NONE if error is None else int(error.code),
            "error_message": None if error is None else str(error)}


async def _create_partitions_one(ctx: RequestContext, item: CreatePartitionsRequestTopic,
                                 duplicated: bool, validate_only: bool,
                                 quota: MutationQuota) -> CreatePartitionsResponseTopicResult:
    name = item["name"]
    if duplicated:
        return _partitions_result(name, InvalidRequestError("Duplicate topic name."))
    refused = ctx.refusal(AclOperation.ALTER, ResourceType.TOPIC, name)
    if refused is not None:
        return _partitions_result(name, refused)
    current = ctx.broker.metadata.partition_count(name)
    counted = item["count"] - current if current and item["count"] > current else 0
    try:
        quota.record(counted)
    except KafkaError as exc:
        return _partitions_result(name, exc)
    try:
        await ctx.broker.metadata.create_partitions(name, item["count"], item["assignments"],
                                                    validate_only)
    except KafkaError as exc:
        quota.refund(counted)
        return _partitions_result(name, exc)
    return _partitions_result(name)


@handler(api_key=37, versions=(0, 3))
async def create_partitions(ctx: RequestContext,
                            request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    items = request.get("topics") or []
    seen = Counter(item.get("name") for item in items)
    validate_only = bool(request.get("validate_only"))
    quota = ctx.mutation_quota(strict_since=3)
    results = [await _create_partitions_one(ctx, item, seen[item.get("name")] > 1,
                                            validate_only, quota) for item in items]
    return {"throttle_time_ms": ctx.mutation_throttle(quota), "results": results}

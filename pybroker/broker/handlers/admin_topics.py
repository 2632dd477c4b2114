"""DeleteTopics (key 20) and CreatePartitions (key 37).

Both answer per topic, as Kafka's controller does (``ControllerApis`` /
``ReplicationControlManager``): a topic named twice in one request gets INVALID_REQUEST and
is not acted on; an unknown name UNKNOWN_TOPIC_OR_PARTITION, an unknown id (DeleteTopics
v6) UNKNOWN_TOPIC_ID. Deleting a topic removes its logs and its persisted config; one
node deletes all the topics of a request together (``TopicManager.delete_async``: one
write of ``topics.json``, durable before the answer, the logs closed a slice at a time and
their files removed off the event loop); with ``delete.topic.enable=false`` every topic
gets TOPIC_DELETION_DISABLED.

CreatePartitions only grows a topic: a count at or below the current one (the declared one,
while a topic is still being created) is INVALID_PARTITIONS, and so is one above
``MAX_PARTITIONS_PER_TOPIC`` (10,000). Manual assignments must name one replica per new
partition, this broker (a single node has nothing else to place them on); anything else is
INVALID_REPLICA_ASSIGNMENT. ``validate_only`` runs every check and changes nothing.

The change is durable (``topics.json`` replaced and fsynced) before the answer, so
``timeout_ms`` never expires; new partition logs are created a slice at a time
(``TopicManager.add_partitions_async``), other clients being served in between.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.broker.topic_manager import check_partition_limit
from pybroker.errors import (
    ErrorCode,
    InvalidPartitionsError,
    KafkaError,
    UnknownTopicOrPartitionError,
)
from pybroker.net.protocol.codec import ZERO_UUID


def error_fields(exc: KafkaError) -> dict[str, Any]:
    return {"error_code": int(exc.code), "error_message": str(exc)}


def _ok() -> dict[str, Any]:
    return {"error_code": ErrorCode.NONE, "error_message": None}


# DeleteTopics -----------------------------------------------------------------------------


def _delete_targets(ctx: RequestContext, request: dict) -> list[tuple[str | None, uuid.UUID]]:
    """(name, id) per requested topic: v0-5 name them, v6 names or ids (one of the two)."""
    if ctx.api_version < 6:
        return [(name, ZERO_UUID) for name in request.get("topic_names") or []]
    return [(t.get("name"), t.get("topic_id") or ZERO_UUID) for t in request.get("topics") or []]


async def _delete_in_cluster(ctx: RequestContext, name: str | None, topic_id: uuid.UUID,
                             result: dict[str, Any]) -> dict[str, Any]:
    from pybroker.cluster import admin

    cache = ctx.broker.metadata
    info = cache.topic(name) if name is not None else cache.topic_by_id(topic_id)
    if info is None and name is None:
        return {**result, "error_code": ErrorCode.UNKNOWN_TOPIC_ID,
                "error_message": f"Topic id {topic_id} does not exist."}
    target = info.name if info is not None else name
    assert target is not None  # no info and no name was answered above
    try:
        await admin.delete_topic(ctx.broker, target)
    except KafkaError as exc:
        return {**result, **error_fields(exc)}
    return {"name": info.name if info else name,
            "topic_id": info.topic_id if info else topic_id, **_ok()}


async def _delete_one(ctx: RequestContext, name: str | None, topic_id: uuid.UUID,
                      duplicated: bool, deleting: dict[str, None]) -> dict[str, Any]:
    """The answer for one topic, or on one node the topic's answer if its deletion (by
    the caller, with the request's others: ``deleting``) succeeds."""
    topics = ctx.broker.topics
    result = {"name": name, "topic_id": topic_id}
    if (name is None) == (topic_id == ZERO_UUID):
        code, message = ErrorCode.INVALID_REQUEST, (
            "Neither topic name nor id were specified." if name is None else
            "You may not specify both topic name and topic id.")
        return {**result, "error_code": code, "error_message": message}
    if duplicated:
        return {**result, "error_code": ErrorCode.INVALID_REQUEST,
                "error_message": "Duplicate topic name." if name else "Duplicate topic id."}
    if not ctx.broker.config["delete.topic.enable"]:
        return {**result, "error_code": ErrorCode.TOPIC_DELETION_DISABLED,
                "error_message": "Topic deletion is disabled."}
    if ctx.broker.cluster is not None:
        return await _delete_in_cluster(ctx, name, topic_id, result)
    topic = topics.get(name) if name is not None else topics.by_id(topic_id)
    if topic is None or topic.name in deleting:  # (named by name and by id: deleted once)
        if name is None:
            return {**result, "error_code": ErrorCode.UNKNOWN_TOPIC_ID,
                    "error_message": f"Topic id {topic_id} does not exist."}
        return {**result, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "error_message": f"Topic '{name}' does not exist."}
    deleting[topic.name] = None
    return {"name": topic.name, "topic_id": topic.topic_id, **_ok()}


@handler(api_key=20, versions=(0, 6))
async def delete_topics(ctx: RequestContext, request: dict) -> dict:
    targets = _delete_targets(ctx, request)
    seen = Counter(name if name is not None else topic_id for name, topic_id in targets)
    deleting: dict[str, None] = {}  # names, in request order
    responses = [await _delete_one(ctx, name, topic_id,
                                   seen[name if name is not None else topic_id] > 1, deleting)
                 for name, topic_id in targets]
    if deleting:
        await ctx.broker.topics.delete_async(list(deleting))
    return {"throttle_time_ms": 0, "responses": responses}


# CreatePartitions --------------------------------------------------------------------------


def check_new_partitions(ctx: RequestContext, name: str, count: int,
                         assignments: list[dict] | None) -> None:
    """Raise the KafkaError Kafka would answer for growing ``name`` to ``count``."""
    topic = ctx.broker.topics.get(name)
    if topic is None:
        raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
    current = ctx.broker.topics.partition_count(topic)
    if count < current:
        raise InvalidPartitionsError(f"The topic {name} currently has {current} partition(s); "
                                     f"{count} would not be an increase.")
    if count == current:
        raise InvalidPartitionsError(f"Topic already has {current} partition(s).")
    if assignments is not None:
        _check_assignments(ctx.broker.broker_id, count - current, assignments)
    check_partition_limit(count)


def _check_assignments(broker_id: int, added: int, assignments: list[dict]) -> None:
    if len(assignments) != added:
        raise KafkaError(f"Attempted to add {added} additional partition(s), but only "
                         f"{len(assignments)} assignment(s) were specified.",
                         ErrorCode.INVALID_REPLICA_ASSIGNMENT)
    for assignment in assignments:
        replicas = assignment.get("broker_ids") or []
        for replica in replicas:
            if replica != broker_id:
                raise KafkaError(f"The manual partition assignment includes broker {replica}, "
                                 "but no such broker is registered.",
                                 ErrorCode.INVALID_REPLICA_ASSIGNMENT)
        if len(replicas) != 1:
            raise KafkaError(f"The manual partition assignment includes a partition with "
                             f"{len(replicas)} replica(s), but this is not consistent with "
                             "previous partitions, which have 1 replica(s).",
                             ErrorCode.INVALID_REPLICA_ASSIGNMENT)


async def _create_partitions_one(ctx: RequestContext, item: dict, duplicated: bool,
                                 validate_only: bool) -> dict[str, Any]:
    name = item["name"]
    if duplicated:
        return {"name": name, "error_code": ErrorCode.INVALID_REQUEST,
                "error_message": "Duplicate topic name."}
    try:
        if ctx.broker.cluster is not None:
            from pybroker.cluster import admin

            if not validate_only:
                await admin.add_partitions(ctx.broker, name, item["count"])
            return {"name": name, **_ok()}
        check_new_partitions(ctx, name, item["count"], item["assignments"])
        if not validate_only:
            await ctx.broker.topics.add_partitions_async(name, item["count"])
    except KafkaError as exc:
        return {"name": name, **error_fields(exc)}
    return {"name": name, **_ok()}


@handler(api_key=37, versions=(0, 3))
async def create_partitions(ctx: RequestContext, request: dict) -> dict:
    items = request.get("topics") or []
    seen = Counter(item.get("name") for item in items)
    validate_only = bool(request.get("validate_only"))
    results = [await _create_partitions_one(ctx, item, seen[item.get("name")] > 1,
                                            validate_only) for item in items]
    return {"throttle_time_ms": 0, "results": results}

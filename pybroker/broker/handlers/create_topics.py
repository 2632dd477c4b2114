"""CreateTopics (key 19): partitions, replication factor, validated configs, validate_only.

Cluster mode: the topic is written to ZooKeeper with its replicas placed round-robin over
the live brokers (or as the request assigns them), and answered once this broker's
metadata shows its leaders (``pybroker.cluster.admin``). Single node, below:

Per topic, as Kafka answers: an illegal name INVALID_TOPIC_EXCEPTION, an existing one
TOPIC_ALREADY_EXISTS, a name twice in one request INVALID_REQUEST, partitions <= 0
INVALID_PARTITIONS (so are more than ``MAX_PARTITIONS_PER_TOPIC``, 10,000), a replication
factor other than 1 (this is one node)
INVALID_REPLICATION_FACTOR, manual assignments naming other brokers
INVALID_REPLICA_ASSIGNMENT, a bad config INVALID_CONFIG. -1 partitions or replication
factor (v4+) take the broker defaults. v5+ answers the effective configs. The request's
topics are recorded together (one write of ``topics.json``) and their logs created a slice
at a time (``TopicManager.create_all_async``), so other clients are served while many
topics, or a large one, are created.
"""

from __future__ import annotations

import collections
from typing import Any

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.broker.topic_manager import NewTopic
from pybroker.errors import ErrorCode, InvalidRequestError, KafkaError
from pybroker.net.protocol.codec import ZERO_UUID
from pybroker.net.protocol.typed import (
    CreateTopicsRequest,
    CreateTopicsRequestCreatableTopic,
    CreateTopicsResponse,
    CreateTopicsResponseCreatableTopicResult,
)


def _bad_assignment(message: str) -> KafkaError:
    return KafkaError(message, ErrorCode.INVALID_REPLICA_ASSIGNMENT)


def _from_assignments(item: CreateTopicsRequestCreatableTopic, broker_id: int) -> tuple[int, int]:
    """(partitions, replication factor) of a manual assignment, checked against this node."""
    if item["num_partitions"] != -1 or item["replication_factor"] != -1:
        raise InvalidRequestError("Both numPartitions or replicationFactor and "
                                  "replicasAssignments were set. Both cannot be used at the "
                                  "same time.")
    indexes = sorted(a["partition_index"] for a in item["assignments"])
    if indexes != list(range(len(indexes))):
        raise _bad_assignment("Partitions should be a consecutive 0-based "
                              "integer sequence")
    for a in item["assignments"]:
        if a["broker_ids"] != [broker_id]:
            raise _bad_assignment(
                f"Unknown broker(s) or replication factor other than 1 in assignment "
                f"{a['broker_ids']} of partition {a['partition_index']}")
    return len(indexes), 1


async def _create_in_cluster(ctx: RequestContext, item: CreateTopicsRequestCreatableTopic,
                             partitions: int, replication: int, configs: dict[str, str | None],
                             validate_only: bool) -> tuple[Any, int, int, dict[str, str]]:
    from pybroker.cluster import admin

    assignment = None
    if item.get("assignments"):
        if partitions != -1 or replication != -1:
            raise InvalidRequestError("Both numPartitions or replicationFactor and "
                                      "replicasAssignments were set. Both cannot be used at "
                                      "the same time.")
        assignment = {a["partition_index"]: list(a["broker_ids"]) for a in item["assignments"]}
        if sorted(assignment) != list(range(len(assignment))) or len(
                {len(r) for r in assignment.values()}) != 1:
            raise _bad_assignment("Partitions should be a consecutive 0-based integer "
                                  "sequence with the same replication factor")
        live = set(ctx.broker.metadata.brokers)
        for index, replicas in assignment.items():
            if not set(replicas) <= live or len(set(replicas)) != len(replicas):
                raise _bad_assignment(f"Unknown or repeated broker(s) in assignment "
                                      f"{replicas} of partition {index}")
    if validate_only:
        if assignment is not None:
            partitions, replication = len(assignment), len(assignment[0])
        partitions, replication, overrides = await admin.check_new_topic(
            ctx.broker, item["name"], partitions, replication, configs)
        return ZERO_UUID, partitions, replication, overrides
    return await admin.create_topic(ctx.broker, item["name"], partitions, replication, configs,
                                    assignment)


def _new_topic(ctx: RequestContext, item: CreateTopicsRequestCreatableTopic) -> NewTopic:
    """(name, partitions, replication factor, configs) asked for by ``item``."""
    partitions, replication = item["num_partitions"], item["replication_factor"]
    if item.get("assignments") and ctx.broker.cluster is None:
        partitions, replication = _from_assignments(item, ctx.broker.broker_id)
    configs = {c["name"]: c["value"] for c in item.get("configs") or ()}
    return item["name"], partitions, replication, configs


def _answer(ctx: RequestContext, name: str, topic_id: Any, partitions: int, replication: int,
            overrides: dict[str, str]) -> CreateTopicsResponseCreatableTopicResult:
    return {
        "name": name, "topic_id": topic_id, "error_code": ErrorCode.NONE,
        "error_message": None, "num_partitions": partitions, "replication_factor": replication,
        "configs": [{"name": key, "value": value, "read_only": False, "config_source": source,
                     "is_sensitive": False}
                    for key, value, source in ctx.broker.topics.describe_config(overrides)],
    }


def _failed(name: str, exc: KafkaError) -> CreateTopicsResponseCreatableTopicResult:
    return {"name": name, "topic_id": ZERO_UUID, "error_code": exc.code,
            "error_message": str(exc), "num_partitions": -1, "replication_factor": -1,
            "configs": []}


async def _create_one(ctx: RequestContext, item: CreateTopicsRequestCreatableTopic,
                      validate_only: bool) -> CreateTopicsResponseCreatableTopicResult:
    """A topic checked only (``validate_only``) or created in the cluster."""
    name, partitions, replication, configs = _new_topic(ctx, item)
    if ctx.broker.cluster is not None:
        topic_id, partitions, replication, overrides = await _create_in_cluster(
            ctx, item, partitions, replication, configs, validate_only)
    else:
        partitions, _, overrides = ctx.broker.topics.check_new(name, partitions, replication,
                                                               configs)
        topic_id = ZERO_UUID
    return _answer(ctx, name, topic_id, partitions, replication, overrides)


@handler(api_key=19, versions=(0, 7))
async def create_topics(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    items = request["topics"] or []
    validate_only = request.get("validate_only", False)
    topics = ctx.broker.topics
    counts = collections.Counter(item["name"] for item in items)
    results: list[CreateTopicsResponseCreatableTopicResult] = []
    creating: list[tuple[int, NewTopic]] = []  # (slot in results, topic): created together
    for item in items:
        try:
            if counts[item["name"]] > 1:
                raise InvalidRequestError(f"Create topics request from client "
                                          f"`{ctx.client_id}` contains multiple entries for "
                                          f"the following topics: {item['name']}")
            if ctx.broker.cluster is None and not validate_only:
                creating.append((len(results), _new_topic(ctx, item)))
                results.append({})
            else:
                results.append(await _create_one(ctx, item, validate_only))
        except KafkaError as exc:
            results.append(_failed(item["name"], exc))
    if creating:
        created = await topics.create_all_async([new for _, new in creating])
        for (slot, (name, *_)), topic in zip(creating, created, strict=True):
            results[slot] = _failed(name, topic) if isinstance(topic, KafkaError) else _answer(
                ctx, name, topic.topic_id, topics.partition_count(topic), 1, topic.overrides)
    return {"throttle_time_ms": 0, "topics": results}

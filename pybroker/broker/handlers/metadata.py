"""Metadata (key 3): brokers, cluster id, and topics with their partitions and ids.

This broker leads every partition with an ISR of itself. A requested topic that does not
exist is created with the defaults when both ``auto.create.topics.enable`` and the
request's ``allow_auto_topic_creation`` allow it (answered at once with the new topic,
where Kafka would say LEADER_NOT_AVAILABLE until a leader is elected: there is nothing to
elect here), else UNKNOWN_TOPIC_OR_PARTITION; an illegal name gets INVALID_TOPIC_EXCEPTION.
Topics asked for by id (v10+) that do not exist get UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

import uuid
from typing import Any

from pybroker.broker.handlers import handler
from pybroker.broker.partition import LEADER_EPOCH
from pybroker.broker.request import RequestContext
from pybroker.broker.topic_manager import Topic, validate_topic_name
from pybroker.errors import ErrorCode, KafkaError
from pybroker.net.protocol.codec import ZERO_UUID


def describe_topic(topic: Topic, broker_id: int) -> dict[str, Any]:
    replicas = [broker_id]
    return {
        "error_code": ErrorCode.NONE, "name": topic.name, "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": [{"error_code": ErrorCode.NONE, "partition_index": p.index,
                        "leader_id": broker_id, "leader_epoch": LEADER_EPOCH,
                        "replica_nodes": replicas, "isr_nodes": replicas,
                        "offline_replicas": []} for p in topic.partitions],
    }


def _missing(name: str | None, topic_id: uuid.UUID, code: int) -> dict[str, Any]:
    return {"error_code": code, "name": name, "topic_id": topic_id, "partitions": []}


def _lookup(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None,
            allow_create: bool) -> dict[str, Any]:
    topics = ctx.broker.topics
    if name is None:  # by id (v10+); the response's name is nullable from v12 only
        topic = topics.by_id(topic_id) if topic_id and topic_id != ZERO_UUID else None
        if topic is None:
            return _missing(None if ctx.api_version >= 12 else "", topic_id or ZERO_UUID,
                            ErrorCode.UNKNOWN_TOPIC_ID)
        return describe_topic(topic, ctx.broker.broker_id)
    topic = topics.get(name)
    if topic is None:
        try:
            validate_topic_name(name)
            topic = topics.auto_create(name) if allow_create else None
        except KafkaError as exc:
            return _missing(name, ZERO_UUID, exc.code)
        if topic is None:
            return _missing(name, ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    return describe_topic(topic, ctx.broker.broker_id)


@handler(api_key=3, versions=(0, 12))
async def metadata(ctx: RequestContext, request: dict) -> dict:
    broker = ctx.broker
    host, port = broker.advertised
    requested = request.get("topics")
    if requested is None or (ctx.api_version == 0 and not requested):
        topics = [describe_topic(t, broker.broker_id) for t in broker.topics.topics()]
    else:
        allow = request.get("allow_auto_topic_creation", True)
        topics = [_lookup(ctx, t.get("name"), t.get("topic_id"), allow) for t in requested]
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": broker.broker_id, "host": host, "port": port, "rack": None}],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.broker_id,
        "topics": topics,
    }

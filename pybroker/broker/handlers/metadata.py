"""Metadata (key 3): brokers, cluster id, and topics with their partitions and ids.

The answer is the control plane's (``ctx.broker.metadata``, :mod:`pybroker.metadata`):
its live brokers at their addresses on the listener the client connected on (this
broker alone while it knows of none yet, so clients ask again),
its controller, and its description of every topic, or of the topics named (by name, or
by id from v10), unknown ones created with the defaults when both
``auto.create.topics.enable`` and the request's ``allow_auto_topic_creation`` allow it.
What each control plane answers, partition errors included, is in its module docstring.

ACLs, as Kafka: a request for every topic lists those the client may DESCRIBE; a topic
named that it may not is answered TOPIC_AUTHORIZATION_FAILED, and so is an unknown one it
may not create (CREATE on the cluster or on the topic) where it would be auto-created.
"""

from __future__ import annotations

from pybroker.broker.authorized_operations import authorized_operations
from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode
from pybroker.metadata import RequestedTopic, TopicAnswer, missing_topic
from pybroker.net.protocol.codec import ZERO_UUID
from pybroker.net.protocol.typed import (
    MetadataRequest,
    MetadataResponse,
)
from pybroker.security.acl import CLUSTER_NAME, AclOperation, ResourceType


@handler(api_key=3, versions=(0, 12))
async def metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    broker = ctx.broker
    plane = broker.metadata
    requested = request.get("topics")
    if requested is None or (ctx.api_version == 0 and not requested):
        topics = plane.describe_all_topics()
        if broker.authorizer is not None:
            visible = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC,
                                     [t["name"] or "" for t in topics])
            topics = [t for t in topics if t["name"] in visible]
    else:
        topics = await _describe(ctx, requested, request.get("allow_auto_topic_creation", True))
    include_topic_operations = request.get("include_topic_authorized_operations", False)
    for topic in topics:
        topic["topic_authorized_operations"] = authorized_operations(
            ctx, ResourceType.TOPIC, topic["name"] or "",
            include_topic_operations and topic["error_code"] == ErrorCode.NONE)
    brokers = ctx.live_endpoints()
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": b.broker_id, "host": b.host, "port": b.port,
                     "rack": plane.rack(b.broker_id)} for b in brokers],
        "cluster_id": broker.cluster_id,
        "controller_id": plane.controller_id,
        "topics": topics,
        "cluster_authorized_operations": authorized_operations(
            ctx, ResourceType.CLUSTER, CLUSTER_NAME,
            request.get("include_cluster_authorized_operations", False)),
    }


async def _describe(ctx: RequestContext, requested: list[RequestedTopic],
                    allow_auto_create: bool) -> list[TopicAnswer]:
    plane = ctx.broker.metadata
    if ctx.broker.authorizer is None:
        return await plane.describe_topics(requested, allow_auto_create, ctx.api_version)
    may_create_any = ctx.authorize(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
    creatable, others = [], []
    refused: list[TopicAnswer] = []
    for topic in requested:
        name = topic.get("name")
        if name is not None and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC,
                                                  name):
            refused.append(missing_topic(name, ZERO_UUID, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        elif allow_auto_create and name is not None and (may_create_any or ctx.authorize(
                AclOperation.CREATE, ResourceType.TOPIC, name)):
            creatable.append(topic)
        else:
            others.append(topic)
    answers = await plane.describe_topics(creatable, True, ctx.api_version) \
        if creatable else []
    for answer in await plane.describe_topics(others, False, ctx.api_version):
        if (allow_auto_create and answer["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                and ctx.broker.config["auto.create.topics.enable"]):
            answer = missing_topic(answer["name"], answer["topic_id"],
                                   ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        answers.append(answer)
    # (those named by id are known by name only now)
    return [answer if answer["name"] is None or ctx.authorize(
                AclOperation.DESCRIBE, ResourceType.TOPIC, answer["name"])
            else missing_topic(answer["name"], ZERO_UUID, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            for answer in answers] + refused

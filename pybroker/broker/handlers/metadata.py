"""Metadata (key 3): brokers, cluster id, and topics with their partitions and ids.

The answer is the control plane's (``ctx.broker.metadata``, :mod:`pybroker.metadata`):
its live brokers (this broker alone while it knows of none yet, so clients ask again),
its controller, and its description of every topic, or of the topics named (by name, or
by id from v10), unknown ones created with the defaults when both
``auto.create.topics.enable`` and the request's ``allow_auto_topic_creation`` allow it.
What each control plane answers, partition errors included, is in its module docstring.
"""

from __future__ import annotations

from pybroker.broker.authorized_operations import ResourceType, authorized_operations
from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.metadata import Endpoint
from pybroker.net.protocol.typed import (
    MetadataRequest,
    MetadataResponse,
)


@handler(api_key=3, versions=(0, 12))
async def metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    broker = ctx.broker
    plane = broker.metadata
    requested = request.get("topics")
    if requested is None or (ctx.api_version == 0 and not requested):
        topics = plane.describe_all_topics()
    else:
        topics = await plane.describe_topics(
            requested, request.get("allow_auto_topic_creation", True), ctx.api_version)
    topic_operations = authorized_operations(
        ResourceType.TOPIC, request.get("include_topic_authorized_operations", False))
    for topic in topics:
        topic["topic_authorized_operations"] = topic_operations
    brokers = plane.live_brokers() or [Endpoint(broker.broker_id, *broker.advertised)]
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": None}
                    for b in brokers],
        "cluster_id": broker.cluster_id,
        "controller_id": plane.controller_id,
        "topics": topics,
        "cluster_authorized_operations": authorized_operations(
            ResourceType.CLUSTER, request.get("include_cluster_authorized_operations", False)),
    }

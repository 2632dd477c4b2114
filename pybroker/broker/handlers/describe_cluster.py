"""DescribeCluster (key 60): the live brokers (their addresses on the listener the client
connected on) and the controller (on one node: this broker)."""

from __future__ import annotations

from pybroker.broker.authorized_operations import authorized_operations
from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode
from pybroker.net.protocol.typed import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeClusterResponseBroker,
)
from pybroker.security.acl import CLUSTER_NAME, AclOperation, ResourceType

UNSUPPORTED_ENDPOINT_TYPE = 115
ENDPOINT_BROKERS = 1


@handler(api_key=60, versions=(0, 1))
async def describe_cluster(ctx: RequestContext,
                           request: DescribeClusterRequest) -> DescribeClusterResponse:
    ctx.require(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    broker = ctx.broker
    if request.get("endpoint_type", ENDPOINT_BROKERS) != ENDPOINT_BROKERS:
        return {"throttle_time_ms": 0, "error_code": UNSUPPORTED_ENDPOINT_TYPE,
                "error_message": "only broker endpoints are served", "cluster_id": "",
                "brokers": []}
    brokers: list[DescribeClusterResponseBroker] = [
        {"broker_id": b.broker_id, "host": b.host, "port": b.port,
         "rack": broker.metadata.rack(b.broker_id)}
        for b in ctx.live_endpoints()]
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "cluster_id": broker.cluster_id,
        "controller_id": broker.metadata.controller_id,
        "brokers": brokers,
        "cluster_authorized_operations": authorized_operations(
            ctx, ResourceType.CLUSTER, CLUSTER_NAME,
            request["include_cluster_authorized_operations"]),
    }

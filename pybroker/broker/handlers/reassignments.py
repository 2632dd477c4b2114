"""AlterPartitionReassignments (key 45) and ListPartitionReassignments (key 46), KIP-455.

Both need the CLUSTER resource (ALTER, DESCRIBE), as Kafka's, and go to the one metadata
interface: any broker answers them (in Kafka's ZooKeeper mode only the controller did,
and clients went there; here any broker writes the request where the controller acts on
it). Each partition of an Alter is answered on its own: accepted (the move is under way)
or Kafka's refusal; a List names the partitions moving now, the others left out.
"""

from __future__ import annotations

from collections import defaultdict

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode, KafkaError, NoReassignmentInProgressError
from pybroker.metadata.interface import ReassignmentTarget
from pybroker.net.protocol.typed import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterPartitionReassignmentsResponseReassignablePartitionResponse,
    AlterPartitionReassignmentsResponseReassignableTopicResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    ListPartitionReassignmentsResponseOngoingPartitionReassignment,
    ListPartitionReassignmentsResponseOngoingTopicReassignment,
)
from pybroker.security.acl import CLUSTER_NAME, AclOperation, ResourceType


def _message(error: KafkaError | None) -> str | None:
    # Kafka says nothing more than the code of a cancellation with nothing to cancel
    if error is None or isinstance(error, NoReassignmentInProgressError):
        return None
    return str(error)


@handler(api_key=45, versions=(0, 0))
async def alter_partition_reassignments(
        ctx: RequestContext,
        request: AlterPartitionReassignmentsRequest) -> AlterPartitionReassignmentsResponse:
    ctx.require(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    targets: list[ReassignmentTarget] = [
        (topic["name"], partition["partition_index"], partition.get("replicas"))
        for topic in request["topics"] for partition in topic["partitions"]]
    errors = iter(await ctx.broker.metadata.alter_partition_reassignments(targets))
    responses: list[AlterPartitionReassignmentsResponseReassignableTopicResponse] = []
    for topic in request["topics"]:
        partitions: list[AlterPartitionReassignmentsResponseReassignablePartitionResponse] = []
        for partition in topic["partitions"]:
            error = next(errors)
            partitions.append({
                "partition_index": partition["partition_index"],
                "error_code": ErrorCode.NONE if error is None else int(error.code),
                "error_message": _message(error)})
        responses.append({"name": topic["name"], "partitions": partitions})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "responses": responses}


@handler(api_key=46, versions=(0, 0))
async def list_partition_reassignments(
        ctx: RequestContext,
        request: ListPartitionReassignmentsRequest) -> ListPartitionReassignmentsResponse:
    ctx.require(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    wanted = request.get("topics")
    partitions = None if wanted is None else [
        (topic["name"], index) for topic in wanted for index in topic["partition_indexes"]]
    by_topic: dict[str, list[ListPartitionReassignmentsResponseOngoingPartitionReassignment]] \
        = defaultdict(list)
    for moving in await ctx.broker.metadata.list_partition_reassignments(partitions):
        by_topic[moving.topic].append({
            "partition_index": moving.partition, "replicas": moving.replicas,
            "adding_replicas": moving.adding, "removing_replicas": moving.removing})
    topics: list[ListPartitionReassignmentsResponseOngoingTopicReassignment] = [
        {"name": name, "partitions": found} for name, found in by_topic.items()]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "topics": topics}

"""Consumer group APIs: the wire side of ``pybroker.coordinator.GroupCoordinator``.

    FindCoordinator (10) v0-6   JoinGroup (11) v0-9     Heartbeat (12) v0-4
    LeaveGroup (13) v0-5        SyncGroup (14) v0-5     DescribeGroups (15) v0-5
    ListGroups (16) v0-5        OffsetCommit (8) v0-9   OffsetFetch (9) v0-9
    DeleteGroups (42) v0-2      OffsetDelete (47) v0    TxnOffsetCommit (28) v0-4

Each handler maps the decoded request dict onto one coordinator call and its result onto
the response dict of the same version; the group semantics live in the coordinator
(``ctx.broker.group_coordinator``, built and started by the broker, wired to partition
leadership by the control plane). FindCoordinator asks the control plane
(``metadata.coordinator_for_group``, ``coordinator_for_transaction`` for key type 1): a
single node coordinates every group and transactional id; in a cluster a group's
coordinator is the leader of its ``__consumer_offsets`` partition, a transactional id's
the leader of its ``__transaction_state`` partition, each topic created on first use,
COORDINATOR_NOT_AVAILABLE until that partition has a leader.

Long polls parked in the coordinator are answered as soon as the broker starts shutting
down (before the drain of in-flight requests), and joins or syncs handled after that are
answered at once, so none holds the drain up.
"""

from __future__ import annotations

from typing import Any

from pybroker.broker.authorized_operations import NOT_REQUESTED, authorized_operations
from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.coordinator import OffsetCommit
from pybroker.errors import ErrorCode
from pybroker.net.protocol.typed import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
    SyncGroupRequest,
    SyncGroupResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
)
from pybroker.security.acl import CLUSTER_NAME, AclOperation, ResourceType

_GROUP_KEY = 0


def _refused_topics(ctx: RequestContext, group_error: int, topics: list[Any],
                    operation: AclOperation = AclOperation.READ
                    ) -> tuple[list[Any], dict[tuple[str, int], ErrorCode]]:
    """The topics of an offsets request the client may touch, and the error of each
    partition of the others: ``group_error`` for all when the group refused, else
    TOPIC_AUTHORIZATION_FAILED where ``operation`` on the topic is refused."""
    if group_error:
        allowed: set[str] = set()
    else:
        allowed = ctx.authorized(operation, ResourceType.TOPIC, {t["name"] for t in topics})
    code = ErrorCode(group_error or ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    return ([t for t in topics if t["name"] in allowed],
            {(t["name"], p["partition_index"]): code
             for t in topics if t["name"] not in allowed for p in t["partitions"]})


def _group_error(ctx: RequestContext, operation: AclOperation, group_id: str) -> ErrorCode:
    return ErrorCode.NONE if ctx.authorize(operation, ResourceType.GROUP, group_id) \
        else ErrorCode.GROUP_AUTHORIZATION_FAILED


def _client_host(ctx: RequestContext) -> str:
    host = ctx.peer.rsplit(":", 1)[0] if ":" in ctx.peer else ctx.peer
    return "/" + host  # Kafka shows the InetAddress form, "/127.0.0.1"


# FindCoordinator ----------------------------------------------------------------------

@handler(api_key=10, versions=(0, 6))
async def find_coordinator(ctx: RequestContext, request: FindCoordinatorRequest) -> dict:
    group = request.get("key_type", _GROUP_KEY) == _GROUP_KEY
    if ctx.api_version >= 4:
        return {"throttle_time_ms": 0, "coordinators": [
            {"key": key, **await _coordinator_node(ctx, key, group)}
            for key in request["coordinator_keys"]]}
    return {"throttle_time_ms": 0, **await _coordinator_node(ctx, request["key"], group)}


async def _coordinator_node(ctx: RequestContext, key: str, group: bool) -> dict:
    """The broker coordinating group or transactional id ``key`` (the control plane's
    answer)."""
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP if group
                         else ResourceType.TRANSACTIONAL_ID, key):
        return {"node_id": -1, "host": "", "port": -1, "error_message": None,
                "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED if group
                else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    metadata = ctx.broker.metadata
    coordinator = await metadata.coordinator_for_group(key) if group \
        else await metadata.coordinator_for_transaction(key)
    if coordinator is not None:
        coordinator = ctx.endpoint(coordinator.broker_id)  # on the client's listener
    if coordinator is None:
        return {"node_id": -1, "host": "", "port": -1,
                "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "error_message": None}
    node_id, host, port = coordinator
    return {"node_id": node_id, "host": host, "port": port, "error_code": ErrorCode.NONE,
            "error_message": None}


# membership ---------------------------------------------------------------------------

@handler(api_key=11, versions=(0, 9))
async def join_group(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    ctx.require(AclOperation.READ, ResourceType.GROUP, request["group_id"])
    coordinator = ctx.broker.group_coordinator
    result = await ctx.park(coordinator.join_group(
        request["group_id"], request["member_id"], request.get("group_instance_id"),
        ctx.client_id or "", _client_host(ctx), request["session_timeout_ms"],
        request.get("rebalance_timeout_ms", -1), request["protocol_type"],
        [(p["name"], p["metadata"]) for p in request["protocols"]],
        require_known_member_id=ctx.api_version >= 4))
    protocol_name = result.protocol_name
    if protocol_name is None and ctx.api_version < 7:
        protocol_name = ""  # not nullable before v7
    return {"throttle_time_ms": 0, "error_code": result.error,
            "generation_id": result.generation, "protocol_type": result.protocol_type,
            "protocol_name": protocol_name, "leader": result.leader_id,
            "skip_assignment": result.skip_assignment, "member_id": result.member_id,
            "members": [{"member_id": m, "group_instance_id": i, "metadata": md}
                        for m, i, md in result.members]}


@handler(api_key=14, versions=(0, 5))
async def sync_group(ctx: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse:
    ctx.require(AclOperation.READ, ResourceType.GROUP, request["group_id"])
    coordinator = ctx.broker.group_coordinator
    result = await ctx.park(coordinator.sync_group(
        request["group_id"], request["generation_id"], request["member_id"],
        request.get("group_instance_id"), request.get("protocol_type"),
        request.get("protocol_name"),
        {a["member_id"]: a["assignment"] for a in request["assignments"] or []}))
    return {"throttle_time_ms": 0, "error_code": result.error,
            "protocol_type": result.protocol_type, "protocol_name": result.protocol_name,
            "assignment": result.assignment}


@handler(api_key=12, versions=(0, 4))
async def heartbeat(ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    ctx.require(AclOperation.READ, ResourceType.GROUP, request["group_id"])
    coordinator = ctx.broker.group_coordinator
    error = coordinator.heartbeat(request["group_id"], request["member_id"],
                                  request.get("group_instance_id"), request["generation_id"])
    return {"throttle_time_ms": 0, "error_code": error}


@handler(api_key=13, versions=(0, 5))
async def leave_group(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    ctx.require(AclOperation.READ, ResourceType.GROUP, request["group_id"])
    coordinator = ctx.broker.group_coordinator
    leaving: list[tuple[str, str | None]]
    if ctx.api_version < 3:
        leaving = [(request["member_id"], None)]
    else:
        leaving = [(m["member_id"], m.get("group_instance_id")) for m in request["members"]]
    error, members = coordinator.leave_group(request["group_id"], leaving)
    if ctx.api_version < 3 and not error and members:
        error = members[0][2]  # one member: its error is the request's
    return {"throttle_time_ms": 0, "error_code": error,
            "members": [{"member_id": m, "group_instance_id": i, "error_code": e}
                        for m, i, e in members]}


# offsets ------------------------------------------------------------------------------

@handler(api_key=8, versions=(0, 9))
async def offset_commit(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    coordinator = ctx.broker.group_coordinator
    topics = request["topics"] or []
    allowed, results = _refused_topics(
        ctx, _group_error(ctx, AclOperation.READ, request["group_id"]), topics)
    commits = [OffsetCommit(t["name"], p["partition_index"], p["committed_offset"],
                            p.get("committed_leader_epoch", -1), p.get("committed_metadata"),
                            p.get("commit_timestamp", -1))
               for t in allowed for p in t["partitions"]]
    if commits or not results:
        results.update(await coordinator.commit_offsets_async(
            request["group_id"], request.get("member_id") or "",
            request.get("group_instance_id"), request.get("generation_id_or_member_epoch", -1),
            commits, request.get("retention_time_ms", -1)))
    return {"throttle_time_ms": 0, "topics": _committed_topics(topics, results)}


@handler(api_key=28, versions=(0, 4))
async def txn_offset_commit(ctx: RequestContext,
                            request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    """Offsets committed in a producer's transaction: the group's once the transaction
    commits (the coordinator keeps them pending until the producer's marker)."""
    coordinator = ctx.broker.group_coordinator
    topics = request["topics"]
    refusal = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if not ctx.authorize(
        AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request["transactional_id"]) \
        else _group_error(ctx, AclOperation.READ, request["group_id"])
    allowed, results = _refused_topics(ctx, refusal, topics)
    commits = [OffsetCommit(t["name"], p["partition_index"], p["committed_offset"],
                            p.get("committed_leader_epoch", -1), p["committed_metadata"])
               for t in allowed for p in t["partitions"]]
    if commits or not results:
        results.update(await coordinator.commit_transactional_offsets(
            request["group_id"], request["producer_id"], request["producer_epoch"],
            request.get("member_id", ""), request.get("group_instance_id"),
            request.get("generation_id", -1), commits))
    return {"throttle_time_ms": 0, "topics": _committed_topics(topics, results)}


def _committed_topics(topics: list[OffsetCommitRequestTopic] | list[TxnOffsetCommitRequestTopic],
                      results: dict[tuple[str, int], ErrorCode]) -> list[Any]:
    """A commit's answer (OffsetCommit's, TxnOffsetCommit's: the same shape): each
    partition of the request with its error code."""
    return [{"name": t["name"], "partitions": [
        {"partition_index": p["partition_index"],
         "error_code": results[(t["name"], p["partition_index"])]}
        for p in t["partitions"]]}
        for t in topics]


def _fetched_topics(
        ctx: RequestContext, group_id: str,
        topics: list[OffsetFetchRequestTopic] | list[OffsetFetchRequestTopics] | None,
        require_stable: bool = False,
) -> list[dict]:
    """The committed offsets asked for; with ``require_stable`` (KIP-447) a partition
    whose transactional commit is pending gets UNSTABLE_OFFSET_COMMIT instead. Topics the
    client may not DESCRIBE: TOPIC_AUTHORIZATION_FAILED where named, left out otherwise."""
    coordinator = ctx.broker.group_coordinator
    wanted = None if topics is None else \
        [(t["name"], p) for t in topics for p in t["partition_indexes"]]
    offsets = coordinator.fetch_offsets(group_id, wanted)
    unstable = coordinator.unstable_offsets(group_id, list(offsets)) if require_stable \
        else set()
    visible = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC,
                             {topic for topic, _ in offsets})
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), o in offsets.items():
        if topic not in visible:
            if topics is None:
                continue
            o, error = None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif (topic, partition) in unstable:
            o, error = None, ErrorCode.UNSTABLE_OFFSET_COMMIT
        else:
            error = ErrorCode.NONE
        by_topic.setdefault(topic, []).append({
            "partition_index": partition,
            "committed_offset": o.offset if o else -1,
            "committed_leader_epoch": o.leader_epoch if o else -1,
            "metadata": o.metadata if o else "",
            "error_code": error})
    return [{"name": name, "partitions": parts} for name, parts in by_topic.items()]


@handler(api_key=9, versions=(0, 9))
async def offset_fetch(ctx: RequestContext, request: OffsetFetchRequest) -> dict:
    coordinator = ctx.broker.group_coordinator
    require_stable = request.get("require_stable", False)
    if ctx.api_version >= 8:
        groups = []
        for g in request["groups"]:
            error = _group_error(ctx, AclOperation.READ, g["group_id"]) \
                or coordinator.coordinator_error(g["group_id"])
            groups.append({"group_id": g["group_id"], "error_code": error, "topics":
                           [] if error else _fetched_topics(ctx, g["group_id"],
                                                            g["topics"], require_stable)})
        return {"throttle_time_ms": 0, "groups": groups}
    group_id = request["group_id"]
    error = _group_error(ctx, AclOperation.READ, group_id) \
        or coordinator.coordinator_error(group_id)
    if not error:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
                "topics": _fetched_topics(ctx, group_id, request["topics"],
                                          require_stable)}
    if ctx.api_version >= 2:
        return {"throttle_time_ms": 0, "error_code": error, "topics": []}
    # v0-v1 have no top-level error: each partition asked for carries it
    return {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [
            {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": error}
            for p in t["partition_indexes"]]}
        for t in request["topics"] or []]}


@handler(api_key=47, versions=(0, 0))
async def offset_delete(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    ctx.require(AclOperation.DELETE, ResourceType.GROUP, request["group_id"])
    coordinator = ctx.broker.group_coordinator
    topics = request["topics"] or []
    allowed, refused = _refused_topics(ctx, ErrorCode.NONE, topics)
    error, results = coordinator.delete_offsets(
        request["group_id"],
        [(t["name"], p["partition_index"]) for t in allowed for p in t["partitions"]])
    results.update(refused)
    if error:
        return {"error_code": error, "throttle_time_ms": 0, "topics": []}
    return {"error_code": ErrorCode.NONE, "throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"],
             "error_code": results[(t["name"], p["partition_index"])]}
            for p in t["partitions"]]}
        for t in topics]}


# admin --------------------------------------------------------------------------------

@handler(api_key=15, versions=(0, 5))
async def describe_groups(ctx: RequestContext, request: DescribeGroupsRequest) -> dict:
    coordinator = ctx.broker.group_coordinator
    include_operations = request.get("include_authorized_operations", False)
    groups = []
    for group_id in request["groups"]:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append({"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                           "group_id": group_id, "group_state": "", "protocol_type": "",
                           "protocol_data": "", "authorized_operations": NOT_REQUESTED,
                           "members": []})
            continue
        d = coordinator.describe_group(group_id)
        groups.append({
            "error_code": d.error, "group_id": d.group_id, "group_state": d.state,
            "protocol_type": d.protocol_type, "protocol_data": d.protocol_name,
            "authorized_operations": authorized_operations(
                ctx, ResourceType.GROUP, group_id,
                include_operations and d.error == ErrorCode.NONE),
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "member_metadata": m.metadata, "member_assignment": m.assignment}
                        for m in d.members]})
    return {"throttle_time_ms": 0, "groups": groups}


@handler(api_key=16, versions=(0, 5))
async def list_groups(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    coordinator = ctx.broker.group_coordinator
    listed = coordinator.list_groups(request.get("states_filter"), request.get("types_filter"))
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        visible = ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP,
                                 [g for g, _, _ in listed])
        listed = [entry for entry in listed if entry[0] in visible]
    error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if coordinator.loading() else ErrorCode.NONE
    return {"throttle_time_ms": 0, "error_code": error, "groups": [
        {"group_id": g, "protocol_type": t, "group_state": s, "group_type": "classic"}
        for g, t, s in listed]}


@handler(api_key=42, versions=(0, 2))
async def delete_groups(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    coordinator = ctx.broker.group_coordinator
    names = list(request["groups_names"])
    allowed = ctx.authorized(AclOperation.DELETE, ResourceType.GROUP, names)
    results = coordinator.delete_groups([g for g in names if g in allowed])
    return {"throttle_time_ms": 0, "results": [
        {"group_id": g, "error_code": results[g] if g in allowed
         else ErrorCode.GROUP_AUTHORIZATION_FAILED} for g in dict.fromkeys(names)]}

"""Consumer group APIs: the wire side of ``pybroker.coordinator.GroupCoordinator``.

    FindCoordinator (10) v0-6   JoinGroup (11) v0-9     Heartbeat (12) v0-4
    LeaveGroup (13) v0-5        SyncGroup (14) v0-5     DescribeGroups (15) v0-5
    ListGroups (16) v0-5        OffsetCommit (8) v0-9   OffsetFetch (9) v0-9
    DeleteGroups (42) v0-2      OffsetDelete (47) v0

Each handler maps the decoded request dict onto one coordinator call and its result onto
the response dict of the same version; the group semantics live in the coordinator. A
single node coordinates every group (and every transactional id), so FindCoordinator
always names this broker.

Cluster mode (``broker.cluster_mode``): a group's coordinator is the leader of its
``__consumer_offsets`` partition, which FindCoordinator names from the metadata (any
broker answers it). The first FindCoordinator of a group creates the topic, as Kafka
does: ``offsets.topic.num.partitions`` partitions, replication factor
min(``offsets.topic.replication.factor``, live brokers), compacted; until the group's
partition has a leader the answer is COORDINATOR_NOT_AVAILABLE. The coordinator follows
the leadership of those partitions through ``broker.on_leadership_change``. Transactional
ids still name the broker asked (pybroker has no transaction coordinator).

The coordinator is created and loaded by :func:`start_coordinator`, a broker start hook
(``on_start``), before the listener opens; :func:`stop_coordinator` runs at shutdown. Long
polls parked in the coordinator are answered as soon as the broker starts shutting down
(``Broker.on_shutdown_begin``, before the drain of in-flight requests), and joins or syncs
handled after that are answered at once, so none holds the drain up.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pybroker.broker.handlers import handler, on_start, on_stop
from pybroker.broker.request import RequestContext
from pybroker.coordinator import CoordinatorConfig, GroupCoordinator, OffsetCommit
from pybroker.coordinator.offset_store import OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIG
from pybroker.errors import ErrorCode, TopicAlreadyExistsError
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
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
    SyncGroupRequest,
    SyncGroupResponse,
)

log = logging.getLogger("pybroker.coordinator")

_ATTR = "group_coordinator"
_CREATING_ATTR = "_offsets_topic_creation"  # the task creating __consumer_offsets
# How long a FindCoordinator waits for the offsets topic it asked for; after that it answers
# COORDINATOR_NOT_AVAILABLE (the client asks again) while the creation goes on.
_CREATE_WAIT_S = 5.0
_GROUP_KEY = 0
# DescribeGroups authorized_operations without ACLs: READ(3), DELETE(6), DESCRIBE(8)
_GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
_NOT_REQUESTED = -(1 << 31)


@on_start
async def start_coordinator(broker: Any) -> GroupCoordinator:
    """Create the broker's coordinator, load ``__consumer_offsets`` (in cluster mode each
    partition loads when this broker becomes its leader), start its timers. Call after
    the topics are loaded; idempotent."""
    existing = getattr(broker, _ATTR, None)
    if existing is not None:
        return existing

    cluster = broker.cluster_mode

    def partition_exists(topic: str, index: int) -> bool:
        known = broker.metadata.topic(topic) if cluster else broker.topics.get(topic)
        return known is not None and 0 <= index < len(known.partitions)

    coordinator = GroupCoordinator(broker.topics, CoordinatorConfig.from_config(broker.config),
                                   partition_exists=partition_exists, replicated=cluster,
                                   partition_count=(lambda: _offsets_partitions(broker))
                                   if cluster else None)
    setattr(broker, _ATTR, coordinator)
    await coordinator.start()
    broker.on_shutdown_begin(_release_long_polls)
    if cluster:
        broker.on_leadership_change(coordinator.leadership_changed)
        # partitions led before the listener was in (none when started as a start hook:
        # the broker joins the cluster after its hooks)
        offsets = broker.topics.get(OFFSETS_TOPIC)
        for partition in offsets.partitions if offsets is not None else ():
            if partition.log is not None and partition.is_leader:
                coordinator.leadership_changed(partition, True)
    return coordinator


def _offsets_partitions(broker: Any) -> int | None:
    """The offsets topic's partition count as the cluster knows it (cluster mode)."""
    known = broker.metadata.topic(OFFSETS_TOPIC)
    return len(known.partitions) if known is not None and known.partitions else None


async def _release_long_polls(broker: Any) -> None:
    coordinator = getattr(broker, _ATTR, None)
    if coordinator is not None:
        coordinator.begin_shutdown()


@on_stop
async def stop_coordinator(broker: Any) -> None:
    """Answer parked joins and syncs (clients retry elsewhere) and stop the timers."""
    coordinator = getattr(broker, _ATTR, None)
    if coordinator is not None:
        await coordinator.stop()


async def _coordinator(ctx: RequestContext) -> GroupCoordinator:
    coordinator = getattr(ctx.broker, _ATTR, None)
    return coordinator if coordinator is not None else await start_coordinator(ctx.broker)


def _client_host(ctx: RequestContext) -> str:
    host = ctx.peer.rsplit(":", 1)[0] if ":" in ctx.peer else ctx.peer
    return "/" + host  # Kafka shows the InetAddress form, "/127.0.0.1"


# FindCoordinator ----------------------------------------------------------------------

@handler(api_key=10, versions=(0, 6))
async def find_coordinator(ctx: RequestContext, request: FindCoordinatorRequest) -> dict:
    host, port = ctx.broker.advertised
    node = {"node_id": ctx.broker.broker_id, "host": host, "port": port,
            "error_code": ErrorCode.NONE, "error_message": None}
    key_type = request.get("key_type", _GROUP_KEY)
    cluster = ctx.broker.cluster_mode and key_type == _GROUP_KEY
    if ctx.api_version >= 4:
        return {"throttle_time_ms": 0, "coordinators": [
            {"key": key, **(await _group_coordinator_node(ctx, key) if cluster else node)}
            for key in request["coordinator_keys"]]}
    if cluster:
        node = await _group_coordinator_node(ctx, request["key"])
    return {"throttle_time_ms": 0, **node}


async def _group_coordinator_node(ctx: RequestContext, group_id: str) -> dict:
    """Cluster mode: the leader of the group's offsets partition, creating the topic on
    first use."""
    broker = ctx.broker
    if _offsets_partitions(broker) is None:
        await _create_offsets_topic(broker)
    leader = None
    if _offsets_partitions(broker) is not None:
        coordinator = await _coordinator(ctx)
        leader = broker.metadata.leader_of(OFFSETS_TOPIC, coordinator.partition_for(group_id))
    if leader is None:
        return {"node_id": -1, "host": "", "port": -1,
                "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "error_message": None}
    node_id, host, port = leader
    return {"node_id": node_id, "host": host, "port": port, "error_code": ErrorCode.NONE,
            "error_message": None}


async def _create_offsets_topic(broker: Any) -> None:
    """Create ``__consumer_offsets`` through the controller (one creation at a time per
    broker; concurrent callers share it), waiting at most ``_CREATE_WAIT_S``."""
    task = getattr(broker, _CREATING_ATTR, None)
    if task is None or task.done():
        config = CoordinatorConfig.from_config(broker.config)
        replication = max(1, min(config.offsets_topic_replication_factor,
                                 len(broker.metadata.live_brokers())))
        task = asyncio.get_running_loop().create_task(_create_topic(
            broker, config.offsets_topic_num_partitions, replication))
        setattr(broker, _CREATING_ATTR, task)
    # asyncio.wait: no task needed (a handler's first step runs outside one), the creation
    # is not cancelled at the time limit, and a cancellation of ours is never lost
    await asyncio.wait((task,), timeout=_CREATE_WAIT_S)


async def _create_topic(broker: Any, partitions: int, replication: int) -> None:
    try:
        await broker.create_topic(OFFSETS_TOPIC, partitions, replication,
                                  {k: str(v) for k, v in OFFSETS_TOPIC_CONFIG.items()})
        log.info("created %s: %d partitions, replication factor %d", OFFSETS_TOPIC,
                 partitions, replication)
    except TopicAlreadyExistsError:
        pass  # another broker created it first
    except Exception as exc:  # ZooKeeper away, no controller: the client asks again
        log.warning("creating %s failed: %s", OFFSETS_TOPIC, exc)


# membership ---------------------------------------------------------------------------

@handler(api_key=11, versions=(0, 9))
async def join_group(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    coordinator = await _coordinator(ctx)
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
    coordinator = await _coordinator(ctx)
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
    coordinator = await _coordinator(ctx)
    error = coordinator.heartbeat(request["group_id"], request["member_id"],
                                  request.get("group_instance_id"), request["generation_id"])
    return {"throttle_time_ms": 0, "error_code": error}


@handler(api_key=13, versions=(0, 5))
async def leave_group(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    coordinator = await _coordinator(ctx)
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
    coordinator = await _coordinator(ctx)
    topics = request["topics"] or []
    commits = [OffsetCommit(t["name"], p["partition_index"], p["committed_offset"],
                            p.get("committed_leader_epoch", -1), p.get("committed_metadata"),
                            p.get("commit_timestamp", -1))
               for t in topics for p in t["partitions"]]
    results = await coordinator.commit_offsets_async(
        request["group_id"], request.get("member_id") or "", request.get("group_instance_id"),
        request.get("generation_id_or_member_epoch", -1), commits,
        request.get("retention_time_ms", -1))
    return {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"],
             "error_code": results[(t["name"], p["partition_index"])]}
            for p in t["partitions"]]}
        for t in topics]}


def _fetched_topics(
        coordinator: GroupCoordinator, group_id: str,
        topics: list[OffsetFetchRequestTopic] | list[OffsetFetchRequestTopics] | None,
) -> list[dict]:
    wanted = None if topics is None else \
        [(t["name"], p) for t in topics for p in t["partition_indexes"]]
    offsets = coordinator.fetch_offsets(group_id, wanted)
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), o in offsets.items():
        by_topic.setdefault(topic, []).append({
            "partition_index": partition,
            "committed_offset": o.offset if o else -1,
            "committed_leader_epoch": o.leader_epoch if o else -1,
            "metadata": o.metadata if o else "",
            "error_code": ErrorCode.NONE})
    return [{"name": name, "partitions": parts} for name, parts in by_topic.items()]


@handler(api_key=9, versions=(0, 9))
async def offset_fetch(ctx: RequestContext, request: OffsetFetchRequest) -> dict:
    coordinator = await _coordinator(ctx)
    if ctx.api_version >= 8:
        groups = []
        for g in request["groups"]:
            error = coordinator.coordinator_error(g["group_id"])
            groups.append({"group_id": g["group_id"], "error_code": error, "topics":
                           [] if error else _fetched_topics(coordinator, g["group_id"],
                                                            g["topics"])})
        return {"throttle_time_ms": 0, "groups": groups}
    group_id = request["group_id"]
    error = coordinator.coordinator_error(group_id)
    if not error:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
                "topics": _fetched_topics(coordinator, group_id, request["topics"])}
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
    coordinator = await _coordinator(ctx)
    topics = request["topics"] or []
    error, results = coordinator.delete_offsets(
        request["group_id"],
        [(t["name"], p["partition_index"]) for t in topics for p in t["partitions"]])
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
    coordinator = await _coordinator(ctx)
    operations = _GROUP_OPERATIONS if request.get("include_authorized_operations") \
        else _NOT_REQUESTED
    groups = []
    for group_id in request["groups"]:
        d = coordinator.describe_group(group_id)
        groups.append({
            "error_code": d.error, "group_id": d.group_id, "group_state": d.state,
            "protocol_type": d.protocol_type, "protocol_data": d.protocol_name,
            "authorized_operations": operations,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "member_metadata": m.metadata, "member_assignment": m.assignment}
                        for m in d.members]})
    return {"throttle_time_ms": 0, "groups": groups}


@handler(api_key=16, versions=(0, 5))
async def list_groups(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    coordinator = await _coordinator(ctx)
    listed = coordinator.list_groups(request.get("states_filter"), request.get("types_filter"))
    error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if coordinator.loading() else ErrorCode.NONE
    return {"throttle_time_ms": 0, "error_code": error, "groups": [
        {"group_id": g, "protocol_type": t, "group_state": s, "group_type": "classic"}
        for g, t, s in listed]}


@handler(api_key=42, versions=(0, 2))
async def delete_groups(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    coordinator = await _coordinator(ctx)
    results = coordinator.delete_groups(list(request["groups_names"]))
    return {"throttle_time_ms": 0,
            "results": [{"group_id": g, "error_code": e} for g, e in results.items()]}

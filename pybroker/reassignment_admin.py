"""Partition reassignment over Kafka's protocol, for the operator commands ``pybroker
cluster rebalance|drain`` and ``pybroker partition move|reassignments``.

librdkafka (confluent-kafka, the CLI's client) has no AlterPartitionReassignments or
ListPartitionReassignments, and kafka-python, which has, is only a test dependency, so
these go through pybroker's own client (``pybroker.client.Cluster``, as ``quota`` and
``txn`` do) with the typed messages of ``pybroker.net.protocol.typed``, to any
Kafka-protocol cluster:

- ``read_layout``: Metadata: the live brokers with their ``broker.rack``, the
  controller, and the replicas of every partition (or of the topics named);
- ``alter``: AlterPartitionReassignments, target replicas per partition (None cancels
  one in progress); ``ongoing``: ListPartitionReassignments. Both go to the controller,
  as Kafka's admin client sends them (a KRaft broker forwards them; a ZooKeeper-mode
  broker that is not the controller answers NOT_CONTROLLER, and the controller is
  looked up again);
- replication throttles as ``kafka-reassign-partitions.sh --throttle`` sets them
  (``throttles``): on each topic with a move, ``leader.replication.throttled.replicas``
  lists every current replica of its moving partitions (``partition:broker``: any of them
  may lead, and serve the new replicas, while the move runs) and
  ``follower.replication.throttled.replicas`` the replicas being added; on every broker
  that holds or gets a moving replica, ``leader.`` and
  ``follower.replication.throttled.rate`` (bytes/s, the broker's own dynamic config).
  ``clear_throttles`` deletes them all once the moves are done, as the tool's
  ``--verify`` does;
- ``wait``: ListPartitionReassignments polled until none of the partitions is moving.

Calls block up to the client's timeout per request; nothing here prints (``wait``
reports progress through its callback).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import cast

from pybroker.client.cluster import Cluster
from pybroker.cluster.rebalance_plan import Assignment, Partition
from pybroker.errors import ErrorCode, KafkaError
from pybroker.net.protocol.typed import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsRequestAlterConfigsResource,
    IncrementalAlterConfigsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    MetadataRequest,
    MetadataResponse,
)

METADATA, INCREMENTAL_ALTER_CONFIGS = 3, 44
ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 45, 46
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
POLL_S = 1.0
# Times a request to the controller is sent again after NOT_CONTROLLER or a lost
# connection (a controller moving), a second apart.
_CONTROLLER_ATTEMPTS = 10


@dataclass
class Layout:
    brokers: dict[int, str | None]  # live broker id -> broker.rack
    controller: int  # -1: none known
    assignment: Assignment  # replicas of each partition, the preferred leader first


@dataclass(frozen=True)
class Ongoing:
    """A reassignment in progress, as ListPartitionReassignments says it."""

    replicas: list[int]
    adding: list[int]
    removing: list[int]


@dataclass(frozen=True)
class Throttles:
    rate: int  # bytes/s, leader and follower alike
    brokers: list[int]
    topics: dict[str, tuple[str, str]]  # topic -> (leader replicas, follower replicas)


def read_layout(cluster: Cluster, topics: Collection[str] | None = None) -> Layout:
    """The live brokers, the controller and the replicas of every partition of
    ``topics`` (None: every topic). Raises ``KafkaError`` for a topic that cannot be
    described."""
    body: MetadataRequest = {
        "topics": None if topics is None else [{"name": t} for t in topics],
        "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False}
    answer = cast(MetadataResponse, cluster.request(METADATA, 9, dict(body)))
    assignment: Assignment = {}
    for topic in answer["topics"]:
        name = topic["name"] or ""
        if topic["error_code"] != ErrorCode.NONE:
            raise KafkaError(f"topic {name}", ErrorCode(topic["error_code"]))
        for partition in topic["partitions"]:
            assignment[(name, partition["partition_index"])] = list(partition["replica_nodes"])
    return Layout({b["node_id"]: b.get("rack") for b in answer["brokers"]},
                  answer.get("controller_id", -1), dict(sorted(assignment.items())))


def _to_controller(cluster: Cluster, api_key: int, body: dict) -> dict:
    """A request (version 0) to the controller, sent again where it moved."""
    for attempt in range(_CONTROLLER_ATTEMPTS):
        if attempt:
            time.sleep(POLL_S)
        controller = read_layout(cluster, ()).controller
        if controller < 0:
            continue
        try:
            answer = cluster.connection(controller).request(api_key, 0, body)
        except OSError:
            cluster.drop_connection(controller)
            continue
        if answer["error_code"] != ErrorCode.NOT_CONTROLLER:
            return answer
    raise KafkaError("no controller answered", ErrorCode.NOT_CONTROLLER)


def _error_text(code: int, message: str | None) -> str:
    name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
    return f"{name}: {message}" if message else name


def _top_level(answer: AlterPartitionReassignmentsResponse
               | ListPartitionReassignmentsResponse, what: str) -> None:
    if answer["error_code"] != ErrorCode.NONE:
        raise KafkaError(f"{what}: {answer['error_message'] or 'refused'}",
                         ErrorCode(answer["error_code"]))


def alter(cluster: Cluster, targets: Mapping[Partition, list[int] | None],
          timeout_s: float) -> dict[Partition, str]:
    """Start (or, with None, cancel) the reassignment of each partition; the error of
    each partition the controller refused, as ``NAME: message``."""
    topics: dict[str, list[Partition]] = {}
    for partition in sorted(targets):
        topics.setdefault(partition[0], []).append(partition)
    body: AlterPartitionReassignmentsRequest = {
        "timeout_ms": int(timeout_s * 1000),
        "topics": [{"name": name, "partitions": [
            {"partition_index": p[1], "replicas": targets[p]} for p in partitions]}
            for name, partitions in topics.items()]}
    answer = cast(AlterPartitionReassignmentsResponse,
                  _to_controller(cluster, ALTER_PARTITION_REASSIGNMENTS, dict(body)))
    _top_level(answer, "AlterPartitionReassignments")
    return {(t["name"], p["partition_index"]): _error_text(p["error_code"], p["error_message"])
            for t in answer["responses"] for p in t["partitions"]
            if p["error_code"] != ErrorCode.NONE}


def ongoing(cluster: Cluster, partitions: Collection[Partition] | None = None,
            timeout_s: float = 30.0) -> dict[Partition, Ongoing]:
    """The reassignments in progress (of ``partitions``; None: all)."""
    topics: dict[str, list[int]] = {}
    for topic, index in sorted(partitions or ()):
        topics.setdefault(topic, []).append(index)
    body: ListPartitionReassignmentsRequest = {
        "timeout_ms": int(timeout_s * 1000),
        "topics": None if partitions is None else
        [{"name": t, "partition_indexes": indexes} for t, indexes in topics.items()]}
    answer = cast(ListPartitionReassignmentsResponse,
                  _to_controller(cluster, LIST_PARTITION_REASSIGNMENTS, dict(body)))
    _top_level(answer, "ListPartitionReassignments")
    return {(t["name"], p["partition_index"]): Ongoing(
        list(p["replicas"]), list(p["adding_replicas"]), list(p["removing_replicas"]))
        for t in answer["topics"] for p in t["partitions"]}


def throttles(current: Mapping[Partition, list[int]], targets: Mapping[Partition, list[int]],
              rate: int) -> Throttles:
    """The throttle configs of moving ``current`` to ``targets`` (the partitions that
    change), as ``kafka-reassign-partitions.sh`` computes them."""
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    brokers: set[int] = set()
    for (topic, index), target in sorted(targets.items()):
        replicas = current[(topic, index)]
        if set(target) == set(replicas):
            continue  # a reorder moves no data
        leaders.setdefault(topic, []).extend(f"{index}:{b}" for b in replicas)
        followers.setdefault(topic, []).extend(
            f"{index}:{b}" for b in target if b not in replicas)
        brokers.update(replicas, target)
    return Throttles(rate, sorted(brokers),
                     {t: (",".join(leaders[t]), ",".join(followers[t])) for t in leaders})


def apply_throttles(cluster: Cluster, wanted: Throttles) -> None:
    """Set the throttle configs: the topics' in one request, each broker's rate on that
    broker (a broker's own config is changed through it)."""
    topics: list[IncrementalAlterConfigsRequestAlterConfigsResource] = [
        {"resource_type": TOPIC_RESOURCE, "resource_name": topic, "configs": [
            {"name": LEADER_REPLICAS, "config_operation": SET, "value": leaders},
            {"name": FOLLOWER_REPLICAS, "config_operation": SET, "value": followers}]}
        for topic, (leaders, followers) in wanted.topics.items()]
    _alter_configs(cluster, None, topics)
    for broker in wanted.brokers:
        _alter_configs(cluster, broker, [{
            "resource_type": BROKER_RESOURCE, "resource_name": str(broker), "configs": [
                {"name": key, "config_operation": SET, "value": str(wanted.rate)}
                for key in (LEADER_RATE, FOLLOWER_RATE)]}])


def clear_throttles(cluster: Cluster, brokers: Collection[int], topics: Collection[str]
                    ) -> None:
    """Delete the throttle configs of ``topics`` and the throttle rates of ``brokers``
    (deleting a config that is not set is no error)."""
    _alter_configs(cluster, None, [
        {"resource_type": TOPIC_RESOURCE, "resource_name": topic, "configs": [
            {"name": key, "config_operation": DELETE, "value": None}
            for key in (LEADER_REPLICAS, FOLLOWER_REPLICAS)]} for topic in sorted(topics)])
    for broker in sorted(brokers):
        _alter_configs(cluster, broker, [{
            "resource_type": BROKER_RESOURCE, "resource_name": str(broker), "configs": [
                {"name": key, "config_operation": DELETE, "value": None}
                for key in (LEADER_RATE, FOLLOWER_RATE)]}])


def _alter_configs(cluster: Cluster, broker: int | None,
                   resources: list[IncrementalAlterConfigsRequestAlterConfigsResource]) -> None:
    """IncrementalAlterConfigs through ``broker`` (None: any); raises ``KafkaError`` with
    the first resource refused."""
    if not resources:
        return
    body: IncrementalAlterConfigsRequest = {"resources": resources, "validate_only": False}
    if broker is None:
        raw = cluster.request(INCREMENTAL_ALTER_CONFIGS, 1, dict(body))
    else:
        raw = cluster.connection(broker).request(INCREMENTAL_ALTER_CONFIGS, 1, dict(body))
    for resource in cast(IncrementalAlterConfigsResponse, raw)["responses"]:
        if resource["error_code"] != ErrorCode.NONE:
            kind = "topic" if resource["resource_type"] == TOPIC_RESOURCE else "broker"
            raise KafkaError(f"{kind} {resource['resource_name']}: "
                             f"{resource['error_message'] or 'config refused'}",
                             ErrorCode(resource["error_code"]))


def wait(cluster: Cluster, partitions: Collection[Partition],
         progress: Callable[[int, int], None], poll_s: float = POLL_S) -> None:
    """Until none of ``partitions`` is being reassigned; ``progress(done, remaining)``
    first and at each change."""
    reported: int | None = None
    while True:
        remaining = len(ongoing(cluster, partitions).keys() & set(partitions))
        if remaining != reported:
            progress(len(partitions) - remaining, remaining)
            reported = remaining
        if not remaining:
            return
        time.sleep(poll_s)

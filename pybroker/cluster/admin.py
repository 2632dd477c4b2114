"""Topic administration in cluster mode: any broker writes the change to ZooKeeper, the
controller carries it out (Kafka's AdminZkClient does the same).

- create: checked like a single node's (name, counts, configs), the replication factor
  against the live brokers, replicas placed round-robin (``placement.assign``), then
  ``/brokers/topics/<t>`` and ``/config/topics/<t>`` are written; the controller sees the
  topic, elects leaders and tells every broker. CreateTopics answers once this broker's
  metadata shows a leader for every partition (REQUEST_TIMED_OUT after the request's
  timeout: the topic exists, its leaders are not known here yet).
- delete: ``/admin/delete_topics/<t>``; the controller stops the replicas and removes it.
- new partitions: the assignment grows; the controller starts them.
- configs: ``/config/topics/<t>`` and a change notification every broker applies.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

from pybroker.broker.topic_manager import check_partition_limit
from pybroker.errors import (
    ErrorCode,
    InvalidPartitionsError,
    KafkaError,
    UnknownTopicOrPartitionError,
)

if TYPE_CHECKING:
    from pybroker.cluster.node import ClusterNode

DEFAULT_WAIT_S = 30.0


def _live_ids(node: ClusterNode) -> list[int]:
    ids = sorted(node.metadata.brokers)
    return ids or [node.broker.broker_id]


async def check_new_topic(node: ClusterNode, name: str, partitions: int, replication_factor: int,
                          configs: dict[str, str | None]) -> tuple[int, int, dict[str, str]]:
    """(partitions, replication factor, overrides), defaults resolved, or a KafkaError."""
    exists = await asyncio.to_thread(node.store.topic, name) is not None
    return node.broker.topics.check_new(name, partitions, replication_factor, configs,
                                        live_brokers=len(_live_ids(node)), exists=exists)


async def create_topic(node: ClusterNode, name: str, partitions: int, replication_factor: int,
                       configs: dict[str, str | None],
                       assignment: dict[int, list[int]] | None = None,
                       wait_s: float = DEFAULT_WAIT_S) -> tuple[uuid.UUID, int, int, dict]:
    """Create ``name``; returns (topic id, partitions, replication factor, overrides)."""
    from pybroker.cluster.placement import assign

    if assignment is not None:
        partitions, replication_factor = len(assignment), len(assignment[0])
    partitions, replication_factor, overrides = await check_new_topic(
        node, name, partitions, replication_factor, configs)
    if assignment is None:
        assignment = assign(_live_ids(node), partitions, replication_factor)
    topic_id = uuid.uuid4()
    await asyncio.to_thread(node.store.create_topic, name, topic_id, assignment, overrides)
    await wait_for_leaders(node, name, partitions, wait_s)
    return topic_id, partitions, replication_factor, overrides


async def wait_for_leaders(node: ClusterNode, name: str, partitions: int,
                           wait_s: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while not node.metadata.has_leaders(name, partitions):
        if loop.time() >= deadline:
            raise KafkaError(f"Topic {name} was created but its leaders are not known yet",
                             ErrorCode.REQUEST_TIMED_OUT)
        await asyncio.sleep(0.02)


async def delete_topic(node: ClusterNode, name: str) -> None:
    store = node.store
    if await asyncio.to_thread(store.topic, name) is None:
        raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
    await asyncio.to_thread(store.request_topic_deletion, name)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEFAULT_WAIT_S
    while node.metadata.topic(name) is not None and loop.time() < deadline:
        await asyncio.sleep(0.02)


async def add_partitions(node: ClusterNode, name: str, total: int) -> None:
    from pybroker.cluster.placement import assign

    store = node.store
    current = await asyncio.to_thread(store.topic, name)
    if current is None:
        raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
    count = len(current.partitions)
    if total <= count:
        raise InvalidPartitionsError(
            f"Topic currently has {count} partitions, {total} would not be an increase.")
    check_partition_limit(total)
    replication = len(current.partitions[0])
    live = _live_ids(node)
    first_leader = current.partitions[0][0]
    # Kafka continues the leaders' round-robin from partition 0's leader
    start = live.index(first_leader) if first_leader in live else None
    added = assign(live, total - count, replication, start_index=start, start_partition=count)
    assignment = {**current.partitions, **added}  # ``added`` is keyed from ``count`` on
    await asyncio.to_thread(store.set_assignment, name, current.topic_id, assignment)
    await wait_for_leaders(node, name, total, DEFAULT_WAIT_S)

"""Partition reassignment in cluster mode (KIP-455), as Kafka's ZooKeeper mode keeps it.

A partition moving from its original replicas ORS to target replicas TRS has, in
``/brokers/topics/<t>``, the whole set RS = TRS + ORS (target first, no repeats) as its
assignment, with ``adding_replicas`` (TRS - ORS) and ``removing_replicas`` (ORS - TRS)
naming the difference. :class:`ReplicaAssignment` is that triple and Kafka's arithmetic
on it (``ReplicaAssignment.scala``).

The request side, like the rest of topic administration (``cluster.admin``): any broker
answers AlterPartitionReassignments by checking each partition as Kafka's controller does
and writing the new triple into the topic's znode (conditional on its version: written
again on a fresh read when another writer came first); the controller sees the change
through its topic watch and carries the move out (``Controller``'s reassignment section).
A cancellation writes the original replicas back as a plain assignment, which the
controller treats as a reassignment to them. ListPartitionReassignments reads the topic
znodes. The answer comes once the znode is written, as Kafka's controller answered once
it had written it, not when the move is done.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import TYPE_CHECKING, NamedTuple

from pybroker.broker.topic_manager import validate_topic_name
from pybroker.cluster.zk_store import BadVersionError, TopicAssignment
from pybroker.errors import (
    KafkaError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)
from pybroker.metadata.interface import (
    OngoingReassignment,
    ReassignmentTarget,
    check_reassignment,
)

if TYPE_CHECKING:
    from pybroker.cluster.node import ClusterNode

WRITE_RETRIES = 10


class ReplicaAssignment(NamedTuple):
    """One partition's replicas (RS) and, while it moves, those being added and
    removed."""

    replicas: list[int]
    adding: list[int]
    removing: list[int]

    @classmethod
    def of(cls, topic: TopicAssignment, partition: int) -> ReplicaAssignment:
        return cls(list(topic.partitions[partition]), list(topic.adding.get(partition, ())),
                   list(topic.removing.get(partition, ())))

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def origin(self) -> list[int]:
        """ORS: the replicas before the move (all of them when none is under way)."""
        return [r for r in self.replicas if r not in self.adding]

    @property
    def target(self) -> list[int]:
        """TRS: the replicas after the move."""
        return [r for r in self.replicas if r not in self.removing]

    def reassign_to(self, target: list[int]) -> ReplicaAssignment:
        """A move from this assignment's origin to ``target`` (a move under way is
        replaced; a target equal to the origin is no move at all)."""
        origin = self.origin
        return ReplicaAssignment(list(dict.fromkeys([*target, *origin])),
                                 [r for r in target if r not in origin],
                                 [r for r in origin if r not in target])

    def completed(self) -> ReplicaAssignment:
        return ReplicaAssignment(self.target, [], [])

    def in_topic(self, topic: TopicAssignment, partition: int) -> TopicAssignment:
        """``topic`` with this partition's assignment replaced by this one."""
        adding = {p: r for p, r in topic.adding.items() if p != partition}
        removing = {p: r for p, r in topic.removing.items() if p != partition}
        if self.adding:
            adding[partition] = list(self.adding)
        if self.removing:
            removing[partition] = list(self.removing)
        return topic._replace(partitions={**topic.partitions, partition: list(self.replicas)},
                              adding=dict(sorted(adding.items())),
                              removing=dict(sorted(removing.items())))


async def alter(node: ClusterNode, targets: list[ReassignmentTarget]) -> list[KafkaError | None]:
    """AlterPartitionReassignments: each target checked (brokers against those
    registered in ZooKeeper now, not this broker's metadata, which a broker just started
    may not have yet) and written into its topic's znode, one write per topic."""
    results: list[KafkaError | None] = [None] * len(targets)
    by_topic: dict[str, list[int]] = defaultdict(list)
    for i, (name, _, _) in enumerate(targets):
        by_topic[name].append(i)
    registered = set(await asyncio.to_thread(node.store.brokers))
    for name, indexes in by_topic.items():
        for _ in range(WRITE_RETRIES):
            found = await _reassignable(node, name)
            if found is None:
                for i in indexes:
                    results[i] = UnknownTopicOrPartitionError(
                        f"Unable to find a topic named {name}.")
                break
            topic, version = found
            updated = topic
            for i in indexes:
                _, index, replicas = targets[i]
                try:
                    updated = _reassigned(updated, index, replicas, registered)
                    results[i] = None
                except KafkaError as exc:
                    results[i] = exc
            if updated == topic:
                break
            try:
                await asyncio.to_thread(node.store.write_topic, updated, version)
                break
            except BadVersionError:
                continue  # the controller (or another request) wrote meanwhile
        else:
            for i in indexes:
                results[i] = KafkaError(f"Topic {name} kept changing; not reassigned")
    return results


async def _reassignable(node: ClusterNode, name: str) -> tuple[TopicAssignment, int] | None:
    """The topic and its znode version, None when there is no such topic to move: an
    illegal name (it would be a path to another znode), or a topic being deleted (Kafka's
    controller skips those: the deletion stops every replica)."""
    if not _legal(name):
        return None
    found = await asyncio.to_thread(node.store.versioned_topic, name)
    if found is None or await asyncio.to_thread(node.store.topic_deletion_requested, name):
        return None
    return found


def _legal(name: str) -> bool:
    try:
        validate_topic_name(name)
    except KafkaError:
        return False
    return True


def _reassigned(topic: TopicAssignment, index: int, replicas: list[int] | None,
                registered: set[int]) -> TopicAssignment:
    if index not in topic.partitions:
        raise UnknownTopicOrPartitionError(f"Unable to find partition {topic.name}:{index}.")
    current = ReplicaAssignment.of(topic, index)
    if replicas is None:
        if not current.reassigning:
            raise NoReassignmentInProgressError()
        return ReplicaAssignment(current.origin, [], []).in_topic(topic, index)
    check_reassignment(replicas, registered)
    return current.reassign_to(replicas).in_topic(topic, index)


async def ongoing(node: ClusterNode, partitions: list[tuple[str, int]] | None
                  ) -> list[OngoingReassignment]:
    """ListPartitionReassignments, from the topic znodes."""
    store = node.store
    wanted = None if partitions is None else set(partitions)
    names = (await asyncio.to_thread(store.topic_names) if wanted is None
             else sorted({name for name, _ in wanted if _legal(name)}))
    topics = await asyncio.to_thread(store.topics, names)
    found = []
    for name, topic in sorted(topics.items()):
        for index in sorted(set(topic.adding) | set(topic.removing)):
            if index in topic.partitions and (wanted is None or (name, index) in wanted):
                moving = ReplicaAssignment.of(topic, index)
                found.append(OngoingReassignment(name, index, *moving))
    return found

"""The ZooKeeper control plane: this broker as a member of a cluster (docs/REPLICATION.md).

It wraps what ``pybroker/cluster/`` has: the :class:`ClusterNode` (ZooKeeper session,
registration, controller election, the pyzmq control channel, the ReplicaManager), the
:class:`MetadataCache` the controller's UpdateMetadata requests fill, and the topic
administration of ``cluster.admin`` (any broker writes a change to ZooKeeper, the
controller carries it out).

Metadata (key 3): from the MetadataCache: live brokers, the controller, and per partition
its leader (-1 with LEADER_NOT_AVAILABLE when it has none), leader epoch, replicas, ISR and
offline replicas. An auto-created topic is written to ZooKeeper in the background and
answered LEADER_NOT_AVAILABLE until the controller has elected its leaders, as Kafka does;
clients ask again.

Topic creation: checked like a single node's, the replication factor against the live
brokers, replicas placed round-robin over them (or as the request assigns them), answered
once this broker's metadata shows a leader for every partition; one topic at a time.

Partition reassignment (KIP-455): any broker checks an AlterPartitionReassignments and
writes it into the topic's znode, the controller carries it out
(``pybroker/cluster/reassignment.py``); ListPartitionReassignments reads the znodes.

Groups, as Kafka: a group's coordinator is the leader of its ``__consumer_offsets``
partition, which FindCoordinator names from the metadata (any broker answers it). The
first FindCoordinator of a group creates the topic: ``offsets.topic.num.partitions``
partitions, replication factor min(``offsets.topic.replication.factor``, live brokers),
compacted; until the group's partition has a leader the answer is
COORDINATOR_NOT_AVAILABLE. The coordinator follows the leadership of those partitions,
writes only to those this broker leads with at least min.insync.replicas in the ISR
(acks=all, as Kafka's coordinator writes: :class:`ClusterInternalTopic`), and answers a
write once the ISR has it. Every broker hears of a topic's deletion (UpdateMetadata) and
tells its coordinator, which drops the topic's committed offsets in the groups it
coordinates (Kafka's ``onPartitionsDeleted``).

Transactions likewise: a transactional id's coordinator is the leader of its
``__transaction_state`` partition, the topic created by the first FindCoordinator of key
type 1 (``transaction.state.log.*``; its min.insync.replicas at most its replication
factor), the coordinator following those partitions' leadership.

ElectLeaders: any broker answers it, the controller elects (``cluster.admin``: this
broker's own when active, else the active one's over the control channel), answered once
this broker's metadata shows the leaders elected.

Dynamic broker configs, as Kafka's ZooKeeper mode kept them: ``/config/brokers/<id>``
(one broker's, written only by that broker: clients send a BROKER resource to the broker
it names) and ``/config/brokers/<default>`` (the cluster's default, written by any);
every broker watches both of its own, so a default changed anywhere applies everywhere
within a ZooKeeper round trip. AlterConfigs is answered once the znode is written.
Client quotas likewise, in Kafka's ``/config/users/...``, ``/config/clients/...`` and
``/config/ips/...`` znodes, each change announced in ``/config/changes``, which every
broker follows.

Not thread-safe: the event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from pybroker.broker.topic_manager import (
    INTERNAL_TOPICS,
    Topic,
    TopicManager,
    validate_topic_name,
)
from pybroker.cluster import admin, reassignment
from pybroker.cluster.metadata_cache import TopicInfo
from pybroker.cluster.node import ClusterNode
from pybroker.coordinator import CoordinatorConfig, GroupCoordinator
from pybroker.coordinator.offset_store import OFFSETS_TOPIC, offsets_topic_config
from pybroker.errors import (
    ErrorCode,
    InvalidReplicaAssignmentError,
    KafkaError,
    TopicAlreadyExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from pybroker.metadata.interface import (
    OFFSETS_TOPIC_CREATE_WAIT_S,
    CreatedTopic,
    CurrentLeader,
    DeletedTopic,
    ElectionResult,
    Endpoint,
    LeadershipListener,
    NewTopic,
    OngoingReassignment,
    PartitionAssignment,
    ReassignmentTarget,
    RequestedTopic,
    TopicAnswer,
    missing_topic,
)
from pybroker.net.protocol.codec import ZERO_UUID
from pybroker.net.protocol.typed import MetadataResponsePartition
from pybroker.security.credentials import CredentialStore
from pybroker.security.store import AclStore
from pybroker.security.zk_acl_store import ZkAclStore
from pybroker.security.zk_credential_store import ZkCredentialStore
from pybroker.txn.config import TxnConfig
from pybroker.txn.coordinator import TxnCoordinator
from pybroker.txn.markers import MarkerWrite
from pybroker.txn.records import TRANSACTION_STATE_TOPIC, transaction_topic_config

if TYPE_CHECKING:
    from pybroker.broker.broker import Broker
    from pybroker.broker.dynamic_config import DynamicBrokerConfig
    from pybroker.broker.partition import Partition
    from pybroker.broker.quotas import ClientQuotas, Entity

log = logging.getLogger("pybroker.metadata")

class ZkClusterMetadata:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self.node = ClusterNode(broker)
        self._cache = self.node.metadata
        self._coordinator: GroupCoordinator | None = None
        self._txn_coordinator: TxnCoordinator | None = None
        self._internal_topic_creation: dict[str, asyncio.Task[None]] = {}
        self._auto_creating: set[str] = set()  # topic names
        self._background: set[asyncio.Task[None]] = set()

    # lifecycle -------------------------------------------------------------------------

    async def join(self, cluster_id: str) -> str:
        return await self.node.connect(cluster_id)

    async def follow_broker_configs(self, dynamic: DynamicBrokerConfig) -> None:
        await self.node.follow_broker_configs(dynamic)

    def leads_every_partition(self) -> bool:
        return False

    def producer_id_source(self) -> Callable[[int], int] | None:
        return self.node.producer_id_block

    def acl_store(self) -> AclStore:
        return ZkAclStore(self.node.store.client, asyncio.get_running_loop())

    def credential_store(self) -> CredentialStore:
        return ZkCredentialStore(self.node.store, asyncio.get_running_loop())

    def group_coordinator(self, config: CoordinatorConfig) -> GroupCoordinator:
        coordinator = GroupCoordinator(
            ClusterInternalTopic(self._broker.topics, OFFSETS_TOPIC,
                                 lambda: self._partition_count(OFFSETS_TOPIC)), config,
            partition_exists=self.partition_exists)
        self._coordinator = coordinator
        # Built before start() joins the cluster: no partition is led yet, every leadership
        # this broker gets comes through the listener.
        coordinator.follow_leadership(self.on_leadership_change)
        self.node.replicas.add_deletion_listener(coordinator.topics_deleted)
        return coordinator

    def transaction_coordinator(self, config: TxnConfig,
                                new_producer_id: Callable[[], Awaitable[int]],
                                write_markers: MarkerWrite) -> TxnCoordinator:
        coordinator = TxnCoordinator(
            ClusterInternalTopic(self._broker.topics, TRANSACTION_STATE_TOPIC,
                                 lambda: self._partition_count(TRANSACTION_STATE_TOPIC)),
            config, new_producer_id, write_markers, self.partition_exists)
        self._txn_coordinator = coordinator
        coordinator.follow_leadership(self.on_leadership_change)
        return coordinator

    async def start(self) -> None:
        await self.node.start()

    async def controlled_shutdown(self) -> None:
        await self.node.controlled_shutdown()

    async def stop(self) -> None:
        await self.node.stop()  # the fetchers stop appending before the logs close

    # brokers ---------------------------------------------------------------------------

    @property
    def controller_id(self) -> int:
        return self._cache.controller_id

    def is_active_controller(self) -> bool:
        controller = self.node.controller
        return controller is not None and controller.is_active

    def offline_partition_count(self) -> int:
        controller = self.node.controller
        return controller.offline_partition_count() if controller is not None else 0

    def log_dir_failed(self, partitions: list[Partition]) -> None:
        task = asyncio.get_running_loop().create_task(
            self.node.replicas.log_dir_failed(partitions))
        self._background.add(task)
        task.add_done_callback(self._log_dir_reported)

    def _log_dir_reported(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("telling the controller of a failed log directory failed: %s",
                      task.exception())

    def live_brokers(self) -> list[Endpoint]:
        return self._cache.live_brokers()

    def endpoint(self, broker_id: int, listener: str) -> Endpoint | None:
        return self._cache.endpoint(broker_id, listener)

    def rack(self, broker_id: int) -> str | None:
        return self._cache.rack(broker_id)

    def leader_of(self, topic: str, partition: int) -> Endpoint | None:
        return self._cache.leader_of(topic, partition)

    def current_leader(self, topic: str, partition: int) -> CurrentLeader | None:
        """As Kafka's ``getCurrentLeader``: this broker's replica of the partition (told
        by the controller's LeaderAndIsr) is newer than the metadata cache (its
        UpdateMetadata follows), which answers for a partition this broker has no
        replica of."""
        known = self._broker.topics.get(topic)
        local = known.partitions[partition] \
            if known is not None and 0 <= partition < len(known.partitions) else None
        if local is not None and local.log is not None:
            leader_id, leader_epoch = local.leader_id, local.leader_epoch
        else:
            info = self._cache.partition(topic, partition)
            if info is None:
                return None
            leader_id, leader_epoch = info.leader, info.leader_epoch
        if leader_id < 0:
            return None
        return CurrentLeader(leader_id, leader_epoch, self._cache.broker(leader_id))

    def on_leadership_change(self, fn: LeadershipListener) -> None:
        self.node.replicas.add_leadership_listener(fn)

    async def coordinator_for_group(self, group_id: str) -> Endpoint | None:
        """The leader of the group's offsets partition, creating the topic on first use."""
        if self._partition_count(OFFSETS_TOPIC) is None:
            config = CoordinatorConfig.from_config(self._broker.config)
            await self._create_internal_topic(
                OFFSETS_TOPIC, config.offsets_topic_num_partitions,
                config.offsets_topic_replication_factor,
                offsets_topic_config(config.offsets_topic_segment_bytes))
        if self._partition_count(OFFSETS_TOPIC) is None or self._coordinator is None:
            return None
        return self._cache.leader_of(OFFSETS_TOPIC, self._coordinator.partition_for(group_id))

    async def coordinator_for_transaction(self, transactional_id: str) -> Endpoint | None:
        """The leader of the id's ``__transaction_state`` partition, creating the topic on
        first use (its min.insync.replicas at most its replication factor)."""
        if self._partition_count(TRANSACTION_STATE_TOPIC) is None:
            config = TxnConfig.from_config(self._broker.config)
            replication = self._replication(config.state_log_replication_factor)
            await self._create_internal_topic(
                TRANSACTION_STATE_TOPIC, config.state_log_num_partitions, replication,
                transaction_topic_config(config.state_log_segment_bytes,
                                         min(replication, config.state_log_min_isr)))
        coordinator = self._txn_coordinator
        if self._partition_count(TRANSACTION_STATE_TOPIC) is None or coordinator is None:
            return None
        return self._cache.leader_of(TRANSACTION_STATE_TOPIC,
                                     coordinator.partition_for(transactional_id))

    def _partition_count(self, name: str) -> int | None:
        """An internal topic's partition count as the cluster knows it."""
        known = self._cache.topic(name)
        return len(known.partitions) if known is not None and known.partitions else None

    def _replication(self, configured: int) -> int:
        return max(1, min(configured, len(self._cache.live_brokers())))

    async def _create_internal_topic(self, name: str, partitions: int, replication: int,
                                     topic_config: dict[str, str]) -> None:
        """Create a coordinator's topic through the controller (one creation at a time
        per topic and broker; concurrent callers share it), its replication factor at most
        the live brokers, waiting at most ``OFFSETS_TOPIC_CREATE_WAIT_S``."""
        task = self._internal_topic_creation.get(name)
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self._create_internal_topic_now(
                name, partitions, self._replication(replication), topic_config))
            self._internal_topic_creation[name] = task
        # asyncio.wait: no task needed (a handler's first step runs outside one), the
        # creation is not cancelled at the time limit, and a cancellation of ours is never
        # lost
        await asyncio.wait((task,), timeout=OFFSETS_TOPIC_CREATE_WAIT_S)

    async def _create_internal_topic_now(self, name: str, partitions: int, replication: int,
                                         topic_config: dict[str, str]) -> None:
        try:
            await self._create_topic(NewTopic(name, partitions, replication, dict(topic_config)))
            log.info("created %s: %d partitions, replication factor %d", name, partitions,
                     replication)
        except TopicAlreadyExistsError:
            pass  # another broker created it first
        except Exception as exc:  # ZooKeeper away, no controller: the client asks again
            log.warning("creating %s failed: %s", name, exc)

    # topics ----------------------------------------------------------------------------

    def partition_exists(self, topic: str, index: int) -> bool:
        known = self._cache.topic(topic)
        return known is not None and 0 <= index < len(known.partitions)

    def partition_count(self, topic: str) -> int:
        known = self._cache.topic(topic)
        return len(known.partitions) if known is not None else 0

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        known = self._cache.topic_by_id(topic_id)
        return known.name if known is not None else None

    def describe_all_topics(self) -> list[TopicAnswer]:
        live = self._cache.brokers
        return [_describe(info, live) for info in list(self._cache.topics.values())]

    async def describe_topics(self, requested: list[RequestedTopic], allow_auto_create: bool,
                              api_version: int) -> list[TopicAnswer]:
        return [self._lookup(t.get("name"), t.get("topic_id"), allow_auto_create, api_version)
                for t in requested]

    def _lookup(self, name: str | None, topic_id: uuid.UUID | None, allow_create: bool,
                api_version: int) -> TopicAnswer:
        cache = self._cache
        if name is None:
            info = cache.topic_by_id(topic_id) if topic_id and topic_id != ZERO_UUID else None
            if info is None:
                return missing_topic(None if api_version >= 12 else "", topic_id or ZERO_UUID,
                                     ErrorCode.UNKNOWN_TOPIC_ID)
            return _describe(info, cache.brokers)
        info = cache.topic(name)
        if info is not None:
            return _describe(info, cache.brokers)
        try:
            validate_topic_name(name)
        except KafkaError as exc:
            return missing_topic(name, ZERO_UUID, exc.code)
        if allow_create and self._broker.config["auto.create.topics.enable"]:
            self._start_auto_create(name)
            return missing_topic(name, ZERO_UUID, ErrorCode.LEADER_NOT_AVAILABLE)
        return missing_topic(name, ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    def _start_auto_create(self, name: str) -> None:
        """Write the topic to ZooKeeper in the background; the client asks again."""
        if name in self._auto_creating:
            return
        self._auto_creating.add(name)

        async def create() -> None:
            try:
                await self._create_topic(NewTopic(name))
            except KafkaError as exc:
                if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    log.info("auto-creating topic %s: %s", name, exc)
            except Exception:
                log.exception("auto-creating topic %s", name)
            finally:
                self._auto_creating.discard(name)

        self._background.add(task := asyncio.get_running_loop().create_task(create()))
        task.add_done_callback(self._background.discard)

    async def create_topics(self, topics: list[NewTopic], validate_only: bool = False
                            ) -> list[CreatedTopic | KafkaError]:
        results: list[CreatedTopic | KafkaError] = []
        for new in topics:
            try:
                results.append(await self._create_one(new, validate_only))
            except KafkaError as exc:
                results.append(exc)
        return results

    async def _create_one(self, new: NewTopic, validate_only: bool) -> CreatedTopic:
        partitions, replication = new.partitions, new.replication_factor
        configs = new.configs or {}
        assignment = None
        if new.assignment is not None:
            assignment = {index: list(ids) for index, ids in new.assignment}
            if sorted(assignment) != list(range(len(assignment))) or len(
                    {len(r) for r in assignment.values()}) != 1:
                raise InvalidReplicaAssignmentError("Partitions should be a consecutive 0-based "
                                                    "integer sequence with the same "
                                                    "replication factor")
            live = set(self._cache.brokers)
            for index, replicas in assignment.items():
                if not set(replicas) <= live or len(set(replicas)) != len(replicas):
                    raise InvalidReplicaAssignmentError(
                        f"Unknown or repeated broker(s) in assignment {replicas} of "
                        f"partition {index}")
        if validate_only:
            if assignment is not None:
                partitions, replication = len(assignment), len(assignment[0])
            partitions, replication, overrides = await admin.check_new_topic(
                self.node, new.name, partitions, replication, configs)
            return CreatedTopic(ZERO_UUID, partitions, replication, overrides)
        return CreatedTopic(*await admin.create_topic(self.node, new.name, partitions,
                                                      replication, configs, assignment))

    async def _create_topic(self, topic: NewTopic) -> CreatedTopic:
        """:meth:`create_topics` of one topic, raising its error."""
        [result] = await self.create_topics([topic])
        if isinstance(result, KafkaError):
            raise result
        return result

    async def delete_topics(self, targets: list[tuple[str | None, uuid.UUID]]
                            ) -> list[DeletedTopic | KafkaError]:
        results: list[DeletedTopic | KafkaError] = []
        for name, topic_id in targets:
            info = self._cache.topic(name) if name is not None \
                else self._cache.topic_by_id(topic_id)
            if info is None and name is None:
                results.append(UnknownTopicIdError(f"Topic id {topic_id} does not exist."))
                continue
            target = info.name if info is not None else name
            assert target is not None  # no info and no name was answered above
            try:
                await admin.delete_topic(self.node, target)
            except KafkaError as exc:
                results.append(exc)
                continue
            results.append(DeletedTopic(target, info.topic_id if info is not None else topic_id))
        return results

    async def create_partitions(self, name: str, count: int,
                                assignments: list[PartitionAssignment] | None,
                                validate_only: bool) -> None:
        if not validate_only:
            await admin.add_partitions(self.node, name, count)

    async def elect_leaders(self, election_type: int, partitions: list[tuple[str, int]] | None,
                            timeout_s: float) -> dict[tuple[str, int], ElectionResult]:
        return await admin.elect_leaders(self.node, election_type, partitions, timeout_s)

    async def alter_partition_reassignments(self, targets: list[ReassignmentTarget]
                                            ) -> list[KafkaError | None]:
        return await reassignment.alter(self.node, targets)

    async def list_partition_reassignments(self, partitions: list[tuple[str, int]] | None
                                           ) -> list[OngoingReassignment]:
        return await reassignment.ongoing(self.node, partitions)

    async def topic_configs(self, name: str) -> dict[str, str]:
        local = self._broker.topics.get(name)
        if local is not None:  # kept current by the change notifications
            return dict(local.overrides)
        if self._cache.topic(name) is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        return await self.node.read_topic_configs(name)

    async def alter_topic_configs(self, name: str, overrides: dict[str, str]) -> None:
        # durable in ZooKeeper before the answer; the others apply its change notification
        await self.node.write_topic_configs(name, overrides)
        if self._broker.topics.get(name) is not None:
            self._broker.topics.alter_configs(name, overrides)

    async def follow_client_quotas(self, quotas: ClientQuotas) -> None:
        await self.node.follow_client_quotas(quotas)

    async def alter_client_quotas(self, changes: dict[Entity, dict[str, float]]) -> None:
        # durable in ZooKeeper first; every broker applies it from the notification,
        # this one also at once for the answer
        for entity, values in changes.items():
            await self.node.write_client_quota(entity, values)
            self._broker.quotas.set(entity, values)

    async def alter_broker_configs(self, entity: str, configs: dict[str, str]) -> None:
        # durable in ZooKeeper first; every broker following the znode (this one too)
        # applies it from the watch, this one also at once for the answer
        await self.node.write_broker_configs(entity, configs)
        self._broker.dynamic_config.update(entity, configs)


class ClusterInternalTopic:
    """A coordinator's internal topic on a member of a cluster (``__consumer_offsets``,
    ``__transaction_state``; the coordinators' ``InternalTopic``): the controller creates
    it, ``partition_count`` gives its partition count as the cluster knows it (None while
    it has no such topic), and only the partitions this broker leads, with enough of an
    ISR, are written."""

    def __init__(self, topics: TopicManager, name: str,
                 partition_count: Callable[[], int | None]) -> None:
        self._topics = topics
        self.name = name
        self._partition_count = partition_count

    def partition_count(self) -> int | None:
        return self._partition_count()

    def local(self) -> Topic | None:
        """The local topic as it is: its partitions are this broker's replicas and
        placeholders."""
        return self._topics.get(self.name)

    def writable(self, index: int) -> Partition:
        # a partition not here (yet) is led elsewhere, as the controller creates it
        return self._topics.leader_for_write(self.name, index, True, lambda *_: True)


def _describe(info: TopicInfo, live: dict[int, Endpoint]) -> TopicAnswer:
    partitions: list[MetadataResponsePartition] = []
    for index, p in sorted(info.partitions.items()):
        leader = p.leader if p.leader in live else -1
        partitions.append({
            "error_code": ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
            "partition_index": index, "leader_id": leader, "leader_epoch": p.leader_epoch,
            "replica_nodes": p.replicas, "isr_nodes": p.isr,
            # gone, or (the controller says) in a failed log directory
            "offline_replicas": [r for r in p.replicas if r not in live or r in p.offline]})
    return {"error_code": ErrorCode.NONE, "name": info.name, "topic_id": info.topic_id,
            "is_internal": info.name in INTERNAL_TOPICS, "partitions": partitions}

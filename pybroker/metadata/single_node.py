"""The embedded control plane of one broker (no ZooKeeper): this broker is every broker,
the controller and the leader of every partition; the ``TopicManager`` is the store.

Metadata (key 3): every partition led here, with an ISR of this broker. Requested topics
that do not exist are created with the defaults when both ``auto.create.topics.enable``
and the request's ``allow_auto_topic_creation`` allow it, all of one request together
(one write of topics.json, logs a slice at a time), and answered once created, where
Kafka would say LEADER_NOT_AVAILABLE until a leader is elected: there is nothing to elect
here. Else UNKNOWN_TOPIC_OR_PARTITION; an illegal name gets INVALID_TOPIC_EXCEPTION.
Topics asked for by id (v10+) that do not exist get UNKNOWN_TOPIC_ID.

A partition whose last write failed in the file system less than a minute ago, nothing
written since (``Log.failing_writes``: a full disk, an I/O error), is answered with
KAFKA_STORAGE_ERROR, its leader still given: Kafka has no such state (a failed log
directory goes offline, and a single node shuts down), and this is how ``pybroker topic
describe`` and any Metadata reader see that the broker refuses writes there. Clients keep
the leader and retry: librdkafka and kafka-python/aiokafka ignore a partition's error
code in Metadata (only topic-level errors drop leaders), and Java's client treats
KafkaStorageException as invalid metadata, refreshing it while it keeps the partition.
DescribeLogDirs was the other way to say it, but it reports a whole directory offline,
no partition at a time, and confluent-kafka's admin client does not offer it. A partition
whose log directory failed (``Partition.offline``) is answered the same way until a
restart, with this broker among its offline replicas.

Topic creation (CreateTopics, auto-creation, the offsets topic): per topic, as Kafka
answers: an illegal name INVALID_TOPIC_EXCEPTION, an existing one TOPIC_ALREADY_EXISTS,
partitions <= 0 INVALID_PARTITIONS (so are more than ``MAX_PARTITIONS_PER_TOPIC``,
10,000), a replication factor other than 1 (this is one node) INVALID_REPLICATION_FACTOR,
manual assignments naming other brokers INVALID_REPLICA_ASSIGNMENT, a bad config
INVALID_CONFIG. The topics of one request are recorded together (one write of
``topics.json``) and their logs created a slice at a time
(``TopicManager.create_all_async``), so other clients are served meanwhile.

Groups: this broker coordinates every group; the existing ``__consumer_offsets``
partitions load a slice at a time while the broker serves (their groups' requests are
answered COORDINATOR_LOAD_IN_PROGRESS meanwhile, as Kafka answers after it becomes a
leader). ``__consumer_offsets`` is created on first use, as Kafka creates it: by the first
FindCoordinator (its logs a slice at a time off the loop), or on the loop by the first
write of a client that skipped FindCoordinator; an existing topic's partition count wins
over ``offsets.topic.num.partitions`` (:class:`SingleNodeInternalTopic`).

Transactions: likewise, this broker coordinates every transactional id, its
``__transaction_state`` created on first use (FindCoordinator of key type 1) with
``transaction.state.log.*``, its min.insync.replicas at most 1 (one replica).

Deletion: all the topics of a request together (``TopicManager.delete_async``: one write
of ``topics.json``, durable before the answer, the logs closed a slice at a time and their
files removed off the event loop); the group coordinator then drops the topics' committed
offsets. CreatePartitions: manual assignments must name one replica per new partition,
this broker (there is nothing else to place them on). AlterPartitionReassignments: a
move to this broker is done at once (it is where the partition is), one naming any other
broker is refused as Kafka refuses an unregistered one, a cancellation finds nothing in
progress (NO_REASSIGNMENT_IN_PROGRESS); ListPartitionReassignments lists nothing.

ElectLeaders: this broker is the preferred replica and the live leader of every
partition, so every existing one is answered ELECTION_NOT_NEEDED, preferred or unclean.

Dynamic broker configs (the cluster default and this broker's, the same thing on one
node but kept apart as Kafka reports them): ``dynamic-broker-configs.json`` in the data
dir, ``{"version":1,"brokers":{"<default>":{key: value},"<id>":{key: value}}}`` (Kafka's
``/config/brokers/<entity>`` znodes in one file), replaced durably (written to a
temporary file, fsynced, renamed) before AlterConfigs is answered, read at start.
Client quotas likewise, in ``client-quotas.json``: ``{"version":1,"quotas":[{"entity":
[[type, name or null], ...], "values": {key: value}}, ...]}``.

Not thread-safe: the event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from pybroker.broker.files import DurableJsonFile, read_json
from pybroker.broker.quotas import entity_of, stored_values
from pybroker.broker.topic_manager import (
    Topic,
    TopicManager,
    check_partition_limit,
    validate_topic_name,
)
from pybroker.coordinator import CoordinatorConfig, GroupCoordinator
from pybroker.coordinator.offset_store import OFFSETS_TOPIC, offsets_topic_config
from pybroker.errors import (
    CoordinatorNotAvailableError,
    ErrorCode,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    KafkaError,
    NoReassignmentInProgressError,
    TopicAlreadyExistsError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from pybroker.metadata.interface import (
    ELECTION_NOT_NEEDED,
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
    check_reassignment,
    missing_topic,
    no_such_partition,
)
from pybroker.net.protocol.codec import ZERO_UUID
from pybroker.security.credentials import CredentialStore, FileCredentialStore
from pybroker.security.store import AclStore, FileAclStore
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

DYNAMIC_CONFIGS_FILE = "dynamic-broker-configs.json"
CLIENT_QUOTAS_FILE = "client-quotas.json"


class SingleNodeMetadata:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._offsets_topic: SingleNodeInternalTopic | None = None  # the coordinators'
        self._txn_topic: SingleNodeInternalTopic | None = None
        # the coordinator's ``topics_deleted``, told of each deletion
        self._topics_deleted: Callable[[list[str]], None] = lambda names: None
        self._dynamic_configs = DurableJsonFile(
            os.path.join(broker.data_dir, DYNAMIC_CONFIGS_FILE))
        self._client_quotas = DurableJsonFile(os.path.join(broker.data_dir, CLIENT_QUOTAS_FILE))

    # lifecycle -------------------------------------------------------------------------

    async def join(self, cluster_id: str) -> str:
        return cluster_id

    async def follow_broker_configs(self, dynamic: DynamicBrokerConfig) -> None:
        stored = read_json(self._dynamic_configs.path, {}).get("brokers", {})
        for entity in dynamic.entities:
            dynamic.load(entity, stored.get(entity, {}))

    async def follow_client_quotas(self, quotas: ClientQuotas) -> None:
        for stored in read_json(self._client_quotas.path, {}).get("quotas", []):
            try:
                entity = entity_of(stored["entity"])
            except (KeyError, TypeError, ValueError):
                log.warning("ignoring a malformed entry of %s: %r", CLIENT_QUOTAS_FILE, stored)
                continue
            quotas.set(entity, stored_values(entity, stored.get("values", {})))

    def leads_every_partition(self) -> bool:
        return True

    def producer_id_source(self) -> Callable[[int], int] | None:
        return None

    def acl_store(self) -> AclStore:
        return FileAclStore(self._broker.data_dir)

    def credential_store(self) -> CredentialStore:
        return FileCredentialStore(self._broker.data_dir)

    def group_coordinator(self, config: CoordinatorConfig) -> GroupCoordinator:
        self._offsets_topic = offsets_topic(self._broker.topics, config)
        coordinator = GroupCoordinator(self._offsets_topic, config,
                                       partition_exists=self.partition_exists)
        coordinator.lead_every_partition()  # the existing ones load while the broker serves
        self._topics_deleted = coordinator.topics_deleted
        return coordinator

    def transaction_coordinator(self, config: TxnConfig,
                                new_producer_id: Callable[[], Awaitable[int]],
                                write_markers: MarkerWrite) -> TxnCoordinator:
        self._txn_topic = SingleNodeInternalTopic(
            self._broker.topics, TRANSACTION_STATE_TOPIC, config.state_log_num_partitions,
            transaction_topic_config(config.state_log_segment_bytes,
                                     min(1, config.state_log_min_isr)))
        coordinator = TxnCoordinator(self._txn_topic, config, new_producer_id, write_markers,
                                     self.partition_exists)
        coordinator.lead_every_partition()
        return coordinator

    async def start(self) -> None:
        pass

    async def controlled_shutdown(self) -> None:
        pass  # the only replica of everything: nobody to hand leadership to

    async def stop(self) -> None:
        pass

    # brokers ---------------------------------------------------------------------------

    @property
    def controller_id(self) -> int:
        return self._broker.broker_id

    def is_active_controller(self) -> bool:
        return True

    def offline_partition_count(self) -> int:
        return sum(p.offline for t in self._broker.topics.topics() for p in t.partitions)

    def log_dir_failed(self, partitions: list[Partition]) -> None:
        pass  # Metadata answers them KAFKA_STORAGE_ERROR; there is no other leader

    def _self(self) -> Endpoint:
        host, port = self._broker.advertised
        return Endpoint(self._broker.broker_id, host, port)

    def live_brokers(self) -> list[Endpoint]:
        return [self._self()]

    def endpoint(self, broker_id: int, listener: str) -> Endpoint | None:
        address = self._broker.listener_endpoints.get(listener)
        if broker_id != self._broker.broker_id or address is None:
            return None
        return Endpoint(broker_id, *address)

    def rack(self, broker_id: int) -> str | None:
        return self._broker.config["broker.rack"] if broker_id == self._broker.broker_id \
            else None

    def leader_of(self, topic: str, partition: int) -> Endpoint | None:
        known = self._broker.topics.get(topic)
        if known is None or not 0 <= partition < len(known.partitions):
            return None
        return self._self()

    def current_leader(self, topic: str, partition: int) -> CurrentLeader | None:
        return None  # this broker leads every partition: no other leader to name

    def on_leadership_change(self, fn: LeadershipListener) -> None:
        pass  # every partition is led here from the start

    async def coordinator_for_group(self, group_id: str) -> Endpoint | None:
        """This broker, once ``__consumer_offsets`` exists: created on first use, its logs
        off the loop (``SingleNodeInternalTopic.create``)."""
        return await self._coordinator_once_created(self._offsets_topic)

    async def coordinator_for_transaction(self, transactional_id: str) -> Endpoint | None:
        """This broker, once ``__transaction_state`` exists (created on first use)."""
        return await self._coordinator_once_created(self._txn_topic)

    async def _coordinator_once_created(self, internal: SingleNodeInternalTopic | None
                                        ) -> Endpoint | None:
        if internal is None:
            return None
        if internal.exists():
            return self._self()
        creation = asyncio.ensure_future(internal.create())
        # asyncio.wait: a cancellation of ours is never lost; the creation goes on without us
        await asyncio.wait((creation,), timeout=OFFSETS_TOPIC_CREATE_WAIT_S)
        if not creation.done():
            return None
        if creation.exception() is not None:
            log.warning("creating %s failed: %s", internal.name, creation.exception())
            return None
        return self._self()

    # topics ----------------------------------------------------------------------------

    def partition_exists(self, topic: str, index: int) -> bool:
        known = self._broker.topics.get(topic)
        return known is not None and 0 <= index < len(known.partitions)

    def partition_count(self, topic: str) -> int:
        known = self._broker.topics.get(topic)
        return len(known.partitions) if known is not None else 0

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        known = self._broker.topics.by_id(topic_id)
        return known.name if known is not None else None

    def describe_all_topics(self) -> list[TopicAnswer]:
        broker_id = self._broker.broker_id
        return [_describe(t, broker_id) for t in self._broker.topics.topics()]

    async def describe_topics(self, requested: list[RequestedTopic], allow_auto_create: bool,
                              api_version: int) -> list[TopicAnswer]:
        created = await self._auto_create(requested) if allow_auto_create else {}
        return [self._lookup(t.get("name"), t.get("topic_id"), created, api_version)
                for t in requested]

    def _lookup(self, name: str | None, topic_id: uuid.UUID | None,
                created: dict[str, CreatedTopic | KafkaError], api_version: int) -> TopicAnswer:
        topics = self._broker.topics
        if name is None:  # by id (v10+); the response's name is nullable from v12 only
            topic = topics.by_id(topic_id) if topic_id and topic_id != ZERO_UUID else None
            if topic is None:
                return missing_topic(None if api_version >= 12 else "", topic_id or ZERO_UUID,
                                     ErrorCode.UNKNOWN_TOPIC_ID)
            return _describe(topic, self._broker.broker_id)
        topic = topics.get(name)
        if topic is None:
            try:
                validate_topic_name(name)
            except KafkaError as exc:
                return missing_topic(name, ZERO_UUID, exc.code)
            failed = created.get(name)
            return missing_topic(name, ZERO_UUID, failed.code if isinstance(failed, KafkaError)
                                 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return _describe(topic, self._broker.broker_id)

    async def _auto_create(self, requested: list[RequestedTopic]
                           ) -> dict[str, CreatedTopic | KafkaError]:
        """Create the unknown topics named in the request, all together (one write of
        topics.json, logs a slice at a time) if ``auto.create.topics.enable``; the
        outcome by name."""
        if not self._broker.config["auto.create.topics.enable"]:
            return {}
        topics = self._broker.topics
        unknown = []
        for name in dict.fromkeys(t.get("name") for t in requested):
            if name is not None and topics.get(name) is None:
                try:
                    validate_topic_name(name)
                except KafkaError:
                    continue  # answered INVALID_TOPIC_EXCEPTION
                unknown.append(name)
        if not unknown:
            return {}
        created = await self.create_topics([NewTopic(name) for name in unknown])
        return dict(zip(unknown, created, strict=True))

    async def create_topics(self, topics: list[NewTopic], validate_only: bool = False
                            ) -> list[CreatedTopic | KafkaError]:
        manager = self._broker.topics
        results: list[CreatedTopic | KafkaError | None] = []
        creating: list[tuple[int, tuple[str, int, int, dict[str, str | None]]]] = []
        for new in topics:
            try:
                partitions, replication = new.partitions, new.replication_factor
                if new.assignment is not None:
                    partitions, replication = self._from_assignment(new.assignment)
                configs = new.configs or {}
                if validate_only:
                    partitions, _, overrides = manager.check_new(new.name, partitions,
                                                                 replication, configs)
                    results.append(CreatedTopic(ZERO_UUID, partitions, replication, overrides))
                else:
                    creating.append((len(results), (new.name, partitions, replication, configs)))
                    results.append(None)
            except KafkaError as exc:
                results.append(exc)
        if creating:
            created = await manager.create_all_async([request for _, request in creating])
            for (slot, _), topic in zip(creating, created, strict=True):
                results[slot] = topic if isinstance(topic, KafkaError) else CreatedTopic(
                    topic.topic_id, manager.partition_count(topic), 1, topic.overrides)
        return [r for r in results if r is not None]

    def _from_assignment(self, assignment: list[tuple[int, list[int]]]) -> tuple[int, int]:
        """(partitions, replication factor) of a manual assignment, checked against this
        node."""
        indexes = sorted(index for index, _ in assignment)
        if indexes != list(range(len(indexes))):
            raise InvalidReplicaAssignmentError("Partitions should be a consecutive 0-based "
                                                "integer sequence")
        for index, broker_ids in assignment:
            if broker_ids != [self._broker.broker_id]:
                raise InvalidReplicaAssignmentError(
                    f"Unknown broker(s) or replication factor other than 1 in assignment "
                    f"{broker_ids} of partition {index}")
        return len(indexes), 1

    async def delete_topics(self, targets: list[tuple[str | None, uuid.UUID]]
                            ) -> list[DeletedTopic | KafkaError]:
        topics = self._broker.topics
        results: list[DeletedTopic | KafkaError] = []
        deleting: dict[str, None] = {}  # names, in request order
        for name, topic_id in targets:
            topic: Topic | None = topics.get(name) if name is not None else topics.by_id(topic_id)
            if topic is None or topic.name in deleting:  # (by name and by id: deleted once)
                results.append(
                    UnknownTopicIdError(f"Topic id {topic_id} does not exist.")
                    if name is None else UnknownTopicOrPartitionError(
                        f"Topic '{name}' does not exist."))
                continue
            deleting[topic.name] = None
            results.append(DeletedTopic(topic.name, topic.topic_id))
        if deleting:
            await topics.delete_async(list(deleting))
            self._topics_deleted(list(deleting))
        return results

    async def create_partitions(self, name: str, count: int,
                                assignments: list[PartitionAssignment] | None,
                                validate_only: bool) -> None:
        topics = self._broker.topics
        topic = topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        current = topics.partition_count(topic)
        if count < current:
            raise InvalidPartitionsError(f"The topic {name} currently has {current} "
                                         f"partition(s); {count} would not be an increase.")
        if count == current:
            raise InvalidPartitionsError(f"Topic already has {current} partition(s).")
        if assignments is not None:
            self._check_new_assignments(count - current, assignments)
        check_partition_limit(count)
        if not validate_only:
            await topics.add_partitions_async(name, count)

    def _check_new_assignments(self, added: int, assignments: list[PartitionAssignment]) -> None:
        if len(assignments) != added:
            raise InvalidReplicaAssignmentError(
                f"Attempted to add {added} additional partition(s), but only "
                f"{len(assignments)} assignment(s) were specified.")
        for assignment in assignments:
            replicas = assignment.get("broker_ids") or []
            for replica in replicas:
                if replica != self._broker.broker_id:
                    raise InvalidReplicaAssignmentError(
                        f"The manual partition assignment includes broker {replica}, but no "
                        "such broker is registered.")
            if len(replicas) != 1:
                raise InvalidReplicaAssignmentError(
                    f"The manual partition assignment includes a partition with "
                    f"{len(replicas)} replica(s), but this is not consistent with previous "
                    "partitions, which have 1 replica(s).")

    async def elect_leaders(self, election_type: int, partitions: list[tuple[str, int]] | None,
                            timeout_s: float) -> dict[tuple[str, int], ElectionResult]:
        topics = self._broker.topics
        if partitions is None:
            partitions = [(t.name, p) for t in topics.topics() for p in range(len(t.partitions))]
        # this broker is the first (only) replica and the leader of every partition
        return {(name, index): ELECTION_NOT_NEEDED if self.partition_exists(name, index)
                else no_such_partition(name, index, topics.get(name) is not None)
                for name, index in partitions}

    async def alter_partition_reassignments(self, targets: list[ReassignmentTarget]
                                            ) -> list[KafkaError | None]:
        """Every partition is on this broker, which is the only one: a move to it is done
        as it is asked, any other is refused, and nothing is ever in progress."""
        return [self._reassignment(*target) for target in targets]

    def _reassignment(self, name: str, index: int, replicas: list[int] | None
                      ) -> KafkaError | None:
        topic = self._broker.topics.get(name)
        if topic is None:
            return UnknownTopicOrPartitionError(f"Unable to find a topic named {name}.")
        if not 0 <= index < self._broker.topics.partition_count(topic):
            return UnknownTopicOrPartitionError(f"Unable to find partition {name}:{index}.")
        if replicas is None:
            return NoReassignmentInProgressError()
        try:
            check_reassignment(replicas, {self._broker.broker_id})
        except KafkaError as exc:
            return exc
        return None

    async def list_partition_reassignments(self, partitions: list[tuple[str, int]] | None
                                           ) -> list[OngoingReassignment]:
        return []

    async def topic_configs(self, name: str) -> dict[str, str]:
        topic = self._broker.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        return dict(topic.overrides)

    async def alter_topic_configs(self, name: str, overrides: dict[str, str]) -> None:
        self._broker.topics.alter_configs(name, overrides)

    async def alter_broker_configs(self, entity: str, configs: dict[str, str]) -> None:
        dynamic = self._broker.dynamic_config
        dynamic.update(entity, configs)
        # the layers as they are now: of two changes in flight, the later write holds both
        await self._dynamic_configs.write_async(
            {"version": 1, "brokers": {e: dynamic.layer(e) for e in dynamic.entities}})

    async def alter_client_quotas(self, changes: dict[Entity, dict[str, float]]) -> None:
        quotas = self._broker.quotas
        for entity, values in changes.items():
            quotas.set(entity, values)
        # all of them as they are now: of two changes in flight, the later write holds both
        await self._client_quotas.write_async({"version": 1, "quotas": [
            {"entity": entity, "values": values}
            for entity, values in quotas.entities().items()]})


class SingleNodeInternalTopic:
    """A coordinator's internal topic on one node (``__consumer_offsets``,
    ``__transaction_state``; the coordinators' ``InternalTopic``): every partition led
    here; created on first use, its partition count the existing topic's, else the
    configured one."""

    def __init__(self, topics: TopicManager, name: str, partitions: int,
                 config: dict[str, str]) -> None:
        self._topics = topics
        self.name = name
        existing = topics.get(name)
        self._count = len(existing.partitions) if existing is not None and existing.partitions \
            else partitions
        self._creation: asyncio.Future[None] | None = None  # ``create``'s, while it runs
        self._config: dict[str, str | None] = {**config}

    def partition_count(self) -> int:
        return self._count

    def local(self) -> Topic | None:
        return self._topic(create=False)

    def writable(self, index: int) -> Partition:
        topic = self._topic(create=True)
        assert topic is not None  # created
        return topic.partitions[index]

    def _topic(self, create: bool) -> Topic | None:
        """The topic with all its partitions (None if absent and not ``create``).

        A topic recorded with no partitions (metadata saved, logs not yet attached when the
        broker stopped) is grown back to its count; the logs it had are picked up again."""
        topic = self._topics.get(self.name)
        if topic is None:
            if not create:
                return None
            # A client that skipped FindCoordinator: created here, on the loop
            return self._topics.create(self.name, self._count, 1, self._config)
        if len(topic.partitions) < self._topics.partition_count(topic):
            if not create:
                return topic
            raise CoordinatorNotAvailableError(f"{self.name} is being created")
        if not topic.partitions:
            log.warning("%s has no partitions; restoring %d", self.name, self._count)
            self._topics.add_partitions(self.name, self._count)
        return self._topics.get(self.name)

    def exists(self) -> bool:
        """Whether the topic exists with all its logs."""
        return self._creation is None and self._topics.get(self.name) is not None

    async def create(self) -> None:
        """Create the topic if it does not exist, its logs a slice at a time off the loop:
        50 partitions created at once held every client ~65 ms. Concurrent callers share
        one creation; a caller that goes away leaves it running. Raises ``KafkaError`` if
        the creation failed (a full disk)."""
        if self._creation is None:
            if self._topics.get(self.name) is not None:
                return
            self._creation = asyncio.ensure_future(self._create())
        await asyncio.shield(self._creation)

    async def _create(self) -> None:
        try:
            [created] = await self._topics.create_all_async(
                [(self.name, self._count, 1, dict(self._config))])
        finally:
            self._creation = None
        # TOPIC_ALREADY_EXISTS: created by a client that skipped FindCoordinator (``_topic``)
        if isinstance(created, KafkaError) and not isinstance(created, TopicAlreadyExistsError):
            raise created


def offsets_topic(topics: TopicManager, config: CoordinatorConfig) -> SingleNodeInternalTopic:
    """``__consumer_offsets`` on one node, as ``offsets.topic.*`` configure it."""
    return SingleNodeInternalTopic(topics, OFFSETS_TOPIC, config.offsets_topic_num_partitions,
                                   offsets_topic_config(config.offsets_topic_segment_bytes))


def _describe(topic: Topic, broker_id: int) -> TopicAnswer:
    replicas = [broker_id]
    return {
        "error_code": ErrorCode.NONE, "name": topic.name, "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": [{"error_code": ErrorCode.KAFKA_STORAGE_ERROR
                        if p.offline or (p.log.write_failed_at >= 0 and p.log.failing_writes())
                        else ErrorCode.NONE,
                        "partition_index": p.index,
                        "leader_id": broker_id, "leader_epoch": p.leader_epoch,
                        "replica_nodes": replicas, "isr_nodes": replicas,
                        "offline_replicas": replicas if p.offline else []}
                       for p in topic.partitions],
    }

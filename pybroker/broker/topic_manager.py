"""Topics of this broker: names, ids, partition counts and config overrides, persisted.

``topics.json`` in the data dir holds, per topic, its id (a UUID, as Kafka's topic ids),
partition count and config overrides; it is replaced atomically on every change and written
*before* a new partition's log is created, so a crash never leaves a log no topic owns.
The logs themselves are the LogManager's (``<data_dir>/<topic>-<partition>``).

Effective topic config = Kafka's default < broker default (``BrokerConfig.topic_defaults``)
< topic override; see :mod:`pybroker.broker.topic_config`. A dynamic change of a broker
default reaches every open log at once (:meth:`TopicManager.reconfigure`).

Creating many partitions or topics: each new log costs file creation and a directory
fsync (several ms on a real disk; 5000 partitions took 10-20 s), and rewriting
``topics.json`` costs a write and two fsyncs. So one request (CreateTopics, a Metadata
request auto-creating topics, CreatePartitions) writes ``topics.json`` once for all the
topics it creates (:meth:`TopicManager.create_all_async`,
:meth:`add_partitions_async`), then creates their logs across all of them on a thread,
``GROW_BATCH`` at a time: other clients are served meanwhile and see the partitions
appear, as they see Kafka's partitions get leaders one by one. The declared
count (``partition_count``) is what ``topics.json`` holds and what requests are checked
against while the logs are being created; a broker stopped in the middle creates the rest
at its next start. A request may not make a topic larger than ``MAX_PARTITIONS_PER_TOPIC``
(INVALID_PARTITIONS).

Deleting topics (:meth:`delete_async`): one request's topics are unknown to every request
at once (waiting fetches are woken) and durably gone from ``topics.json`` (one write)
before it is answered; their logs are then closed and handed to the LogManager a slice at
a time, which renames and removes the directories off the loop. Until those renames are
durable ``topics.json`` lists the names under ``deleting``, so a log found at start under
such a name is deleted rather than adopted as an orphan; a topic created again under the
name first finishes that (``_claim_name``).

Leadership is the control plane's (:mod:`pybroker.metadata`, which says at construction
whether this broker ``leads_every_partition``). A single node does: a new partition gets
its log at once and leads it, and what survived recovery is committed. A cluster member
does not (docs/REPLICATION.md): ZooKeeper holds the topics; this manager holds the
partitions this broker has a replica of. The controller's LeaderAndIsr creates them
(:meth:`TopicManager.ensure_replica`); the others of a topic are placeholders (a
``Partition`` with no log, never leader) so handlers answer NOT_LEADER_OR_FOLLOWER for
them. ``topics.json`` still lists the local topics, so a restart reopens their logs; the
logs start as neither leader nor follower until the controller speaks, with the high
watermark of the last checkpoint.

Not thread-safe: used from the event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pybroker.broker import collector, topic_config
from pybroker.broker.files import DurableJsonFile, read_json
from pybroker.broker.partition import Partition
from pybroker.config import BrokerConfig
from pybroker.errors import (
    FencedLeaderEpochError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    KafkaError,
    KafkaStorageError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    TopicAlreadyExistsError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from pybroker.log.log_config import LogConfig
from pybroker.log.log_manager import LogManager

log = logging.getLogger("pybroker.topics")

FILE_NAME = "topics.json"
MAX_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")
# Kafka has no built-in limit; a create policy would answer POLICY_VIOLATION. Ten thousand
# partitions of one topic is far beyond what one node serves well, and a typo (1e6) would
# otherwise create a million directories before anyone could stop it.
MAX_PARTITIONS_PER_TOPIC = 10_000
GROW_BATCH = 16  # partition logs created per hand-off to a thread
DELETE_SLICE_S = 0.001  # longest the event loop is held closing deleted logs (~70 us each)
CHECK_SLICE_S = 0.001  # longest the event loop is held checking a request's new topics
# Kafka's internal topics (``Topic.isInternal``): written by the broker only. A name that
# merely starts with "__" is an ordinary topic, as in Kafka.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
# a topic to create: (name, partitions, replication factor, configs); -1: the default
NewTopic = tuple[str, int, int, dict[str, str | None]]


_NO_OVERRIDES: dict[str, str] = {}


def validate_topic_name(name: str | None) -> None:
    """Kafka's rules (``org.apache.kafka.common.internals.Topic.validate``)."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError("Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicError(f"Topic name is longer than {MAX_NAME_LENGTH} characters")
    if not _LEGAL_NAME.fullmatch(name):
        raise InvalidTopicError(f"Topic name \"{name}\" is illegal, it contains a character "
                                "other than ASCII alphanumerics, '.', '_' and '-'")


def check_partition_limit(partitions: int) -> None:
    if partitions > MAX_PARTITIONS_PER_TOPIC:
        raise InvalidPartitionsError(
            f"Number of partitions {partitions} is larger than the limit of "
            f"{MAX_PARTITIONS_PER_TOPIC} partitions per topic on this broker.")


def check_leader(partition: Partition, current_leader_epoch: int = -1) -> None:
    if partition.offline:
        raise KafkaStorageError(f"{partition.topic}-{partition.index} is in an offline "
                                f"log directory")
    if not partition.is_leader:
        raise NotLeaderOrFollowerError(f"This broker is not the leader of {partition.topic}-"
                                       f"{partition.index}")
    if current_leader_epoch >= 0 and current_leader_epoch != partition.leader_epoch:
        if current_leader_epoch < partition.leader_epoch:
            raise FencedLeaderEpochError(
                f"{partition.topic}-{partition.index}: leader epoch {current_leader_epoch} "
                f"is older than the current {partition.leader_epoch}")
        raise UnknownLeaderEpochError(
            f"{partition.topic}-{partition.index}: leader epoch {current_leader_epoch} is "
            f"newer than this broker's {partition.leader_epoch}")


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    overrides: dict[str, str]
    partitions: list[Partition] = field(default_factory=list)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class TopicManager:
    def __init__(self, config: BrokerConfig, log_manager: LogManager,
                 leads_every_partition: bool = True) -> None:
        self.config = config
        self.logs = log_manager
        self._path = os.path.join(config.data_dir, FILE_NAME)
        self._file = DurableJsonFile(self._path)
        self._topics: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}
        self._stored: dict[str, tuple[Topic, int]] = {}
        self.broker_defaults = config.topic_defaults()
        self.broker_default_sources = config.topic_default_sources()
        # The config of a topic without overrides, made once: building one costs ~30 us,
        # describing one ~13 us, and a request creating 2,000 topics did both for each
        # in one step of the event loop. (Not at start: bad defaults fail a creation.)
        self._default_log_config: LogConfig | None = None
        self._default_described: list[tuple[str, str, int]] | None = None
        # topics whose logs are being created: name -> partition count declared
        self._growing: dict[str, int] = {}
        self._growth = asyncio.Lock()  # one _grow_async at a time
        # deleted topics: partitions whose logs are still to be deleted, and the names
        # whose directories a crash could still bring back (listed in topics.json)
        self._dropping: dict[str, list[Partition]] = {}
        self._deleting: set[str] = set()
        self.leads_every_partition = leads_every_partition
        self.broker_id = config.broker_id
        self.stopping = False  # broker shutdown: growing topics stop, the next start ends them

    # queries --------------------------------------------------------------------------

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def overrides_of(self, name: str) -> dict[str, str]:
        """The config overrides of topic ``name`` (not to be changed); none if unknown."""
        topic = self._topics.get(name)
        return topic.overrides if topic is not None else _NO_OVERRIDES

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def topics(self) -> list[Topic]:
        return list(self._topics.values())

    def partition(self, name: str, index: int) -> Partition:
        topic = self._topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            raise UnknownTopicOrPartitionError(f"{name}-{index}")
        return topic.partitions[index]

    def leader_for_write(self, name: str, index: int, all_in_sync: bool,
                         exists_in_cluster: Callable[[str, int], bool]) -> Partition:
        """The partition if this broker may append to it now (produce, transaction
        markers), else the ``KafkaError`` to answer: UNKNOWN_TOPIC_OR_PARTITION where the
        cluster has no such partition, NOT_LEADER_OR_FOLLOWER where another broker leads
        it, and with ``all_in_sync`` (acks=all) NOT_ENOUGH_REPLICAS while the ISR is below
        ``min.insync.replicas``."""
        try:
            partition = self.partition(name, index)
        except UnknownTopicOrPartitionError:
            if exists_in_cluster(name, index):  # no replica here: another broker leads it
                raise NotLeaderOrFollowerError(
                    f"This broker is not the leader of {name}-{index}") from None
            raise
        if partition.offline:
            raise KafkaStorageError(f"{name}-{index} is in an offline log directory")
        if not partition.is_leader or partition.log is None:
            raise NotLeaderOrFollowerError(f"This broker is not the leader of {name}-{index}")
        if all_in_sync and len(partition.isr) < partition.config.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"The size of the current ISR {len(partition.isr)} is insufficient to "
                f"satisfy the min.isr requirement of {partition.config.min_insync_replicas} "
                f"for partition {name}-{index}")
        return partition

    def led_partition(self, name: str, index: int, current_leader_epoch: int = -1) -> Partition:
        """The partition if this broker leads it, in the client's leader epoch if it names
        one (KIP-320: -1 names none): else NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH (the
        client's epoch is older) or UNKNOWN_LEADER_EPOCH (newer than ours)."""
        partition = self.partition(name, index)
        check_leader(partition, current_leader_epoch)
        return partition

    def take_offline(self, keys: list[tuple[str, int]]) -> list[Partition]:
        """The partitions of ``keys`` (their log directory failed) answer
        KAFKA_STORAGE_ERROR from now on; their waiting fetches answer now."""
        offline = []
        for name, index in keys:
            topic = self._topics.get(name)
            if topic is None or index >= len(topic.partitions):
                continue
            partition = topic.partitions[index]
            partition.offline = True
            partition.wake()
            offline.append(partition)
        return offline

    def partitions(self) -> list[Partition]:
        """The partitions this broker has a log of (in cluster mode: a replica of)."""
        return [p for t in self._topics.values() for p in t.partitions if p.log is not None]

    def partition_count(self, topic: Topic) -> int:
        """Partitions declared, including those whose logs are still being created."""
        return self._growing.get(topic.name, len(topic.partitions))

    def effective_config(self, overrides: dict[str, str]) -> dict[str, str]:
        """A topic's configs: these overrides over the broker's defaults."""
        return topic_config.effective(self.broker_defaults, overrides)

    def describe_config(self, overrides: dict[str, str]) -> list[tuple[str, str, int]]:
        """(key, effective value, config_source) of every topic config (not to be
        changed: a topic without overrides gets a shared list)."""
        if overrides:
            return topic_config.describe(self.broker_defaults, overrides,
                                         self.broker_default_sources)
        if self._default_described is None:
            self._default_described = topic_config.describe(self.broker_defaults, {},
                                                            self.broker_default_sources)
        return self._default_described

    def log_config(self, overrides: dict[str, str]) -> LogConfig:
        if overrides:
            return topic_config.log_config(self.broker_defaults, overrides)
        if self._default_log_config is None:
            self._default_log_config = topic_config.log_config(self.broker_defaults, {})
        return self._default_log_config

    def reconfigure(self, config: BrokerConfig) -> None:
        """New broker-wide topic defaults (a dynamic broker config changed): every open
        log of a topic gets its effective config again (segment and index sizes apply from
        its next roll, as for a topic's own change)."""
        self.config = config
        self.broker_defaults = config.topic_defaults()
        self.broker_default_sources = config.topic_default_sources()
        self._default_log_config = None
        self._default_described = None
        for topic in self._topics.values():
            log_config = self.log_config(topic.overrides)
            for partition in topic.partitions:
                if partition.log is not None:
                    partition.log.update_config(log_config)

    # persistence ----------------------------------------------------------------------

    def read(self) -> None:
        """Read ``topics.json`` (before the logs load: they need each topic's config)."""
        data = read_json(self._path, {"topics": {}})
        self._deleting = set(data.get("deleting", ()))
        self._stored = {name: (Topic(name, uuid.UUID(item["id"]),
                                     dict(item.get("configs", {}))), int(item["partitions"]))
                        for name, item in data["topics"].items()}

    def config_for(self, name: str) -> LogConfig:
        stored = self._stored.get(name)
        return self.log_config(stored[0].overrides if stored else {})

    def open(self) -> None:
        """Attach the loaded logs to their topics. A log no topic claims (a crash between
        saving ``topics.json`` and creating or deleting the log) is adopted, not deleted:
        losing data to a lost metadata write would be worse than keeping a topic."""
        for topic, partitions in self._stored.values():
            self._add(topic, partitions)
        orphans: dict[str, int] = {}
        for (name, index), _ in self.logs.logs():
            if name in self._deleting and name not in self._topics:
                log.info("deleting the log of %s-%d: its topic was deleted", name, index)
                self.logs.delete(name, index)
            elif name not in self._topics:
                orphans[name] = max(orphans.get(name, 0), index + 1)
        for name, partitions in orphans.items():
            log.warning("adopting logs of topic %s, missing from %s", name, FILE_NAME)
            self._add(Topic(name, uuid.uuid4(), {}), partitions)
        if orphans:
            self._save()
        if self.leads_every_partition:
            for partition in self.partitions():
                # One node: everything that survived recovery is committed.
                partition.log.high_watermark = partition.log.log_end_offset
        self._stored = {}

    def _save(self) -> None:
        """Write ``topics.json`` with the declared partition counts (saved before new logs
        exist, so a crash never leaves a log no topic owns) and the deleted topics whose
        directories could still come back after a crash (``open`` deletes them then)."""
        self._file.write(self._contents())

    async def _save_async(self) -> None:
        """``_save`` for requests: the contents of now, written durably by a thread."""
        await self._file.write_async(self._contents())

    def _contents(self) -> dict[str, Any]:
        self._deleting = {name for name in self._deleting
                          if name in self._dropping or self.logs.deletion_pending(name)}
        data: dict[str, Any] = {"version": 1, "topics": {
            t.name: {"id": str(t.topic_id), "partitions": self.partition_count(t),
                     "configs": t.overrides} for t in self._topics.values()}}
        if self._deleting:
            data["deleting"] = sorted(self._deleting)
        return data

    def _add(self, topic: Topic, partitions: int) -> None:
        """A topic found at start, with its partitions."""
        self._topics[topic.name] = topic
        self._by_id[topic.topic_id] = topic
        self._grow(topic, partitions, existing=True)

    def _grow(self, topic: Topic, partitions: int, existing: bool = False) -> None:
        config = self.log_config(topic.overrides)
        for index in range(len(topic.partitions), partitions):
            self._add_partition(topic, index, config, existing)
        self.logs.sync_log_dirs()

    def _add_partition(self, topic: Topic, index: int, config: LogConfig,
                       existing: bool = False) -> None:
        # One directory fsync for all the partitions a request creates, not one per
        # partition: topics.json already holds the partition count, and a log lost
        # before the sync is created again at the next start.
        if not self.leads_every_partition:  # the logs this broker has; the controller adds others
            plog = self.logs.get(topic.name, index)
            topic.partitions.append(Partition(topic.name, index, plog, self.broker_id,
                                              is_leader=False, internal=topic.internal))
            return
        if existing and self.logs.get(topic.name, index) is None and self.logs.offline_dirs:
            # its log may be in a directory offline since the start: an empty one created
            # elsewhere would serve as if its records were gone (Kafka refuses likewise)
            lost = Partition(topic.name, index, None, self.broker_id, internal=topic.internal)
            lost.offline = True
            topic.partitions.append(lost)
            return
        plog = self.logs.get_or_create(topic.name, index, config, sync_dir=False)
        topic.partitions.append(Partition(topic.name, index, plog, self.broker_id,
                                          internal=topic.internal))

    def ensure_replica(self, name: str, topic_id: uuid.UUID, index: int,
                       overrides: dict[str, str], is_new: bool = True) -> Partition:
        """Cluster mode: the partition ``index`` of topic ``name``, with a log on this
        broker (created if missing; the topic too, with ZooKeeper's id and configs).
        A replica that is not new (LeaderAndIsr's ``is_new``) and has no log while a log
        directory is offline may have it there: KAFKA_STORAGE_ERROR, as Kafka."""
        topic = self._topics.get(name)
        if topic is not None and topic.topic_id != topic_id:
            log.warning("topic %s has a new id %s (was %s): deleting the old local logs",
                        name, topic_id, topic.topic_id)
            self.delete(name)
            topic = None
        changed = False
        if topic is None:
            self._claim_name(name)
            topic = Topic(name, topic_id, dict(overrides))
            self._topics[name] = topic
            self._by_id[topic_id] = topic
            changed = True
        elif topic.overrides != overrides:
            topic.overrides = dict(overrides)
            config = self.log_config(topic.overrides)
            for partition in topic.partitions:
                if partition.log is not None:
                    partition.log.update_config(config)
            changed = True
        while len(topic.partitions) <= index:
            topic.partitions.append(Partition(name, len(topic.partitions), None,
                                              self.broker_id, is_leader=False,
                                              internal=topic.internal))
            changed = True
        partition = topic.partitions[index]
        if changed:
            self._save()
        if partition.log is None and not is_new and self.logs.offline_dirs:
            raise KafkaStorageError(f"{name}-{index}: no log, and log directories "
                                    f"{sorted(self.logs.offline_dirs)} are offline")
        if partition.log is None:
            if self.logs.deletion_pending(name):  # a replica of it dropped here before
                self.logs.finish_deletions(name)
            partition.log = self.logs.get_or_create(name, index, self.log_config(
                topic.overrides), sync_dir=True)
            log.info("created the replica of %s-%d", name, index)
        return partition

    def drop_replica(self, name: str, index: int) -> None:
        """Cluster mode: this broker no longer hosts ``name``-``index`` (a reassignment
        moved it away): its log is deleted as a deleted topic's are, and the partition
        becomes a placeholder, as for a replica this broker never had (fetches waiting on
        the old one are woken and drop it)."""
        topic = self._topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions) or \
                topic.partitions[index].log is None:
            return
        old = topic.partitions[index]
        old.deleted = True
        old.wake()
        topic.partitions[index] = Partition(name, index, None, self.broker_id,
                                            is_leader=False, internal=topic.internal)
        self.logs.delete(name, index)
        log.info("deleted the replica of %s-%d", name, index)

    def _declare(self, topics: list[tuple[Topic, int]]) -> None:
        """Record that each topic has that many partitions; the caller saves (one write
        of ``topics.json`` for all) before their logs are created."""
        for topic, partitions in topics:
            self._claim_name(topic.name)
            self._topics[topic.name] = topic
            self._by_id[topic.topic_id] = topic
            self._growing[topic.name] = partitions

    def _claim_name(self, name: str) -> None:
        """A topic takes ``name``: if a deleted topic had it, that topic's logs are
        deleted now and the renames of their directories made durable, so neither the new
        logs nor a restart after a crash find the old data under the name."""
        if name not in self._deleting:
            return
        self._drop_logs(name, self._dropping.pop(name, []))
        self.logs.finish_deletions(name)
        self._deleting.discard(name)

    async def _grow_async(self, topics: list[Topic], created: bool = False) -> None:
        """Create the declared logs of ``topics``, ``GROW_BATCH`` at a time on a thread
        (``LogManager.new_log``): other clients are served meanwhile and see the
        partitions appear. ``created``: log each topic's creation once its logs exist.
        One growth at a time: a second request growing the same topic finds the work
        done or goes on from where the first stopped."""
        async with self._growth:
            for topic in topics:
                config = self.log_config(topic.overrides)
                while (not self.stopping and self._topics.get(topic.name) is topic
                       and len(topic.partitions) < self._growing.get(topic.name, 0)):
                    await self._add_partitions(topic, config)
                if created and self._topics.get(topic.name) is topic:
                    self._log_created(topic)
            # Once, at the end and on a thread: fsyncing a log directory took up to
            # 65 ms with other writers on the disk.
            await asyncio.to_thread(self.logs.sync_log_dirs)
        for topic in topics:
            if not self.stopping and self._topics.get(topic.name) is topic and \
                    len(topic.partitions) >= self._growing.get(topic.name, 0):
                self._growing.pop(topic.name, None)

    async def _add_partitions(self, topic: Topic, config: LogConfig) -> None:
        """The next ``GROW_BATCH`` declared partitions of ``topic``, their logs' files
        created on a thread. A topic deleted meanwhile has the new logs deleted too."""
        start = len(topic.partitions)
        indexes = range(start, min(self._growing[topic.name], start + GROW_BATCH))
        if not self.leads_every_partition:
            for index in indexes:
                self._add_partition(topic, index, config)
            return
        name = topic.name
        new = await asyncio.to_thread(
            lambda: [self.logs.new_log(name, index, config) for index in indexes])
        alive = self._topics.get(name) is topic and len(topic.partitions) == start
        for index, created in zip(indexes, new, strict=True):
            plog = self.logs.adopt(name, index, created)
            if alive:
                topic.partitions.append(Partition(name, index, plog, self.broker_id,
                                                  internal=topic.internal))
            else:
                self.logs.delete(name, index)
        collector.freeze_long_lived()

    # changes --------------------------------------------------------------------------

    def check_new(self, name: str, partitions: int, replication_factor: int,
                  configs: dict[str, str | None], live_brokers: int = 1,
                  exists: bool | None = None) -> tuple[int, int, dict[str, str]]:
        """Validate a topic creation; (partitions, replication factor, overrides) with the
        defaults resolved. ``live_brokers`` bounds the replication factor (one here;
        cluster mode passes its count, and ``exists``: whether ZooKeeper has the name)."""
        validate_topic_name(name)
        if name in self._topics if exists is None else exists:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        if partitions == -1:
            partitions = self.config["num.partitions"]
        if partitions <= 0:
            raise InvalidPartitionsError("Number of partitions must be larger than 0.")
        check_partition_limit(partitions)
        if replication_factor == -1:
            replication_factor = self.config["default.replication.factor"]
        if replication_factor <= 0:
            raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
        if replication_factor > live_brokers:
            raise InvalidReplicationFactorError(
                f"Replication factor: {replication_factor} larger than available brokers: "
                f"{live_brokers}.")
        overrides = topic_config.validate(configs)
        self.log_config(overrides)  # with the broker defaults too (e.g. segment sizes)
        return partitions, replication_factor, overrides

    def create(self, name: str, partitions: int = -1, replication_factor: int = -1,
               configs: dict[str, str | None] | None = None) -> Topic:
        """Create a topic and all its logs at once (internal topics)."""
        [topic] = self._declare_new([(name, partitions, replication_factor, configs or {})])
        if isinstance(topic, KafkaError):
            raise topic
        self._save()
        self._grow(topic, self._growing.pop(name))
        self._log_created(topic)
        return topic

    async def create_all_async(self, requests: list[NewTopic]) -> list[Topic | KafkaError]:
        """Create topics (the single node's ``create_topics``): each one checked, its error
        returned in its place; the valid ones recorded with one write of ``topics.json``,
        then their logs created a slice at a time across all of them."""
        declared = await self._declare_new_async(requests)
        topics = [t for t in declared if isinstance(t, Topic)]
        if topics:
            await self._save_async()
        await self._grow_async(topics, created=True)
        return declared

    def _declare_new(self, requests: list[NewTopic]) -> list[Topic | KafkaError]:
        """Check each new topic; declare the valid ones (``_declare``)."""
        results: list[Topic | KafkaError] = []
        declared: list[tuple[Topic, int]] = []
        names: set[str] = set()
        for request in requests:
            self._check_one(request, names, results, declared)
        if declared:
            self._declare(declared)
        return results

    async def _declare_new_async(self, requests: list[NewTopic]) -> list[Topic | KafkaError]:
        """``_declare_new`` giving the loop back every ``CHECK_SLICE_S`` (2,000 topics of
        one request take ~15 ms to check); the names are declared together at the end, so
        a name twice in the same window is still refused."""
        results: list[Topic | KafkaError] = []
        declared: list[tuple[Topic, int]] = []
        names: set[str] = set()
        resumed = time.monotonic()
        for request in requests:
            self._check_one(request, names, results, declared)
            if time.monotonic() - resumed >= CHECK_SLICE_S:
                await asyncio.sleep(0)
                resumed = time.monotonic()
        # Checked against the names known then: another request may have declared one
        # of them while this one gave the loop back.
        for i, result in enumerate(results):
            if isinstance(result, Topic) and result.name in self._topics:
                results[i] = TopicAlreadyExistsError(f"Topic '{result.name}' already exists.")
        declared = [(t, n) for t, n in declared if t.name not in self._topics]
        if declared:
            self._declare(declared)
        return results

    def _check_one(self, request: NewTopic, names: set[str],
                   results: list[Topic | KafkaError],
                   declared: list[tuple[Topic, int]]) -> None:
        name, partitions, replication_factor, configs = request
        try:
            partitions, _, overrides = self.check_new(
                name, partitions, replication_factor, configs,
                exists=name in self._topics or name in names)
        except KafkaError as exc:
            results.append(exc)
            return
        topic = Topic(name, uuid.uuid4(), overrides)
        names.add(name)
        declared.append((topic, partitions))
        results.append(topic)

    def _log_created(self, topic: Topic) -> None:
        log.info("created topic %s with %d partitions, id %s%s", topic.name,
                 self.partition_count(topic), topic.topic_id,
                 f", configs {topic.overrides}" if topic.overrides else "")

    def add_partitions(self, name: str, total: int) -> Topic:
        topic = self._check_growth(name, total)
        self._declare([(topic, total)])
        self._save()
        self._grow(topic, self._growing.pop(name))
        return topic

    async def add_partitions_async(self, name: str, total: int) -> Topic:
        """Grow a topic to ``total`` partitions, a slice at a time (CreatePartitions)."""
        topic = self._check_growth(name, total)
        self._declare([(topic, total)])
        await self._save_async()
        await self._grow_async([topic])
        return topic

    def _check_growth(self, name: str, total: int) -> Topic:
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        current = self.partition_count(topic)
        if total <= current:
            raise InvalidPartitionsError(
                f"Topic currently has {current} partitions, {total} would not be an increase.")
        check_partition_limit(total)
        return topic

    def alter_configs(self, name: str, overrides: dict[str, str]) -> Topic:
        """Replace the topic's overrides (validated); open logs get the new config."""
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        overrides = topic_config.validate(overrides)
        config = self.log_config(overrides)
        topic.overrides = overrides
        self._save()
        for partition in topic.partitions:
            if partition.log is not None:
                partition.log.update_config(config)
        return topic

    async def delete_async(self, names: list[str]) -> None:
        """Delete topics (distinct names, all existing: DeleteTopics): unknown to every
        request and durable in ``topics.json`` (one write) at once, then their logs
        closed and handed to the LogManager a slice at a time."""
        forgotten = self._forget(names)
        await self._save_async()
        resumed = time.monotonic()
        for name, pending in forgotten:
            while pending:
                self.logs.delete(name, pending.pop().index)
                if time.monotonic() - resumed >= DELETE_SLICE_S:
                    await asyncio.sleep(0)
                    resumed = time.monotonic()
            if self._dropping.get(name) is pending:
                del self._dropping[name]
            log.info("deleted topic %s", name)
        collector.thaw()

    def delete(self, name: str) -> None:
        """Delete a topic and its logs at once (cluster mode: StopReplica, a new id)."""
        [(_, pending)] = self._forget([name])
        self._save()
        self._drop_logs(name, pending)
        del self._dropping[name]
        log.info("deleted topic %s", name)
        collector.thaw()

    def _forget(self, names: list[str]) -> list[tuple[str, list[Partition]]]:
        """The topics are gone for every request (waiting fetches woken), and for the
        next start once the caller saves; their partitions wait in ``_dropping`` for
        their logs' deletion, in the lists returned (drained by the caller, or by
        ``_claim_name`` first)."""
        for name in names:
            if name not in self._topics:
                raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        for name in names:
            topic = self._topics.pop(name)
            self._by_id.pop(topic.topic_id, None)
            self._growing.pop(name, None)
            for partition in topic.partitions:
                partition.deleted = True
                partition.wake()
            self._dropping.setdefault(name, []).extend(
                p for p in topic.partitions if p.log is not None)
            self._deleting.add(name)
        return [(name, self._dropping[name]) for name in names]

    def _drop_logs(self, name: str, partitions: list[Partition]) -> None:
        for partition in partitions:
            self.logs.delete(name, partition.index)

"""The console's Kafka side: what its pages show and its actions do, asked of the cluster
with confluent-kafka, returned as plain data for :mod:`pybroker.console.pages`.

Thread-safety: called from the HTTP listener's threads, several at a time. They share one
``AdminClient`` (librdkafka's clients are thread-safe); browsing records takes a
``Consumer`` of its own per request (a consumer's assignment is its own), closed after.
Every call is bounded by ``timeout`` seconds; a failure raises ``ConsoleError`` carrying
the text to show (Kafka's error name and message), never a traceback.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from pybroker.kafka_admin import (
    GroupLag,
    Partition,
    apply_reset,
    committed_offsets,
    describe_group_lag,
    error_text,
    list_offsets,
    reset_plan,
    reset_refusal,
    state_name,
)

DEFAULT_TIMEOUT_S = 15.0
DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION = 35, 4
# a browse waits for records up to this long (an empty or transactional partition's end
# may never deliver a record: control records and open transactions' records are skipped)
BROWSE_WAIT_S = 5.0
MAX_BROWSE_RECORDS = 500
# a consumer's fetches are as large as the broker's largest record (max.message.bytes)
_FETCH_MAX_BYTES = 16 * 1024 * 1024


class ConsoleError(Exception):
    """What the console shows instead of a page: bad input or the cluster's answer."""


@dataclass
class PartitionInfo:
    index: int
    leader: int
    replicas: list[int]
    isr: list[int]
    earliest: int | None
    latest: int | None
    error: str
    size: int | None = None  # bytes of the leader's log; None: not known

    @property
    def records(self) -> int | None:
        """Offsets between the log start and the high watermark (a compacted or
        transactional log holds fewer records)."""
        if self.earliest is None or self.latest is None:
            return None
        return self.latest - self.earliest


@dataclass
class TopicInfo:
    name: str
    partitions: list[PartitionInfo]
    internal: bool

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def under_replicated(self) -> int:
        return sum(len(p.isr) < len(p.replicas) for p in self.partitions)

    @property
    def records(self) -> int:
        return sum(p.records or 0 for p in self.partitions)

    @property
    def size(self) -> int | None:
        """Bytes of the partitions' leader logs (of those known)."""
        known = [p.size for p in self.partitions if p.size is not None]
        return sum(known) if known else None


@dataclass
class Cluster:
    cluster_id: str
    controller_id: int
    brokers: list[tuple[int, str, int]]  # (id, host, port)
    topics: list[TopicInfo]


@dataclass
class ConfigInfo:
    name: str
    value: str | None
    source: str
    is_default: bool
    read_only: bool
    sensitive: bool


@dataclass
class Record:
    offset: int
    timestamp_ms: int
    timestamp_type: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class ClusterClient:
    """``client_settings``: librdkafka's security settings of the listener ``bootstrap``
    is on (:mod:`pybroker.client.security`), for every client of the console."""

    def __init__(self, bootstrap: str, timeout: float = DEFAULT_TIMEOUT_S,
                 client_settings: dict[str, str] | None = None) -> None:
        from pybroker.client.security import client_security

        self.bootstrap = bootstrap
        self.timeout = timeout
        self.client_settings = dict(client_settings or {})
        self.security = client_security(self.client_settings)
        self._admin: Any = None
        self._lock = threading.Lock()

    @property
    def admin(self) -> Any:
        """The shared client, made at first use: a broker whose console is never opened
        holds no client of itself."""
        with self._lock:
            if self._admin is None:
                from confluent_kafka.admin import AdminClient

                self._admin = AdminClient({"bootstrap.servers": self.bootstrap,
                                           "client.id": "pybroker-console",
                                           **self.client_settings})
            return self._admin

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ConsoleError:
            raise
        except Exception as exc:  # the client raises KafkaException carrying the error
            raise ConsoleError(f"{what}: {error_text(exc)}") from None

    # reading ------------------------------------------------------------------------------

    def cluster(self, topic: str | None = None) -> Cluster:
        """Brokers and topics (all, or ``topic``) with each partition's leader, replicas,
        ISR and watermarks."""
        from pybroker.broker.topic_manager import INTERNAL_TOPICS

        def ask() -> Cluster:
            from confluent_kafka.admin import OffsetSpec

            # all topics, even for one: a Metadata request naming a topic may create it
            metadata = self.admin.list_topics(timeout=self.timeout)
            found = [t for name, t in sorted(metadata.topics.items())
                     if topic is None or name == topic]
            if topic is not None and (not found or found[0].error is not None):
                reason = error_text(found[0].error) if found else \
                    "UNKNOWN_TOPIC_OR_PARTITION: no such topic"
                raise ConsoleError(f"topic {topic}: {reason}")
            keys = [(t.topic, p) for t in found if t.error is None for p in t.partitions]
            earliest, _ = list_offsets(self.admin, keys, OffsetSpec.earliest(), self.timeout)
            latest, _ = list_offsets(self.admin, keys, OffsetSpec.latest(), self.timeout)
            topics = []
            for t in found:
                if t.error is not None:
                    continue
                partitions = [
                    PartitionInfo(index, p.leader, list(p.replicas), list(p.isrs),
                                  earliest.get((t.topic, index)), latest.get((t.topic, index)),
                                  "" if p.error is None else p.error.name())
                    for index, p in sorted(t.partitions.items())]
                topics.append(TopicInfo(t.topic, partitions, t.topic in INTERNAL_TOPICS))
            brokers = sorted((b.id, b.host, b.port) for b in metadata.brokers.values())
            sizes = self._log_sizes(brokers, topics)
            for info in topics:
                for p in info.partitions:
                    p.size = sizes.get((info.name, p.index, p.leader))
            return Cluster(metadata.cluster_id or "", metadata.controller_id, brokers, topics)

        return self._call("metadata", ask)

    def topic(self, name: str) -> TopicInfo:
        return self.cluster(name).topics[0]

    def _log_sizes(self, brokers: list[tuple[int, str, int]],
                   topics: list[TopicInfo]) -> dict[tuple[str, int, int], int]:
        """Bytes of each replica's log, by (topic, partition, broker id): DescribeLogDirs,
        asked of every broker over pybroker's own client (confluent-kafka's has no call
        for it). A broker that does not answer leaves its replicas out."""
        from pybroker.client.connection import BrokerConnection

        if not topics:
            return {}
        body = {"topics": [{"topic": t.name, "partitions": [p.index for p in t.partitions]}
                           for t in topics]}
        sizes: dict[tuple[str, int, int], int] = {}
        for broker_id, host, port in brokers:
            try:
                with BrokerConnection(host, port, "pybroker-console", self.timeout,
                                      self.security) as conn:
                    answer = conn.request(DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION, body)
            except OSError:
                continue
            for result in answer["results"]:
                for topic in result["topics"]:
                    for p in topic["partitions"]:
                        if not p["is_future_key"]:  # (a replica's copy on its way elsewhere)
                            sizes[(topic["name"], p["partition_index"], broker_id)] = \
                                p["partition_size"]
        return sizes

    def configs(self, topic: str) -> list[ConfigInfo]:
        from confluent_kafka.admin import ConfigResource, ConfigSource

        def ask() -> list[ConfigInfo]:
            resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
            future = self.admin.describe_configs([resource], request_timeout=self.timeout)
            entries = future[resource].result(timeout=self.timeout)
            return [ConfigInfo(e.name, e.value, ConfigSource(e.source).name,
                               e.source == ConfigSource.DEFAULT_CONFIG.value,
                               e.is_read_only, e.is_sensitive)
                    for e in sorted(entries.values(), key=lambda e: e.name)]

        return self._call(f"configs of {topic}", ask)

    def groups(self) -> list[tuple[str, str]]:
        """(group id, state) of every group."""
        def ask() -> list[tuple[str, str]]:
            result = self.admin.list_consumer_groups(request_timeout=self.timeout) \
                .result(timeout=self.timeout)
            if result.errors:
                raise ConsoleError("; ".join(error_text(e) for e in result.errors))
            return sorted((g.group_id, state_name(g.state)) for g in result.valid)

        return self._call("groups", ask)

    def group(self, group_id: str) -> GroupLag:
        lag = self._call(f"group {group_id}", describe_group_lag, self.admin, group_id,
                         self.timeout)
        if lag is None:
            raise ConsoleError(f"group {group_id}: no such group")
        return lag

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """The first offset whose timestamp is at or after ``timestamp_ms`` (the high
        watermark when there is none)."""
        from confluent_kafka.admin import OffsetSpec

        key = (topic, partition)
        found, failed = self._call("offsets for time", list_offsets, self.admin, [key],
                                   OffsetSpec.for_timestamp(timestamp_ms), self.timeout)
        if key in failed:
            raise ConsoleError(f"{topic}-{partition}: {failed[key]}")
        if found[key] >= 0:
            return int(found[key])
        latest, failed = list_offsets(self.admin, [key], OffsetSpec.latest(), self.timeout)
        if key in failed:
            raise ConsoleError(f"{topic}-{partition}: {failed[key]}")
        return latest[key]

    def browse(self, topic: str, partition: int, start: int, limit: int) -> list[Record]:
        """Up to ``limit`` records of the partition from offset ``start`` (read_uncommitted:
        what the log holds), stopping at the partition's end."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        limit = max(1, min(limit, MAX_BROWSE_RECORDS))
        info = self.topic(topic)
        if not 0 <= partition < len(info.partitions):
            raise ConsoleError(f"{topic} has no partition {partition}")
        latest = info.partitions[partition].latest
        if latest is None or start >= latest:
            return []  # a fetch at the end would wait; past it, OFFSET_OUT_OF_RANGE
        consumer = Consumer({"bootstrap.servers": self.bootstrap,
                             "group.id": "pybroker-console",  # assign() only: no group
                             "client.id": "pybroker-console",
                             "enable.auto.commit": False,
                             "enable.auto.offset.store": False,
                             "enable.partition.eof": True,
                             "isolation.level": "read_uncommitted",
                             "auto.offset.reset": "earliest",
                             "fetch.message.max.bytes": _FETCH_MAX_BYTES,
                             **self.client_settings})
        records: list[Record] = []
        try:
            consumer.assign([TopicPartition(topic, partition, max(start, 0))])
            deadline = time.monotonic() + BROWSE_WAIT_S
            while len(records) < limit and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        break
                    if error.retriable() or error.code() < 0:
                        continue
                    raise ConsoleError(f"{topic}-{partition}: {error_text(error)}")
                kind, ms = msg.timestamp()
                records.append(Record(msg.offset() or 0, ms, _TIMESTAMP_TYPES.get(kind, "-"),
                                      msg.key(), msg.value(), _headers(msg)))
        finally:
            consumer.close()
        return records

    # actions ------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: dict[str, str]) -> None:
        from confluent_kafka.admin import NewTopic

        topic = NewTopic(name, num_partitions=partitions,
                         replication_factor=replication_factor, config=configs)
        self._wait(f"create {name}",
                   self.admin.create_topics([topic], operation_timeout=self.timeout))

    def set_partition_count(self, topic: str, count: int) -> None:
        from confluent_kafka.admin import NewPartitions

        self._wait(f"partitions of {topic}", self.admin.create_partitions(
            [NewPartitions(topic, count)], operation_timeout=self.timeout))

    def alter_config(self, topic: str, key: str, value: str | None) -> None:
        """Set ``key`` (incrementally), or remove its override when ``value`` is None."""
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        op = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=op)])
        self._wait(f"config of {topic}", self.admin.incremental_alter_configs(
            [resource], request_timeout=self.timeout))

    def reset_preview(self, group: str, topic: str,
                      to: str | int) -> tuple[dict[Partition, int], dict[Partition, int]]:
        """The group's committed offsets on ``topic`` and the reset's new ones; raises
        when the group has members or a partition's bounds cannot be read."""
        refusal = self._call(f"group {group}", reset_refusal, self.admin, group, self.timeout)
        if refusal is not None:
            raise ConsoleError(f"group {group}: {refusal}")
        partitions = [(topic, p.index) for p in self.topic(topic).partitions]
        plan, failed = self._call("offsets", reset_plan, self.admin, partitions, to,
                                  self.timeout)
        if failed:
            raise ConsoleError("; ".join(f"{t}-{p}: {e}" for (t, p), e in failed.items()))
        committed = self._call(f"group {group}", committed_offsets, self.admin, group,
                               self.timeout)
        return {k: v for k, v in committed.items() if k[0] == topic}, plan

    def reset_offsets(self, group: str, plan: dict[Partition, int]) -> None:
        errors = apply_reset(self.admin, group, plan, self.timeout)
        if errors:
            raise ConsoleError("; ".join(
                f"{group if key is None else f'{key[0]}-{key[1]}'}: {error}"
                for key, error in errors.items()))

    def _wait(self, what: str, futures: dict[Any, Any]) -> None:
        for future in futures.values():
            self._call(what, future.result, timeout=self.timeout)


_TIMESTAMP_TYPES = {1: "CreateTime", 2: "LogAppendTime"}


def _headers(msg: Any) -> list[tuple[str, bytes | None]]:
    return [(name, value.encode() if isinstance(value, str) else value)
            for name, value in msg.headers() or []]

"""Metadata (key 3): brokers, cluster id, and topics with their partitions and ids.

This broker leads every partition with an ISR of itself. Requested topics that do not
exist are created with the defaults when both ``auto.create.topics.enable`` and the
request's ``allow_auto_topic_creation`` allow it, all of one request together
(``TopicManager.auto_create_async``: one write of topics.json, logs a slice at a time), and
answered once created, where Kafka would say LEADER_NOT_AVAILABLE until a leader is
elected: there is nothing to elect here. Else UNKNOWN_TOPIC_OR_PARTITION; an illegal name
gets INVALID_TOPIC_EXCEPTION. Topics asked for by id (v10+) that do not exist get
UNKNOWN_TOPIC_ID.

A partition whose last write failed in the file system less than a minute ago, nothing
written since (``Log.failing_writes``: a full disk, an I/O error), is answered with
KAFKA_STORAGE_ERROR, its leader still given: Kafka has no such state (a failed log
directory goes offline, and a single node shuts down), and this is how ``pybroker topic
describe`` and any Metadata reader see that the broker refuses writes there. Clients keep
the leader and retry: librdkafka and kafka-python/aiokafka ignore a partition's error
code in Metadata (only topic-level errors drop leaders), and Java's client treats
KafkaStorageException as invalid metadata, refreshing it while it keeps the partition.
DescribeLogDirs was the other way to say it, but it reports a whole directory offline,
no partition at a time, and confluent-kafka's admin client does not offer it.

Cluster mode: the answer comes from the MetadataCache (the controller's UpdateMetadata):
live brokers, the controller, and per partition its leader (-1 with LEADER_NOT_AVAILABLE
when it has none), leader epoch, replicas, ISR and offline replicas. An auto-created topic
is written to ZooKeeper and answered LEADER_NOT_AVAILABLE until the controller has elected
its leaders, as Kafka does; clients ask again.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.broker.topic_manager import INTERNAL_TOPICS, Topic, validate_topic_name
from pybroker.cluster.metadata_cache import Endpoint, TopicInfo
from pybroker.errors import ErrorCode, KafkaError
from pybroker.net.protocol.codec import ZERO_UUID
from pybroker.net.protocol.typed import (
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataResponsePartition,
    MetadataResponseTopic,
)

log = logging.getLogger("pybroker.metadata")


def describe_topic(topic: Topic, broker_id: int) -> MetadataResponseTopic:
    replicas = [broker_id]
    return {
        "error_code": ErrorCode.NONE, "name": topic.name, "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": [{"error_code": ErrorCode.KAFKA_STORAGE_ERROR
                        if p.log.write_failed_at >= 0 and p.log.failing_writes()
                        else ErrorCode.NONE,
                        "partition_index": p.index,
                        "leader_id": broker_id, "leader_epoch": p.leader_epoch,
                        "replica_nodes": replicas, "isr_nodes": replicas,
                        "offline_replicas": []} for p in topic.partitions],
    }


def describe_cluster_topic(info: TopicInfo, live: dict) -> MetadataResponseTopic:
    partitions: list[MetadataResponsePartition] = []
    for index, p in sorted(info.partitions.items()):
        leader = p.leader if p.leader in live else -1
        partitions.append({
            "error_code": ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
            "partition_index": index, "leader_id": leader, "leader_epoch": p.leader_epoch,
            "replica_nodes": p.replicas, "isr_nodes": p.isr,
            "offline_replicas": [r for r in p.replicas if r not in live]})
    return {"error_code": ErrorCode.NONE, "name": info.name, "topic_id": info.topic_id,
            "is_internal": info.name in INTERNAL_TOPICS, "partitions": partitions}


def _missing(name: str | None, topic_id: uuid.UUID, code: int) -> MetadataResponseTopic:
    return {"error_code": code, "name": name, "topic_id": topic_id, "partitions": []}


def _lookup(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None,
            created: dict[str, Topic | KafkaError]) -> MetadataResponseTopic:
    topics = ctx.broker.topics
    if name is None:  # by id (v10+); the response's name is nullable from v12 only
        topic = topics.by_id(topic_id) if topic_id and topic_id != ZERO_UUID else None
        if topic is None:
            return _missing(None if ctx.api_version >= 12 else "", topic_id or ZERO_UUID,
                            ErrorCode.UNKNOWN_TOPIC_ID)
        return describe_topic(topic, ctx.broker.broker_id)
    topic = topics.get(name)
    if topic is None:
        try:
            validate_topic_name(name)
        except KafkaError as exc:
            return _missing(name, ZERO_UUID, exc.code)
        failed = created.get(name)
        return _missing(name, ZERO_UUID, failed.code if isinstance(failed, KafkaError)
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    return describe_topic(topic, ctx.broker.broker_id)


async def _auto_create(ctx: RequestContext,
                       requested: list[MetadataRequestTopic]) -> dict[str, Topic | KafkaError]:
    """Create the unknown topics named in the request, all together (one write of
    topics.json, logs a slice at a time); what failed, by name."""
    topics = ctx.broker.topics
    unknown = []
    for name in dict.fromkeys(t.get("name") for t in requested):
        if name is not None and topics.get(name) is None:
            try:
                validate_topic_name(name)
            except KafkaError:
                continue  # answered INVALID_TOPIC_EXCEPTION
            unknown.append(name)
    return await topics.auto_create_async(unknown) if unknown else {}


def _cluster_lookup(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None,
                    allow_create: bool) -> MetadataResponseTopic:
    cache = ctx.broker.metadata
    if name is None:
        info = cache.topic_by_id(topic_id) if topic_id and topic_id != ZERO_UUID else None
        if info is None:
            return _missing(None if ctx.api_version >= 12 else "", topic_id or ZERO_UUID,
                            ErrorCode.UNKNOWN_TOPIC_ID)
        return describe_cluster_topic(info, cache.brokers)
    info = cache.topic(name)
    if info is not None:
        return describe_cluster_topic(info, cache.brokers)
    try:
        validate_topic_name(name)
    except KafkaError as exc:
        return _missing(name, ZERO_UUID, exc.code)
    if allow_create and ctx.broker.config["auto.create.topics.enable"]:
        _start_auto_create(ctx.broker, name)
        return _missing(name, ZERO_UUID, ErrorCode.LEADER_NOT_AVAILABLE)
    return _missing(name, ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


_creating: set[str] = set()


def _start_auto_create(broker: Any, name: str) -> None:
    """Write the topic to ZooKeeper in the background; the client asks again."""
    if name in _creating:
        return
    _creating.add(name)

    async def create() -> None:
        try:
            await broker.create_topic(name)
        except KafkaError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.info("auto-creating topic %s: %s", name, exc)
        except Exception:
            log.exception("auto-creating topic %s", name)
        finally:
            _creating.discard(name)

    _tasks.add(task := asyncio.get_running_loop().create_task(create()))
    task.add_done_callback(_tasks.discard)


_tasks: set[asyncio.Task[None]] = set()


async def _cluster_metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    cache = ctx.broker.metadata
    requested = request.get("topics")
    if requested is None or (ctx.api_version == 0 and not requested):
        topics = [describe_cluster_topic(info, cache.brokers)
                  for info in list(cache.topics.values())]
    else:
        allow = request.get("allow_auto_topic_creation", True)
        topics = [_cluster_lookup(ctx, t.get("name"), t.get("topic_id"), allow)
                  for t in requested]
    # before the controller's first UpdateMetadata: this broker, so clients can ask again
    brokers = cache.live_brokers() or [Endpoint(ctx.broker.broker_id, *ctx.broker.advertised)]
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": None}
                    for b in brokers],
        "cluster_id": ctx.broker.cluster_id,
        "controller_id": cache.controller_id,
        "topics": topics,
    }


@handler(api_key=3, versions=(0, 12))
async def metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    broker = ctx.broker
    if broker.cluster is not None:
        return await _cluster_metadata(ctx, request)
    host, port = broker.advertised
    requested = request.get("topics")
    if requested is None or (ctx.api_version == 0 and not requested):
        topics = [describe_topic(t, broker.broker_id) for t in broker.topics.topics()]
    else:
        created = (await _auto_create(ctx, requested)
                   if request.get("allow_auto_topic_creation", True) else {})
        topics = [_lookup(ctx, t.get("name"), t.get("topic_id"), created) for t in requested]
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": broker.broker_id, "host": host, "port": port, "rack": None}],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.broker_id,
        "topics": topics,
    }

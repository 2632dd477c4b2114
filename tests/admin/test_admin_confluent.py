"""Admin APIs through confluent-kafka's AdminClient (librdkafka) against a real broker."""

from __future__ import annotations

import glob
import json
import os
import time

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    OffsetSpec,
)

from tests.admin.clients import (
    admin,
    consume,
    create_topic,
    error_of,
    produce,
    unique,
    wait_all,
)

# batches under a small max.message.bytes or segment.bytes (RECORD_LIST_TOO_LARGE otherwise)
ONE_PER_BATCH = {"batch.num.messages": 1}
TOPIC = ConfigResource.Type.TOPIC
BROKER = ConfigResource.Type.BROKER


def topic_configs(bootstrap: str, name: str) -> dict[str, ConfigEntry]:
    (result,) = wait_all(admin(bootstrap).describe_configs(
        [ConfigResource(TOPIC, name)])).values()
    return result


def partitions_of(bootstrap: str, name: str) -> int:
    topic = admin(bootstrap).list_topics(name, timeout=30).topics[name]
    assert topic.error is None, topic.error
    return len(topic.partitions)


def incremental(bootstrap: str, name: str, *entries: tuple[str, str | None, AlterConfigOpType],
                validate_only: bool = False) -> KafkaError | None:
    resource = ConfigResource(TOPIC, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op) for key, value, op in entries])
    (future,) = admin(bootstrap).incremental_alter_configs(
        [resource], validate_only=validate_only).values()
    return error_of(future)


# topics ------------------------------------------------------------------------------------


def test_create_list_delete(module_broker):
    bootstrap = module_broker.bootstrap
    name = unique("del")
    create_topic(bootstrap, name, 3, {"retention.ms": "3600000"})
    assert partitions_of(bootstrap, name) == 3
    produce(bootstrap, name, [b"a", b"b"])
    dirs = glob.glob(os.path.join(module_broker.data_dir, f"{name}-*"))
    assert len(dirs) == 3

    wait_all(admin(bootstrap).delete_topics([name], operation_timeout=30))
    assert name not in admin(bootstrap).list_topics(timeout=30).topics
    # Kafka's way: renamed to <topic>-<n>.<id>-delete (by the broker's deleter thread,
    # right after the answer), removed after a delay
    deadline = time.monotonic() + 30
    while [d for d in glob.glob(os.path.join(module_broker.data_dir, f"{name}-*"))
           if not d.endswith("-delete")]:
        assert time.monotonic() < deadline, "deleted partitions were never renamed"
        time.sleep(0.05)
    with open(os.path.join(module_broker.data_dir, "topics.json")) as f:
        assert name not in json.load(f)["topics"]

    # the name is free again, with no data and no leftover config
    create_topic(bootstrap, name, 1)
    assert consume(bootstrap, name) == []
    assert topic_configs(bootstrap, name)["retention.ms"].source == \
        ConfigSource.DEFAULT_CONFIG.value


def test_delete_unknown_topic(module_broker):
    (future,) = admin(module_broker.bootstrap).delete_topics([unique("nope")]).values()
    assert error_of(future).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_delete_disabled(broker_factory):
    broker = broker_factory(delete_topic_enable=False)
    name = unique("keep")
    create_topic(broker.bootstrap, name)
    (future,) = admin(broker.bootstrap).delete_topics([name]).values()
    assert error_of(future).code() == KafkaError.TOPIC_DELETION_DISABLED
    assert partitions_of(broker.bootstrap, name) == 1


def test_create_partitions(module_broker):
    bootstrap = module_broker.bootstrap
    name = unique("grow")
    create_topic(bootstrap, name, 2)
    client = admin(bootstrap)

    wait_all(client.create_partitions([NewPartitions(name, 4)], validate_only=True))
    assert partitions_of(bootstrap, name) == 2

    wait_all(client.create_partitions([NewPartitions(name, 4)]))
    assert partitions_of(bootstrap, name) == 4
    produce(bootstrap, name, [b"in the new partition"], partition=3)
    assert [m.value() for m in consume(bootstrap, name, partition=3)] == \
        [b"in the new partition"]

    for count in (4, 3):
        (future,) = client.create_partitions([NewPartitions(name, count)]).values()
        assert error_of(future).code() == KafkaError.INVALID_PARTITIONS
    (future,) = client.create_partitions([NewPartitions(unique("nope"), 2)]).values()
    assert error_of(future).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    (future,) = client.create_partitions(
        [NewPartitions(name, 5, replica_assignment=[[module_broker_id(module_broker) + 7]])]
    ).values()
    assert error_of(future).code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert partitions_of(bootstrap, name) == 4


def module_broker_id(broker) -> int:
    return admin(broker.bootstrap).list_topics(timeout=30).controller_id


# configs -----------------------------------------------------------------------------------


def test_describe_topic_configs(module_broker):
    bootstrap = module_broker.bootstrap
    name = unique("desc")
    create_topic(bootstrap, name, 1, {"retention.ms": "123456", "cleanup.policy": "delete"})
    configs = topic_configs(bootstrap, name)
    retention = configs["retention.ms"]
    assert retention.value == "123456"
    assert retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not retention.is_read_only and not retention.is_default
    segment = configs["segment.bytes"]
    assert segment.value == str(1024 ** 3)
    assert segment.source == ConfigSource.DEFAULT_CONFIG.value and segment.is_default
    assert configs["max.message.bytes"].value == "1048588"
    assert configs["message.timestamp.type"].value == "CreateTime"

    synonyms = retention.synonyms  # librdkafka always asks for them
    assert [(s.name, s.source) for s in synonyms.values()][0] == \
        ("retention.ms", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert "log.retention.ms" in synonyms or "log.retention.hours" in synonyms

    (future,) = admin(bootstrap).describe_configs([ConfigResource(TOPIC, unique("nope"))]).values()
    assert error_of(future).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_broker_configs_static_ones_read_only(module_broker):
    broker_id = module_broker_id(module_broker)
    (result,) = wait_all(admin(module_broker.bootstrap).describe_configs(
        [ConfigResource(BROKER, str(broker_id))])).values()
    assert result["num.partitions"].value == "1"
    assert result["num.partitions"].is_read_only
    assert result["message.max.bytes"].value == "1048588"
    assert not result["message.max.bytes"].is_read_only  # dynamic (tests/admin/test_dynamic_*)
    resource = ConfigResource(BROKER, str(broker_id), incremental_configs=[
        ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)])
    (future,) = admin(module_broker.bootstrap).incremental_alter_configs([resource]).values()
    assert error_of(future).code() == KafkaError.INVALID_REQUEST  # as Kafka: not dynamic


def test_incremental_alter_configs(module_broker):
    bootstrap = module_broker.bootstrap
    name = unique("inc")
    create_topic(bootstrap, name, 1, {"segment.ms": "100000"})
    assert incremental(bootstrap, name, ("retention.ms", "60000", AlterConfigOpType.SET),
                       ("cleanup.policy", "compact", AlterConfigOpType.APPEND)) is None
    configs = topic_configs(bootstrap, name)
    assert configs["retention.ms"].value == "60000"
    assert sorted(configs["cleanup.policy"].value.split(",")) == ["compact", "delete"]
    assert configs["segment.ms"].value == "100000"  # untouched by an incremental change

    assert incremental(bootstrap, name, ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT),
                       ("retention.ms", None, AlterConfigOpType.DELETE)) is None
    configs = topic_configs(bootstrap, name)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    # validate_only changes nothing; bad values and misuse are INVALID_CONFIG
    assert incremental(bootstrap, name, ("retention.ms", "1", AlterConfigOpType.SET),
                       validate_only=True) is None
    assert topic_configs(bootstrap, name)["retention.ms"].value == "604800000"
    for entry in (("retention.ms", "soon", AlterConfigOpType.SET),
                  ("message.timestamp.type", "WallClock", AlterConfigOpType.SET),
                  ("no.such.config", "1", AlterConfigOpType.SET),
                  ("retention.ms", "5", AlterConfigOpType.APPEND)):
        err = incremental(bootstrap, name, entry)
        assert err is not None and err.code() == KafkaError.INVALID_CONFIG, entry
        assert err.str()
    assert topic_configs(bootstrap, name)["cleanup.policy"].value == "compact"


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_alter_configs_replaces_the_whole_set(module_broker):
    bootstrap = module_broker.bootstrap
    name = unique("alter")
    create_topic(bootstrap, name, 1, {"retention.ms": "100000", "segment.ms": "200000"})
    resource = ConfigResource(TOPIC, name, set_config={"retention.ms": "300000"})
    wait_all(admin(bootstrap).alter_configs([resource]))
    configs = topic_configs(bootstrap, name)
    assert configs["retention.ms"].value == "300000"
    assert configs["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    bad = ConfigResource(TOPIC, name, set_config={"segment.bytes": "-5"})
    (future,) = admin(bootstrap).alter_configs([bad]).values()
    assert error_of(future).code() == KafkaError.INVALID_CONFIG
    assert topic_configs(bootstrap, name)["retention.ms"].value == "300000"


def test_config_changes_reach_the_live_log(module_broker):
    bootstrap = module_broker.bootstrap
    name = unique("live")
    create_topic(bootstrap, name, 1)
    produce(bootstrap, name, [b"x" * 5000])

    assert incremental(bootstrap, name, ("max.message.bytes", "4000", AlterConfigOpType.SET),
                       ("message.timestamp.type", "LogAppendTime", AlterConfigOpType.SET),
                       ("segment.bytes", "16384", AlterConfigOpType.SET)) is None
    with pytest.raises(KafkaException) as info:
        produce(bootstrap, name, [b"y" * 5000], retries=0)
    assert info.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    produce(bootstrap, name, [b"z" * 500] * 60, **ONE_PER_BATCH)
    messages = consume(bootstrap, name)
    assert len(messages) == 61
    assert messages[-1].timestamp()[0] == TIMESTAMP_LOG_APPEND_TIME
    segments = glob.glob(os.path.join(module_broker.data_dir, f"{name}-0", "*.log"))
    assert len(segments) > 1  # 30 KB written after segment.bytes went down to 16 KiB


def test_retention_change_deletes_old_segments(broker_factory):
    broker = broker_factory(log_retention_check_interval_ms=200)
    name = unique("ret")
    create_topic(broker.bootstrap, name, 1, {"segment.bytes": "16384"})
    produce(broker.bootstrap, name, [b"r" * 1000] * 50, **ONE_PER_BATCH)
    assert incremental(broker.bootstrap, name,
                       ("retention.bytes", "20000", AlterConfigOpType.SET)) is None
    client = admin(broker.bootstrap)
    tp = TopicPartition(name, 0)
    deadline = time.monotonic() + 30
    low = 0
    while time.monotonic() < deadline and low == 0:
        (result,) = wait_all(client.list_offsets({tp: OffsetSpec.earliest()})).values()
        low = result.offset
        time.sleep(0.1)
    assert low > 0
    assert consume(broker.bootstrap, name)[0].offset() == low


def test_configs_survive_a_restart(broker):
    name = unique("persist")
    create_topic(broker.bootstrap, name, 2, {"retention.ms": "777000"})
    assert incremental(broker.bootstrap, name,
                       ("max.message.bytes", "5000", AlterConfigOpType.SET)) is None
    broker.restart()
    configs = topic_configs(broker.bootstrap, name)
    assert configs["retention.ms"].value == "777000"
    assert configs["max.message.bytes"].value == "5000"
    assert partitions_of(broker.bootstrap, name) == 2


# records ------------------------------------------------------------------------------------


def test_delete_records_then_consume_from_the_new_start(module_broker):
    bootstrap = module_broker.bootstrap
    name = unique("dr")
    create_topic(bootstrap, name, 2)
    produce(bootstrap, name, [b"m%d" % i for i in range(20)], **ONE_PER_BATCH)
    client = admin(bootstrap)

    (result,) = wait_all(client.delete_records([TopicPartition(name, 0, 7)])).values()
    assert result.low_watermark == 7
    messages = consume(bootstrap, name)
    assert [m.offset() for m in messages] == list(range(7, 20))
    assert messages[0].value() == b"m7"
    (result,) = wait_all(client.list_offsets(
        {TopicPartition(name, 0): OffsetSpec.earliest()})).values()
    assert result.offset == 7

    (future,) = client.delete_records([TopicPartition(name, 0, 21)]).values()
    assert error_of(future).code() == KafkaError.OFFSET_OUT_OF_RANGE
    # the untouched partition and offset -1 (the high watermark)
    assert consume(bootstrap, name, partition=1) == []
    (result,) = wait_all(client.delete_records([TopicPartition(name, 0, -1)])).values()
    assert result.low_watermark == 20
    assert consume(bootstrap, name) == []


def test_delete_records_refused_on_compacted_topic(module_broker):
    name = unique("drc")
    create_topic(module_broker.bootstrap, name, 1, {"cleanup.policy": "compact"})
    produce(module_broker.bootstrap, name, [b"v"], key=b"k")  # a compacted topic needs keys
    (future,) = admin(module_broker.bootstrap).delete_records(
        [TopicPartition(name, 0, 1)]).values()
    assert error_of(future).code() == KafkaError.POLICY_VIOLATION


def test_sources_of_values_the_broker_sets(broker_factory):
    broker = broker_factory(log_retention_hours=2, num_partitions=3)
    name = unique("src")
    create_topic(broker.bootstrap, name, -1)
    assert partitions_of(broker.bootstrap, name) == 3
    retention = topic_configs(broker.bootstrap, name)["retention.ms"]
    assert retention.value == str(2 * 3600 * 1000)
    assert retention.source == ConfigSource.STATIC_BROKER_CONFIG.value
    # Kafka's chain is [STATIC log.retention.hours=2, DEFAULT log.retention.hours=168];
    # librdkafka keys synonyms by name, so only one of the two is visible here
    assert "log.retention.hours" in retention.synonyms
    (result,) = wait_all(admin(broker.bootstrap).describe_configs(
        [ConfigResource(BROKER, str(module_broker_id(broker)))])).values()
    assert result["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert result["delete.topic.enable"].source == ConfigSource.DEFAULT_CONFIG.value
    assert result["delete.topic.enable"].value == "true"  # Kafka's spelling of booleans

"""Admin APIs through kafka-python 3.x's KafkaAdminClient (its own protocol code, not
librdkafka's), including DeleteRecords and the legacy AlterConfigs."""

from __future__ import annotations

import glob
import os
import warnings

import pytest

from tests.admin.clients import unique

with warnings.catch_warnings():
    # kafka-python loads its schemas with importlib.resources calls deprecated in 3.11
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, KafkaAdminClient, NewPartitions, NewTopic
    from kafka.errors import (
        InvalidConfigurationError,
        InvalidPartitionsError,
        OffsetOutOfRangeError,
        UnknownTopicOrPartitionError,
    )


@pytest.fixture
def client(module_broker):
    admin = KafkaAdminClient(bootstrap_servers=module_broker.bootstrap)
    yield admin
    admin.close()


def _send(bootstrap: str, topic: str, count: int, partition: int = 0) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(count):
        producer.send(topic, b"v%d" % i, partition=partition)
    producer.flush()
    producer.close()


def _read(bootstrap: str, topic: str, partition: int = 0) -> list:
    """Every record from the log start to the high watermark."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    end = consumer.end_offsets([tp])[tp]
    records: list = []
    for _ in range(100):
        if consumer.position(tp) >= end:
            break
        records += consumer.poll(timeout_ms=300).get(tp, [])
    consumer.close()
    return records


def _topic_configs(client: KafkaAdminClient, name: str) -> dict:
    return client.describe_configs([ConfigResource("TOPIC", name)],
                                   config_filter="all")["topic"][name]


def test_topic_lifecycle(module_broker, client):
    name = unique("kp")
    result = client.create_topics([NewTopic(name, 2, 1, topic_configs={"retention.ms": "90000"})])
    assert result["topics"][0]["error_code"] == 0
    assert result["topics"][0]["configs"]["retention.ms"]["config_source"] == \
        "DYNAMIC_TOPIC_CONFIG"

    client.create_partitions({name: NewPartitions(3)})
    assert len(client.describe_topics([name])[0]["partitions"]) == 3
    with pytest.raises(InvalidPartitionsError):
        client.create_partitions({name: NewPartitions(2)})

    client.delete_topics([name])
    assert name not in client.list_topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        client.delete_topics([name])


def test_configs(module_broker, client):
    name = unique("kpc")
    client.create_topics([NewTopic(name, 1, 1)])
    configs = _topic_configs(client, name)
    assert configs["retention.ms"]["config_source"] == "DEFAULT_CONFIG"
    assert configs["cleanup.policy"]["config_type"] == "LIST"

    # default path: IncrementalAlterConfigs SET
    client.alter_configs([ConfigResource("TOPIC", name, configs={"segment.ms": "500000"})])
    # legacy AlterConfigs (replace semantics; kafka-python re-sends the other overrides)
    client.alter_configs([ConfigResource("TOPIC", name, configs={"retention.ms": "70000"})],
                         incremental=False)
    modified = client.describe_configs([ConfigResource("TOPIC", name)],
                                       include_synonyms=True)["topic"][name]
    assert {k: v["value"] for k, v in modified.items()} == {"segment.ms": "500000",
                                                            "retention.ms": "70000"}
    assert modified["retention.ms"]["synonyms"][0] == {
        "name": "retention.ms", "value": "70000", "source": "DYNAMIC_TOPIC_CONFIG"}

    result = client.alter_configs([ConfigResource("TOPIC", name, configs={"segment.ms": "0"})])
    assert InvalidConfigurationError.__name__ in result["topic"][name]
    assert _topic_configs(client, name)["segment.ms"]["value"] == "500000"


def test_delete_records(module_broker, client):
    bootstrap = module_broker.bootstrap
    name = unique("kpd")
    client.create_topics([NewTopic(name, 1, 1)])
    _send(bootstrap, name, 10)
    tp = TopicPartition(name, 0)

    result = client.delete_records({tp: 4})
    assert result[tp]["low_watermark"] == 4
    records = _read(bootstrap, name)
    assert [r.offset for r in records] == list(range(4, 10))
    assert records[0].value == b"v4"

    # below the current start: nothing changes
    assert client.delete_records({tp: 2})[tp]["low_watermark"] == 4
    with pytest.raises(OffsetOutOfRangeError):
        client.delete_records({tp: 11})
    # -1 is the high watermark: everything goes
    assert client.delete_records({tp: -1})[tp]["low_watermark"] == 10
    assert _read(bootstrap, name) == []
    _send(bootstrap, name, 1)
    assert [r.offset for r in _read(bootstrap, name)] == [10]


def test_describe_log_dirs_sizes_every_replica_here(client, module_broker):
    name = unique("logdirs")
    client.create_topics([NewTopic(name, 2, 1)])
    _send(module_broker.bootstrap, name, 20, partition=1)
    answers = client.describe_log_dirs(topic_partitions={name: [0, 1, 7]})
    (answer,) = answers  # one broker
    (log_dir,) = answer["log_dirs"]
    assert log_dir["error_code"] == 0
    assert log_dir["log_dir"] == os.path.abspath(module_broker.data_dir)
    (topic,) = log_dir["topics"]
    sizes = {p["partition_index"]: p["partition_size"] for p in topic["partitions"]}
    assert sorted(sizes) == [0, 1]  # partition 7 does not exist: left out, as Kafka does
    assert sizes[0] == 0
    assert sizes[1] == sum(os.path.getsize(path) for path in glob.glob(
        os.path.join(module_broker.data_dir, f"{name}-1", "*.log")))
    assert all(p["offset_lag"] == 0 and not p["is_future_key"] for p in topic["partitions"])
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
    everything = client.describe_log_dirs()[0]["log_dirs"][0]["topics"]
    assert name in {t["name"] for t in everything}

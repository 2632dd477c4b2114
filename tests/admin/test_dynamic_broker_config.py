"""Dynamic broker configs (Kafka's DynamicBrokerConfig): AlterConfigs and
IncrementalAlterConfigs on the BROKER resource "<id>" (this broker) and "" (the cluster
default), applied at once, reported with their sources, kept across a restart. Real broker
processes; confluent-kafka and kafka-python admin clients, and exact requests where no
client can name the default resource (confluent-kafka's and kafka-python's refuse "")."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, OffsetSpec
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from pybroker.config import ConfigSource
from pybroker.errors import ErrorCode
from tests.admin.clients import admin, create_topic, error_of, produce, unique, wait_all
from tests.broker.test_compaction import TOPIC_CONFIG, cleaned_up_to, produce_changelog
from tests.broker.wire_client import WireClient
from tests.conftest import BrokerProcess
from tests.txn.test_markers import new_topic, producer_id
from tests.txn.test_markers import produce as txn_produce

DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
BROKER, TOPIC = ConfigResource.Type.BROKER, ConfigResource.Type.TOPIC
SET, DELETE, APPEND = AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND
ONE_PER_BATCH = {"batch.num.messages": 1, "retries": 0}


def _alter_broker(bootstrap: str, name: str, *entries: tuple[str, str | None, Any],
                  validate_only: bool = False) -> Any:
    """IncrementalAlterConfigs of BROKER ``name`` with confluent-kafka; its error or None."""
    resource = ConfigResource(BROKER, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op) for key, value, op in entries])
    (future,) = admin(bootstrap).incremental_alter_configs(
        [resource], validate_only=validate_only).values()
    return error_of(future)


def _described(bootstrap: str, kind: Any, name: str) -> dict[str, Any]:
    (result,) = wait_all(admin(bootstrap).describe_configs([ConfigResource(kind, name)])).values()
    return result


def _wire_alter(bootstrap: str, name: str, configs: dict[str, str | None],
                incremental: bool = True) -> dict:
    """One alter of BROKER ``name`` as an exact request (SET, or DELETE for None)."""
    with WireClient(bootstrap) as client:
        if incremental:
            items = [{"name": k, "value": v, "config_operation": 0 if v is not None else 1}
                     for k, v in configs.items()]
            answer = client.request(INCREMENTAL_ALTER_CONFIGS, 1, {
                "resources": [{"resource_type": 4, "resource_name": name, "configs": items}],
                "validate_only": False})
        else:
            answer = client.request(ALTER_CONFIGS, 2, {
                "resources": [{"resource_type": 4, "resource_name": name, "configs": [
                    {"name": k, "value": v} for k, v in configs.items()]}],
                "validate_only": False})
    (result,) = answer["responses"]
    return result


def _wire_describe(bootstrap: str, kind: int, name: str) -> dict[str, dict]:
    with WireClient(bootstrap) as client:
        answer = client.request(DESCRIBE_CONFIGS, 4, {
            "resources": [{"resource_type": kind, "resource_name": name,
                           "configuration_keys": None}],
            "include_synonyms": True, "include_documentation": False})
    (result,) = answer["results"]
    assert result["error_code"] == ErrorCode.NONE, result
    return {c["name"]: c for c in result["configs"]}


def _chain(entry: dict) -> list[tuple[str, str | None, int]]:
    return [(s["name"], s["value"], s["source"]) for s in entry["synonyms"]]


def test_lower_message_max_bytes_refuses_a_bigger_batch_at_once(broker: BrokerProcess) -> None:
    bootstrap = broker.bootstrap
    name = unique("dyn-max")
    create_topic(bootstrap, name)
    produce(bootstrap, name, [b"x" * 5000], **ONE_PER_BATCH)

    assert _alter_broker(bootstrap, "0", ("message.max.bytes", "4000", SET)) is None
    with pytest.raises(KafkaException) as info:
        produce(bootstrap, name, [b"y" * 5000], **ONE_PER_BATCH)
    assert info.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    entry = _described(bootstrap, TOPIC, name)["max.message.bytes"]
    assert (entry.value, entry.source) == ("4000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    configs = _described(bootstrap, BROKER, "0")
    assert configs["message.max.bytes"].value == "4000"
    assert configs["message.max.bytes"].source == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert not configs["message.max.bytes"].is_read_only
    assert configs["num.partitions"].is_read_only

    assert _alter_broker(bootstrap, "0", ("message.max.bytes", None, DELETE)) is None
    produce(bootstrap, name, [b"z" * 5000], **ONE_PER_BATCH)
    entry = _described(bootstrap, TOPIC, name)["max.message.bytes"]
    assert (entry.value, entry.source) == ("1048588", ConfigSource.DEFAULT_CONFIG)


def test_cluster_default_and_per_broker_layers(broker: BrokerProcess) -> None:
    bootstrap = broker.bootstrap
    name = unique("dyn-layers")
    create_topic(bootstrap, name)
    assert _wire_alter(bootstrap, "", {"log.retention.ms": "3600000"})["error_code"] == 0

    topic = _wire_describe(bootstrap, 2, name)["retention.ms"]
    assert (topic["value"], topic["config_source"]) == \
        ("3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert _chain(topic) == [("log.retention.ms", "3600000", 3),
                             ("log.retention.hours", "168", 5)]  # as Kafka 4.1 answers
    defaults = _wire_describe(bootstrap, 4, "")
    assert list(defaults) == ["log.retention.ms"]
    assert not defaults["log.retention.ms"]["read_only"]
    # CreateTopics' answer (v5+) reports the same source
    with WireClient(bootstrap) as client:
        created = client.request(19, 5, {"topics": [{
            "name": unique("dyn-created"), "num_partitions": 1, "replication_factor": 1,
            "assignments": [], "configs": []}], "timeout_ms": 30000, "validate_only": False})
    (answer,) = created["topics"]
    assert answer["error_code"] == ErrorCode.NONE
    retention = {c["name"]: c for c in answer["configs"]}["retention.ms"]
    assert (retention["value"], retention["config_source"]) == ("3600000", 3)

    # this broker's own setting wins over the cluster default; both show in the chain
    assert _alter_broker(bootstrap, "0", ("log.retention.ms", "7200000", SET)) is None
    entry = _wire_describe(bootstrap, 4, "0")["log.retention.ms"]
    assert (entry["value"], entry["config_source"]) == ("7200000", 2)
    assert _chain(entry) == [("log.retention.ms", "7200000", 2),
                             ("log.retention.ms", "3600000", 3),
                             ("log.retention.hours", "168", 5)]
    topic = _wire_describe(bootstrap, 2, name)["retention.ms"]
    assert (topic["value"], topic["config_source"]) == ("7200000", 2)
    # a topic's own override still wins
    with WireClient(bootstrap) as client:
        client.request(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": 2, "resource_name": name, "configs": [
                {"name": "retention.ms", "value": "60000", "config_operation": 0}]}],
            "validate_only": False})
    topic = _wire_describe(bootstrap, 2, name)["retention.ms"]
    assert (topic["value"], topic["config_source"]) == ("60000", 1)
    assert [s for _, _, s in _chain(topic)] == [1, 2, 3, 5]


def test_dynamic_configs_survive_a_restart(broker: BrokerProcess) -> None:
    bootstrap = broker.bootstrap
    assert _wire_alter(bootstrap, "", {"log.segment.bytes": "2097152"})["error_code"] == 0
    assert _alter_broker(bootstrap, "0", ("log.cleanup.policy", "compact", APPEND)) is None
    with open(os.path.join(broker.data_dir, "dynamic-broker-configs.json")) as f:
        assert json.load(f)["brokers"] == {"<default>": {"log.segment.bytes": "2097152"},
                                           "0": {"log.cleanup.policy": "delete,compact"}}

    broker.restart()
    configs = _wire_describe(broker.bootstrap, 4, "0")
    assert (configs["log.segment.bytes"]["value"],
            configs["log.segment.bytes"]["config_source"]) == ("2097152", 3)
    assert (configs["log.cleanup.policy"]["value"],
            configs["log.cleanup.policy"]["config_source"]) == ("delete,compact", 2)
    name = unique("dyn-restart")
    create_topic(broker.bootstrap, name)
    topic = _wire_describe(broker.bootstrap, 2, name)
    assert topic["segment.bytes"]["value"] == "2097152"
    assert topic["cleanup.policy"]["value"] == "delete,compact"


def test_static_keys_and_bad_values_are_refused(broker: BrokerProcess) -> None:
    bootstrap = broker.bootstrap
    refused = _wire_alter(bootstrap, "0", {"num.partitions": "3", "log.retention.hours": "1"})
    assert (refused["error_code"], refused["error_message"]) == (
        ErrorCode.INVALID_REQUEST,
        "Cannot update these configs dynamically: Set(log.retention.hours, num.partitions)")
    error = _alter_broker(bootstrap, "0", ("num.partitions", "3", SET))
    assert error.code() == KafkaError.INVALID_REQUEST
    for key, value in (("message.max.bytes", "abc"), ("log.cleaner.threads", "0"),
                       ("log.cleanup.policy", "shred"), ("compression.type", "brotli"),
                       ("max.connections.per.ip.overrides", "nonsense"),
                       ("log.segment.bytes", "-1")):
        answer = _wire_alter(bootstrap, "", {key: value})
        assert answer["error_code"] == ErrorCode.INVALID_REQUEST, (key, answer)
        assert answer["error_message"], key
    appended = _alter_broker(bootstrap, "0", ("message.max.bytes", "5", APPEND))
    assert appended.code() == KafkaError.INVALID_CONFIG
    other = _wire_alter(bootstrap, "7", {"message.max.bytes": "5000"})
    assert other["error_code"] == ErrorCode.INVALID_REQUEST
    # validate_only checks and changes nothing
    assert _alter_broker(bootstrap, "0", ("message.max.bytes", "5000", SET),
                         validate_only=True) is None
    assert _alter_broker(bootstrap, "0", ("message.max.bytes", "abc", SET),
                         validate_only=True).code() == KafkaError.INVALID_REQUEST
    configs = _wire_describe(bootstrap, 4, "0")
    assert configs["message.max.bytes"]["config_source"] == ConfigSource.DEFAULT_CONFIG
    assert _wire_describe(bootstrap, 4, "") == {}
    assert not os.path.exists(os.path.join(broker.data_dir, "dynamic-broker-configs.json"))


def test_alter_configs_replaces_the_whole_dynamic_set(broker: BrokerProcess) -> None:
    bootstrap = broker.bootstrap
    assert _wire_alter(bootstrap, "0", {"log.retention.ms": "3600000",
                                        "message.max.bytes": "500000"})["error_code"] == 0
    assert _wire_alter(bootstrap, "0", {"log.retention.bytes": "1000000"},
                       incremental=False)["error_code"] == 0
    configs = _wire_describe(bootstrap, 4, "0")
    assert {k for k, c in configs.items() if c["config_source"] == 2} == {"log.retention.bytes"}
    assert configs["message.max.bytes"]["value"] == "1048588"


def test_kafka_python_admin_sees_and_sets_dynamic_configs(broker: BrokerProcess) -> None:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        dynamic = client.describe_configs([KpConfigResource(ConfigResourceType.BROKER, "0")],
                                          config_filter="dynamic")["broker"]["0"]
        assert {"message.max.bytes", "log.cleaner.threads", "max.connections"} <= set(dynamic)
        assert "num.partitions" not in dynamic
        result = client.alter_configs([KpConfigResource(
            ConfigResourceType.BROKER, "0",
            configs={"log.cleaner.backoff.ms": "1000", "max.connections.per.ip": "50"})])
        assert result == {"broker": {"0": "OK"}}
        modified = client.describe_configs([KpConfigResource(ConfigResourceType.BROKER, "0")],
                                           config_filter="modified")["broker"]["0"]
        assert modified["log.cleaner.backoff.ms"]["value"] == "1000"
        assert modified["log.cleaner.backoff.ms"]["config_source"] == "DYNAMIC_BROKER_CONFIG"
        assert modified["max.connections.per.ip"]["value"] == "50"
        with pytest.raises(ValueError):  # kafka-python checks against the dynamic keys
            client.alter_configs([KpConfigResource(ConfigResourceType.BROKER, "0",
                                                   configs={"num.partitions": "2"})])
    finally:
        client.close()


def test_max_connections_per_ip_applies_to_new_connections(broker: BrokerProcess) -> None:
    clients = [WireClient(broker.bootstrap) for _ in range(2)]
    try:
        answer = clients[0].request(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": 4, "resource_name": "0", "configs": [
                {"name": "max.connections.per.ip", "value": "3", "config_operation": 0}]}],
            "validate_only": False})
        assert answer["responses"][0]["error_code"] == ErrorCode.NONE
        clients.append(WireClient(broker.bootstrap))  # the third: still allowed
        described = clients[2].request(DESCRIBE_CONFIGS, 4, {"resources": [{
            "resource_type": 4, "resource_name": "0",
            "configuration_keys": ["max.connections.per.ip"]}],
            "include_synonyms": False, "include_documentation": False})
        assert described["results"][0]["configs"][0]["value"] == "3"
        clients.append(WireClient(broker.bootstrap))  # the fourth: closed at once
        assert clients[3].closed_by_peer()
    finally:
        for client in clients:
            client.close()


def test_cleaner_settings_reach_the_cleaner_at_once(broker_factory: Any) -> None:
    # The cleaner found nothing at start and backs off for an hour: only the dynamic
    # change of its back-off gets the new compacted topic cleaned within the test.
    broker = broker_factory(log_cleaner_backoff_ms=3_600_000)
    name = unique("dyn-cleaner")
    create_topic(broker.bootstrap, name, config=TOPIC_CONFIG)
    written = produce_changelog(broker.bootstrap, name, 400)
    assert cleaned_up_to(broker.data_dir, name) == -1
    assert _wire_alter(broker.bootstrap, "", {"log.cleaner.backoff.ms": "200",
                                              "log.cleaner.threads": "2"})["error_code"] == 0
    deadline = time.monotonic() + 60
    while cleaned_up_to(broker.data_dir, name) <= 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert 0 < cleaned_up_to(broker.data_dir, name) <= written[-1][0]


def test_retention_default_deletes_old_segments_of_live_topics(broker_factory: Any) -> None:
    broker = broker_factory(log_retention_check_interval_ms=200)
    name = unique("dyn-retention")
    create_topic(broker.bootstrap, name, config={"segment.bytes": "16384"})
    produce(broker.bootstrap, name, [b"r" * 1000] * 50, **ONE_PER_BATCH)
    assert _wire_alter(broker.bootstrap, "", {"log.retention.bytes": "20000"})["error_code"] == 0
    tp = TopicPartition(name, 0)
    deadline = time.monotonic() + 30
    low = 0
    while low == 0 and time.monotonic() < deadline:
        (result,) = wait_all(admin(broker.bootstrap).list_offsets(
            {tp: OffsetSpec.earliest()})).values()
        low = result.offset
        time.sleep(0.1)
    assert low > 0


def test_partition_verification_turned_off_at_once(broker: BrokerProcess) -> None:
    # a transactional batch of a producer with no transaction: refused while KIP-890's
    # check is on (the coordinator knows of no such transaction), taken once it is off
    with WireClient(broker.bootstrap) as client:
        topic = new_topic(client)
        pid = producer_id(client)
        assert txn_produce(client, topic, [b"t"], pid, 0, 0, True) == ErrorCode.INVALID_TXN_STATE
        assert _wire_alter(broker.bootstrap, "0", {
            "transaction.partition.verification.enable": "false"})["error_code"] == 0
        assert txn_produce(client, topic, [b"t"], pid, 0, 0, True) == ErrorCode.NONE

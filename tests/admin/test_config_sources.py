"""Where a config comes from: STATIC_BROKER_CONFIG for the broker keys a properties file,
the environment or a flag set (even to the default value), DEFAULT_CONFIG for the rest;
CreateTopics' answer and DescribeConfigs agree. Real broker, confluent-kafka and
kafka-python admin clients."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from tests.admin.clients import TIMEOUT, unique
from tests.conftest import BrokerProcess

STATIC, DEFAULT, TOPIC_OVERRIDE = 4, 5, 1  # DescribeConfigs config_source


@pytest.fixture
def configured(tmp_path: Any) -> Iterator[BrokerProcess]:
    path = tmp_path / "broker.properties"
    path.write_text("log.segment.bytes=1073741824\n")  # set, to Kafka's default value
    broker = BrokerProcess(str(tmp_path / "data"), {"log.retention.hours": 1},
                           log_path=str(tmp_path / "broker.log"),
                           extra_args=["--config", str(path)],
                           env={"PYBROKER_MESSAGE_MAX_BYTES": "2000000"})
    broker.start()
    yield broker
    assert broker.stop() == 0


def _described(admin: AdminClient, kind: Any, name: str) -> dict[str, Any]:
    [future] = admin.describe_configs([ConfigResource(kind, name)]).values()
    return future.result(timeout=TIMEOUT)


def test_describe_configs_reports_explicit_broker_settings_as_static(
        configured: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": configured.bootstrap})
    topic = unique("sources")
    for future in admin.create_topics([NewTopic(topic, 1, 1, config={"flush.ms": "5000"})],
                                      operation_timeout=TIMEOUT).values():
        future.result(timeout=TIMEOUT)
    broker = _described(admin, ConfigResource.Type.BROKER, "0")
    assert broker["log.segment.bytes"].source == STATIC  # file, value equal to the default
    assert broker["message.max.bytes"].source == STATIC  # environment
    assert broker["log.retention.hours"].source == STATIC  # flag
    assert broker["num.partitions"].source == DEFAULT
    assert broker["group.max.size"].source == DEFAULT
    configs = _described(admin, ConfigResource.Type.TOPIC, topic)
    sources = {name: entry.source for name, entry in configs.items()}
    assert sources["segment.bytes"] == STATIC and configs["segment.bytes"].value == "1073741824"
    assert sources["max.message.bytes"] == STATIC and configs["max.message.bytes"].value == "2000000"
    assert sources["retention.ms"] == STATIC and configs["retention.ms"].value == "3600000"
    assert sources["flush.ms"] == TOPIC_OVERRIDE
    for key in ("retention.bytes", "cleanup.policy", "index.interval.bytes", "segment.ms"):
        assert sources[key] == DEFAULT, key


def test_create_topics_answer_agrees_with_describe_configs(configured: BrokerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=configured.bootstrap, request_timeout_ms=30000)
    try:
        topic = unique("agree")
        created = admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1,
                                               "configs": {"retention.bytes": "1000000"}}})
        [entry] = [t for t in created["topics"] if t["name"] == topic]
        at_creation = {k: (c["value"], c["config_source"]) for k, c in entry["configs"].items()}
        described = admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, topic)],
                                           config_filter="all")["topic"][topic]
        described_now = {k: (c["value"], c["config_source"]) for k, c in described.items()}
    finally:
        admin.close()
    assert at_creation == described_now
    assert at_creation["retention.bytes"] == ("1000000", "DYNAMIC_TOPIC_CONFIG")
    assert at_creation["segment.bytes"][1] == "STATIC_BROKER_CONFIG"
    assert at_creation["retention.ms"] == ("3600000", "STATIC_BROKER_CONFIG")
    assert at_creation["cleanup.policy"] == ("delete", "DEFAULT_CONFIG")

"""Dynamic broker configs in a cluster, as Kafka's ZooKeeper mode keeps them: the cluster
default in ``/config/brokers/<default>`` (set through any broker, applied by every one),
a broker's own in ``/config/brokers/<id>`` (set through that broker only), both kept
across a restart. A topic's configs are read and altered through any broker, holding a
replica of it or not."""

from __future__ import annotations

import json

from pybroker.errors import ErrorCode
from tests.admin.clients import unique
from tests.cluster.harness import LocalCluster, produce_body, produce_error

PRODUCE, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 0, 32, 44
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT = 1, 2, 3


def _alter(cluster: LocalCluster, via: int, name: str, key: str, value: str) -> dict:
    answer = cluster.request(via, INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": 4, "resource_name": name, "configs": [
            {"name": key, "value": value, "config_operation": 0}]}], "validate_only": False})
    (result,) = answer["responses"]
    return result


def _config(cluster: LocalCluster, broker_id: int, kind: int, name: str,
            key: str) -> tuple[str, int] | None:
    answer = cluster.request(broker_id, DESCRIBE_CONFIGS, 4, {"resources": [{
        "resource_type": kind, "resource_name": name, "configuration_keys": [key]}],
        "include_synonyms": False, "include_documentation": False})
    (result,) = answer["results"]
    assert result["error_code"] == ErrorCode.NONE, result
    return next(((c["value"], c["config_source"]) for c in result["configs"]), None)


def test_cluster_default_reaches_every_broker_and_per_broker_stays_put(zk_connect, tmp_path):
    with LocalCluster(zk_connect, tmp_path, size=2) as cluster:
        assert _alter(cluster, 1, "", "log.retention.ms", "3600000")["error_code"] == 0
        stored = cluster.zk_get("/config/brokers/<default>")
        assert stored is not None
        assert json.loads(stored[0]) == {"version": 1, "config": {"log.retention.ms": "3600000"}}
        assert cluster.wait_for(
            lambda: _config(cluster, 2, 4, "2", "log.retention.ms") == ("3600000",
                                                                        DYNAMIC_DEFAULT),
            what="the default on broker 2")
        assert _config(cluster, 2, 4, "", "log.retention.ms") == ("3600000", DYNAMIC_DEFAULT)

        # a default set through broker 1 limits what broker 2 accepts as leader
        topic = unique("dyn-led-by-2")
        cluster.create_topic(topic, assignment=[[2]])
        assert produce_error(cluster.request(2, PRODUCE, 9, produce_body(
            topic, 0, b"x" * 5000))) == ErrorCode.NONE
        assert _alter(cluster, 1, "", "message.max.bytes", "4000")["error_code"] == 0
        assert cluster.wait_for(lambda: produce_error(cluster.request(2, PRODUCE, 9, produce_body(
            topic, 0, b"x" * 5000))) == ErrorCode.MESSAGE_TOO_LARGE,
            what="broker 2 refusing a batch above the new default")

        # broker 2's own setting: through broker 2 only, and only broker 2 has it
        refused = _alter(cluster, 1, "2", "message.max.bytes", "500000")
        assert refused["error_code"] == ErrorCode.INVALID_REQUEST
        assert _alter(cluster, 2, "2", "message.max.bytes", "500000")["error_code"] == 0
        stored = cluster.zk_get("/config/brokers/2")
        assert stored is not None
        assert json.loads(stored[0])["config"] == {"message.max.bytes": "500000"}
        assert _config(cluster, 2, 4, "2", "message.max.bytes") == ("500000", DYNAMIC_BROKER)
        assert _config(cluster, 1, 4, "1", "message.max.bytes")[1] != DYNAMIC_BROKER

        cluster.restart(2)
        assert cluster.wait_for(lambda: _config(cluster, 2, 4, "2", "message.max.bytes"),
                                what="broker 2 back") == ("500000", DYNAMIC_BROKER)
        assert _config(cluster, 2, 4, "2", "log.retention.ms") == ("3600000", DYNAMIC_DEFAULT)


def test_topic_configs_through_a_broker_without_a_replica(zk_connect, tmp_path):
    # Clients send DescribeConfigs and AlterConfigs for a topic to any broker; Kafka's
    # answer does not depend on where the topic's replicas are.
    with LocalCluster(zk_connect, tmp_path, size=2) as cluster:
        topic = unique("configs-on-2")
        cluster.create_topic(topic, assignment=[[2]])
        answer = cluster.request(1, INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": 2, "resource_name": topic, "configs": [
                {"name": "retention.ms", "value": "7200000", "config_operation": 0}]}],
            "validate_only": False})
        assert answer["responses"][0]["error_code"] == ErrorCode.NONE, answer
        # durable before the answer, and applied by the broker that holds the topic
        stored = cluster.zk_get(f"/config/topics/{topic}")
        assert stored is not None
        assert json.loads(stored[0])["config"] == {"retention.ms": "7200000"}
        assert _config(cluster, 1, 2, topic, "retention.ms") == ("7200000", DYNAMIC_TOPIC)
        assert cluster.wait_for(
            lambda: _config(cluster, 2, 2, topic, "retention.ms") == ("7200000",
                                                                     DYNAMIC_TOPIC),
            what="the override on broker 2")
        missing = cluster.request(1, DESCRIBE_CONFIGS, 4, {"resources": [{
            "resource_type": 2, "resource_name": unique("nowhere"),
            "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False})
        assert missing["results"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

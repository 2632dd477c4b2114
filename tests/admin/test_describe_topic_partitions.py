"""DescribeTopicPartitions (KIP-966) and KIP-430 authorized operations as Kafka 4.1 answers
them: the expected pages and bit fields below are the reference broker's answers to the
same requests. Through kafka-python's admin, exact requests (WireClient) and Kafka's own
kafka-topics.sh (Java: missing, the test fails)."""

from __future__ import annotations

import os
import subprocess
import warnings

import pytest

from pybroker.broker.authorized_operations import NOT_REQUESTED
from pybroker.errors import ErrorCode
from tests.admin.clients import create_topic, unique
from tests.broker.wire_client import WireClient

with warnings.catch_warnings():
    # kafka-python loads its schemas with importlib.resources calls deprecated in 3.11
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.admin import KafkaAdminClient

DESCRIBE_TOPIC_PARTITIONS, METADATA, DESCRIBE_GROUPS, DESCRIBE_CLUSTER = 75, 3, 15, 60
KAFKA_TOPICS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared",
                            "reference", "kafka_2.13-4.1.0", "bin", "kafka-topics.sh")
TOPIC_OPERATIONS = {"READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE",
                    "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
CLUSTER_OPERATIONS = {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
                      "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE"}
# the same sets as bit fields, as Kafka 4.1 sends them
TOPIC_BITS, CLUSTER_BITS, GROUP_BITS = 3576, 8096, 3400


def page_summary(answer: dict) -> tuple[list[tuple[str, int, list[int]]], dict | None]:
    return ([(t["name"], t["error_code"], [p["partition_index"] for p in t["partitions"]])
             for t in answer["topics"]], answer["next_cursor"])


def test_kafka_python_pages_through_named_topics(module_broker):
    prefix = unique("dtp")
    a, c, missing = f"{prefix}-a", f"{prefix}-c", f"{prefix}-missing"
    create_topic(module_broker.bootstrap, a, 3)
    create_topic(module_broker.bootstrap, c, 2)
    admin = KafkaAdminClient(bootstrap_servers=module_broker.bootstrap)
    try:
        pages, cursor = [], None
        while True:
            answer = admin.describe_topic_partitions([c, missing, a, a], 2, cursor)
            pages.append(page_summary(answer))
            cursor = answer["next_cursor"]
            if cursor is None:
                break
        first = admin.describe_topic_partitions([a], 2000)["topics"][0]
    finally:
        admin.close()
    assert pages == [
        ([(a, 0, [0, 1])], {"topic_name": a, "partition_index": 2}),
        ([(a, 0, [2]), (c, 0, [0])], {"topic_name": c, "partition_index": 1}),
        ([(c, 0, [1]), (missing, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])], None),
    ]
    assert first["topic_authorized_operations"] == TOPIC_BITS and not first["is_internal"]
    for p in first["partitions"]:
        assert p["error_code"] == 0 and p["leader_epoch"] == 0
        assert p["replica_nodes"] == p["isr_nodes"] == [p["leader_id"]]
        assert p["offline_replicas"] == [] and p["eligible_leader_replicas"] is None


def test_pagination_over_all_topics_and_bad_cursors(broker):
    for name, partitions in (("ta", 3), ("tb", 1), ("tc", 2)):
        create_topic(broker.bootstrap, name, partitions)
    cases = [
        ({"topics": []}, ([("ta", 0, [0, 1, 2]), ("tb", 0, [0]), ("tc", 0, [0, 1])], None)),
        ({"topics": [], "response_partition_limit": 3},
         ([("ta", 0, [0, 1, 2])], {"topic_name": "tb", "partition_index": 0})),
        ({"topics": [], "response_partition_limit": 0},
         ([("ta", 0, [0])], {"topic_name": "ta", "partition_index": 1})),
        ({"topics": [], "cursor": {"topic_name": "ta", "partition_index": 1}},
         ([("ta", 0, [1, 2]), ("tb", 0, [0]), ("tc", 0, [0, 1])], None)),
        ({"topics": [], "cursor": {"topic_name": "tb", "partition_index": 5}},
         ([("tb", 0, []), ("tc", 0, [0, 1])], None)),
        ({"topics": [], "cursor": {"topic_name": "zz", "partition_index": 0}}, ([], None)),
        ({"topics": [], "cursor": {"topic_name": "ta", "partition_index": -1}}, ([], None)),
        ({"topics": [{"name": "tc"}, {"name": "ta"}],
          "cursor": {"topic_name": "tb", "partition_index": 0}},
         ([("tc", ErrorCode.INVALID_REQUEST, []), ("ta", ErrorCode.INVALID_REQUEST, [])], None)),
        ({"topics": [{"name": "tc"}, {"name": "nope"}, {"name": "ta"}],
          "cursor": {"topic_name": "nope", "partition_index": 3}, "response_partition_limit": 1},
         ([("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []), ("ta", 0, [0])],
          {"topic_name": "ta", "partition_index": 1})),
        ({"topics": [{"name": "tc"}, {"name": "bad/name"}]},
         ([("bad/name", ErrorCode.INVALID_TOPIC_EXCEPTION, []), ("tc", 0, [0, 1])], None)),
    ]
    with WireClient(broker.bootstrap) as client:
        for body, expected in cases:
            answer = client.request(DESCRIBE_TOPIC_PARTITIONS, 0, body)
            assert page_summary(answer) == expected, body
            for topic in answer["topics"]:
                refused = topic["error_code"] == ErrorCode.INVALID_REQUEST
                assert topic["topic_authorized_operations"] == (
                    NOT_REQUESTED if refused else TOPIC_BITS)
                for p in topic["partitions"]:
                    assert p["eligible_leader_replicas"] == p["last_known_elr"] == []


def test_kafka_topics_describe_pages_with_the_java_tool(module_broker):
    prefix = unique("java")
    create_topic(module_broker.bootstrap, f"{prefix}-a", 3)
    create_topic(module_broker.bootstrap, f"{prefix}-b", 1)
    done = subprocess.run(
        [KAFKA_TOPICS, "--bootstrap-server", module_broker.bootstrap, "--describe",
         "--topic", f"{prefix}-.*", "--partition-size-limit-per-response", "1"],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    # the tool prints the topics in the order its own listing gives them
    rows = sorted(line.split("\t")[1:3] for line in done.stdout.splitlines()
                  if line.startswith("\tTopic:"))
    assert rows == [[f"Topic: {prefix}-a", f"Partition: {i}"] for i in range(3)] + [
        [f"Topic: {prefix}-b", "Partition: 0"]]
    assert "PartitionCount: 3" in done.stdout and "Elr: \tLastKnownElr: " in done.stdout


@pytest.mark.parametrize("version", [8, 10, 12])
def test_metadata_authorized_operations_only_when_asked(module_broker, version):
    name = unique("ops")
    create_topic(module_broker.bootstrap, name)
    topic = {"name": name}
    with WireClient(module_broker.bootstrap) as client:
        asked = client.request(METADATA, version, {
            "topics": [topic], "include_topic_authorized_operations": True,
            "include_cluster_authorized_operations": True})
        not_asked = client.request(METADATA, version, {"topics": [topic]})
    assert asked["topics"][0]["topic_authorized_operations"] == TOPIC_BITS
    assert not_asked["topics"][0]["topic_authorized_operations"] == NOT_REQUESTED
    if version <= 10:  # the cluster's field is gone from v11
        assert asked["cluster_authorized_operations"] == CLUSTER_BITS
        assert not_asked["cluster_authorized_operations"] == NOT_REQUESTED


def test_cluster_and_group_authorized_operations(module_broker):
    admin = KafkaAdminClient(bootstrap_servers=module_broker.bootstrap)
    try:
        cluster = admin.describe_cluster()
        (topic,) = admin.describe_topics([create_and_name(module_broker.bootstrap)])
    finally:
        admin.close()
    assert set(cluster["authorized_operations"]) == CLUSTER_OPERATIONS
    assert set(topic["authorized_operations"]) == TOPIC_OPERATIONS
    with WireClient(module_broker.bootstrap) as client:
        for version in (0, 1):
            not_asked = client.request(DESCRIBE_CLUSTER, version,
                                       {"include_cluster_authorized_operations": False})
            assert not_asked["cluster_authorized_operations"] == NOT_REQUESTED
        for version in (3, 5):
            for asked, bits in ((True, GROUP_BITS), (False, NOT_REQUESTED)):
                (group,) = client.request(DESCRIBE_GROUPS, version, {
                    "groups": [unique("no-group")],
                    "include_authorized_operations": asked})["groups"]
                assert (group["error_code"], group["authorized_operations"]) == (0, bits)


def create_and_name(bootstrap: str) -> str:
    name = unique("described")
    create_topic(bootstrap, name)
    return name


def test_broker_limit_caps_the_requested_one(broker_factory):
    broker = broker_factory(max_request_partition_size_limit=2)
    create_topic(broker.bootstrap, "capped", 3)
    with WireClient(broker.bootstrap) as client:
        answer = client.request(DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [{"name": "capped"}]})
    assert page_summary(answer) == ([("capped", 0, [0, 1])],
                                    {"topic_name": "capped", "partition_index": 2})

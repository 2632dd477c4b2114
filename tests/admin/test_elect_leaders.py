"""ElectLeaders (key 43) on a single node, where this broker is the preferred replica and
the live leader of every partition: exact requests (the expected answers are Apache Kafka
4.1's to the same requests, one KRaft node), confluent-kafka's and kafka-python's
``elect_leaders``, the authorization check, and ``pybroker partition elect``.

The elections that move leadership run on a cluster: tests/cluster/test_cluster_elect.py.
"""

from __future__ import annotations

import warnings

import pytest
from confluent_kafka import ElectionType, TopicPartition

from tests.admin.clients import admin, create_topic, unique
from tests.broker.wire_client import WireClient
from tests.cli.test_cli import pybroker

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's schema loading
    from kafka.admin import KafkaAdminClient
    from kafka.errors import UnknownTopicOrPartitionError

ELECT_LEADERS = 43
PREFERRED, UNCLEAN = 0, 1
NOT_NEEDED = {"error_code": 84, "error_message": "Leader election not needed for topic partition."}


def _elect(bootstrap: str, version: int, partitions: dict[str, list[int]] | None,
           election_type: int = PREFERRED) -> dict:
    body: dict = {"topic_partitions": None if partitions is None else [
        {"topic": t, "partitions": ps} for t, ps in partitions.items()], "timeout_ms": 10000}
    if version >= 1:
        body["election_type"] = election_type
    with WireClient(bootstrap) as client:
        return client.request(ELECT_LEADERS, version, body)


def _results(answer: dict) -> list[tuple[str, list[dict]]]:
    return [(t["topic"], t["partition_result"]) for t in answer["replica_election_results"]]


@pytest.fixture(scope="module")
def topic(module_broker) -> str:
    name = unique("elect")
    create_topic(module_broker.bootstrap, name, partitions=2)
    return name


@pytest.mark.parametrize("election_type", [PREFERRED, UNCLEAN])
def test_every_partition_already_has_its_leader(module_broker, topic, election_type):
    answer = _elect(module_broker.bootstrap, 2, {topic: [0, 1, 5], "nope": [0]}, election_type)
    assert answer["error_code"] == 0
    assert _results(answer) == [
        (topic, [{"partition_id": 0, **NOT_NEEDED}, {"partition_id": 1, **NOT_NEEDED},
                 {"partition_id": 5, "error_code": 3,
                  "error_message": f"No such partition as {topic}-5"}]),
        ("nope", [{"partition_id": 0, "error_code": 3, "error_message": "No such topic as nope"}])]


def test_versions_null_lists_and_repeats(module_broker, topic):
    bootstrap = module_broker.bootstrap
    # v0: no election type (preferred)
    answer = _elect(bootstrap, 0, {topic: [0]})
    assert _results(answer) == [(topic, [{"partition_id": 0, **NOT_NEEDED}])]
    # null: every topic, without the partitions that needed no election
    for version in (0, 1, 2):
        found = dict(_results(_elect(bootstrap, version, None)))
        assert found[topic] == []
        assert all(partitions == [] for partitions in found.values())
    assert _results(_elect(bootstrap, 1, {})) == []
    # each entry answered as named, a repeated partition twice
    with WireClient(bootstrap) as client:
        answer = client.request(ELECT_LEADERS, 2, {
            "election_type": PREFERRED, "timeout_ms": 10000, "topic_partitions": [
                {"topic": topic, "partitions": [0, 0]}, {"topic": topic, "partitions": [1]}]})
    assert [(t, [p["partition_id"] for p in ps]) for t, ps in _results(answer)] == [
        (topic, [0, 0]), (topic, [1])]


def test_an_unknown_election_type_is_an_invalid_request(module_broker, topic):
    answer = _elect(module_broker.bootstrap, 2, {topic: [0]}, election_type=7)
    assert answer["error_code"] == 42
    assert _results(answer) == [(topic, [{"partition_id": 0, "error_code": 42,
                                          "error_message": "Unknown election type 7"}])]


def test_clients_elect_leaders(module_broker, topic):
    client = admin(module_broker.bootstrap)
    # confluent-kafka 2.16 sends no timeouts (its elect_leaders refuses the keywords)
    results = client.elect_leaders(ElectionType.PREFERRED, [
        TopicPartition(topic, 0), TopicPartition(topic, 9)]).result(30)
    assert {tp.partition: error.name() for tp, error in results.items()} == {
        0: "ELECTION_NOT_NEEDED", 9: "UNKNOWN_TOPIC_OR_PART"}
    assert client.elect_leaders(ElectionType.UNCLEAN, None).result(30) == {}

    kafka_python = KafkaAdminClient(bootstrap_servers=module_broker.bootstrap)
    try:
        answer = kafka_python.elect_leaders(PREFERRED, {topic: [0, 1]})  # not needed: no error
        assert [p.error_code for r in answer.replica_election_results
                for p in r.partition_result] == [84, 84]
        with pytest.raises(UnknownTopicOrPartitionError):
            kafka_python.elect_leaders(UNCLEAN, {"nope": [0]})
    finally:
        kafka_python.close()


def test_without_alter_on_the_cluster(broker_factory):
    # an authorizer and no ACL: User:ANONYMOUS may do nothing
    broker = broker_factory(authorizer_class_name="kafka.security.authorizer.AclAuthorizer")
    denied = {"error_code": 31, "error_message": "Cluster authorization failed."}
    answer = _elect(broker.bootstrap, 2, {"t": [0, 1]})
    assert answer["error_code"] == 31
    assert _results(answer) == [("t", [{"partition_id": 0, **denied},
                                       {"partition_id": 1, **denied}])]
    assert _results(_elect(broker.bootstrap, 0, {"t": [0]})) == [
        ("t", [{"partition_id": 0, **denied}])]
    everything = _elect(broker.bootstrap, 1, None, UNCLEAN)
    assert (everything["error_code"], everything["replica_election_results"]) == (31, [])


def test_partition_elect_command(module_broker, topic):
    done = pybroker(module_broker, "partition", "elect", "--type", "preferred", "--all")
    assert done.stdout.decode() == "no partition needed an election\n"
    done = pybroker(module_broker, "partition", "elect", "--type", "unclean", "--topic", topic)
    assert done.stdout.decode().splitlines() == [f"{topic}-0: election not needed",
                                                 f"{topic}-1: election not needed"]
    failed = pybroker(module_broker, "partition", "elect", "--type", "preferred", "--topic",
                      topic, "--partition", "4", check=False)
    assert failed.returncode == 1
    assert failed.stderr.decode() == (f"{topic}-4: UNKNOWN_TOPIC_OR_PART: "
                                      f"No such partition as {topic}-4\n")
    unknown = pybroker(module_broker, "partition", "elect", "--type", "preferred", "--topic",
                       "nope-" + topic, check=False)
    assert (unknown.returncode, unknown.stderr.decode()) == (
        1, f"nope-{topic}: UNKNOWN_TOPIC_OR_PARTITION\n")
    misused = pybroker(module_broker, "partition", "elect", "--type", "preferred", "--all",
                       "--partition", "0", check=False)
    assert (misused.returncode, misused.stderr.decode()) == (
        1, "pybroker: --partition needs --topic\n")

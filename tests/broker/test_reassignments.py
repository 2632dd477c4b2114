"""AlterPartitionReassignments and ListPartitionReassignments on one node: a move to this
broker is done as asked, anything else gets the code Apache Kafka 4.1 answers (asked of
it with the same requests)."""

from __future__ import annotations

from tests.broker.wire_client import WireClient

ALTER, LIST, CREATE_TOPICS = 45, 46, 19
NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT = 0, 3, 39
NO_REASSIGNMENT_IN_PROGRESS = 85
BROKER_ID = 0  # the single node's default broker.id


def _alter(client: WireClient, moves: list[tuple[str, int, list[int] | None]]
           ) -> list[tuple[str, int, int, str | None]]:
    topics: dict[str, list[dict]] = {}
    for name, index, replicas in moves:
        topics.setdefault(name, []).append({"partition_index": index, "replicas": replicas})
    answer = client.request(ALTER, 0, {"timeout_ms": 30000, "topics": [
        {"name": name, "partitions": partitions} for name, partitions in topics.items()]})
    assert answer["error_code"] == NONE
    return [(t["name"], p["partition_index"], p["error_code"], p["error_message"])
            for t in answer["responses"] for p in t["partitions"]]


def test_moves_are_answered_as_kafka_does(module_broker) -> None:
    with WireClient(module_broker.bootstrap) as client:
        created = client.request(CREATE_TOPICS, 5, {"timeout_ms": 30000, "topics": [
            {"name": "placed", "num_partitions": 2, "replication_factor": 1}]})
        assert created["topics"][0]["error_code"] == NONE
        answers = _alter(client, [
            ("placed", 0, [BROKER_ID]),          # where it is: done at once
            ("placed", 1, [5]),                  # no such broker
            ("placed", 1, [BROKER_ID, BROKER_ID]),
            ("placed", 1, []),
            ("placed", 0, [-1]),
            ("placed", 7, [BROKER_ID]),
            ("placed", 0, None),                 # nothing to cancel
            ("absent", 0, [BROKER_ID]),
        ])
        assert answers == [
            ("placed", 0, NONE, None),
            ("placed", 1, INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment "
             "includes broker 5, but no such broker is registered."),
            ("placed", 1, INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment "
             f"includes the broker {BROKER_ID} more than once."),
            ("placed", 1, INVALID_REPLICA_ASSIGNMENT,
             "The manual partition assignment includes an empty replica list."),
            ("placed", 0, INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment "
             "includes broker -1, but no such broker is registered."),
            ("placed", 7, UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition placed:7."),
            ("placed", 0, NO_REASSIGNMENT_IN_PROGRESS, None),
            ("absent", 0, UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named absent."),
        ]
        for topics in (None, [{"name": "placed", "partition_indexes": [0, 1]},
                              {"name": "absent", "partition_indexes": [0]}]):
            listed = client.request(LIST, 0, {"timeout_ms": 30000, "topics": topics})
            assert listed["error_code"] == NONE and listed["topics"] == []

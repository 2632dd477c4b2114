"""DescribeProducers (key 61): the active producers of a partition, asked by Kafka's own
``kafka-transactions.sh describe-producers`` (Kafka 4.1's admin client) and by exact
requests for the errors. The partition holds an idempotent producer's records and a
transactional producer's open transaction (confluent-kafka both)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from pybroker.errors import ErrorCode
from tests.admin.clients import TIMEOUT, create_topic, produce, unique
from tests.broker.wire_client import WireClient

DESCRIBE_PRODUCERS = 61
KAFKA_TRANSACTIONS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared",
                                  "reference", "kafka_2.13-4.1.0", "bin",
                                  "kafka-transactions.sh")


@pytest.fixture
def open_transaction(broker) -> Iterator[tuple[str, int]]:
    """A topic of two partitions whose partition 0 has an idempotent producer's 10
    records and a transactional producer's committed transaction of 1 record and open
    one of 3; (topic, the open transaction's first offset). It is aborted afterwards."""
    topic = unique("producers")
    create_topic(broker.bootstrap, topic, partitions=2)
    produce(broker.bootstrap, topic, [b"v%d" % i for i in range(10)],
            **{"enable.idempotence": True})
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": unique("tx"), "linger.ms": 5})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.produce(topic, b"committed", partition=0)
    producer.commit_transaction(TIMEOUT)  # its marker carries the coordinator's epoch
    producer.begin_transaction()
    offsets: list[int] = []
    for i in range(3):
        producer.produce(topic, b"t%d" % i, partition=0,
                         on_delivery=lambda err, msg: offsets.append(msg.offset()))
    assert producer.flush(TIMEOUT) == 0
    yield topic, min(offsets)
    producer.abort_transaction(TIMEOUT)


def test_kafka_tool_lists_the_active_producers(broker, open_transaction):
    topic, txn_start = open_transaction
    done = subprocess.run([KAFKA_TRANSACTIONS, "--bootstrap-server", broker.bootstrap,
                           "describe-producers", "--topic", topic, "--partition", "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    header, *lines = [line.split() for line in done.stdout.splitlines() if line.strip()]
    assert header == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                      "LastTimestamp", "CurrentTransactionStartOffset"]
    # epoch, coordinator epoch (of the last marker), last sequence, last timestamp, start
    [transactional] = [row[1:] for row in lines if row[5] != "None"]
    [idempotent] = [row[1:] for row in lines if row[5] == "None"]
    assert int(transactional[1]) >= 0 and transactional[2] == "3"
    assert transactional[4] == str(txn_start)
    assert idempotent[:3] == ["0", "-1", "9"]  # no marker: no coordinator epoch
    assert int(transactional[3]) > 0 and int(idempotent[3]) > 0


def test_errors_and_fields_per_partition(broker, open_transaction):
    topic, txn_start = open_transaction
    with WireClient(broker.bootstrap) as client:
        response = client.request(DESCRIBE_PRODUCERS, 0, {"topics": [
            {"name": topic, "partition_indexes": [0, 1, 2]},
            {"name": "no-such-topic", "partition_indexes": [0]}]})
    known, unknown = response["topics"]
    assert unknown == {"name": "no-such-topic", "partitions": [
        {"partition_index": 0, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
         "error_message": None, "active_producers": []}]}
    written, empty, missing = known["partitions"]
    assert (empty["error_code"], empty["active_producers"]) == (ErrorCode.NONE, [])
    assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert written["error_code"] == ErrorCode.NONE
    [transactional] = [p for p in written["active_producers"]
                       if p["current_txn_start_offset"] >= 0]
    [idempotent] = [p for p in written["active_producers"]
                    if p["current_txn_start_offset"] < 0]
    assert (transactional["last_sequence"], transactional["current_txn_start_offset"]) == \
        (3, txn_start)
    assert transactional["coordinator_epoch"] >= 0
    assert (idempotent["producer_epoch"], idempotent["last_sequence"],
            idempotent["coordinator_epoch"]) == (0, 9, -1)
    assert idempotent["last_timestamp"] > 0 and transactional["last_timestamp"] > 0

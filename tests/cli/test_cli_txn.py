"""``pybroker txn`` as a subprocess against a real broker, with transactions left open by
pybroker's bulk producer."""

import pyarrow as pa
from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.client import READ_COMMITTED, BulkProducer, Cluster
from tests.admin.clients import unique
from tests.cli.test_cli import pybroker


def open_transaction(bootstrap, topic, transactional_id):
    """A transaction of 100 records on each of the topic's two partitions, left open."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    with BulkProducer(bootstrap, transactional_id=transactional_id,
                      transaction_timeout_ms=300_000) as producer:
        producer.begin_transaction()
        for p in (0, 1):
            producer.send_arrow(topic, pa.array([b"v"] * 100), partition=p)
        producer.flush()
        return producer.transaction_state()


def stable_and_end(bootstrap, topic):
    cluster = Cluster(bootstrap)
    try:
        return cluster.list_offsets(topic, -1, READ_COMMITTED), cluster.list_offsets(topic, -1)
    finally:
        cluster.close()


def lines(done):
    return [line.split() for line in done.stdout.decode().splitlines()]


def test_list_describe_and_abort_a_transactional_id(module_broker):
    topic, tid = unique("txn-cli"), unique("txn-cli-id")
    _, producer_id, epoch = open_transaction(module_broker.bootstrap, topic, tid)

    listed = lines(pybroker(module_broker, "txn", "list", "--state", "Ongoing"))
    assert listed[0] == ["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"]
    assert [row[2:] for row in listed if row[0] == tid] == [[str(producer_id), "Ongoing"]]

    described = lines(pybroker(module_broker, "txn", "describe", tid))
    header, row = described
    assert header == ["TRANSACTIONAL-ID", "PRODUCER-ID", "EPOCH", "STATE", "TIMEOUT-MS",
                      "START-TIME", "DURATION-MS", "PARTITIONS"]
    assert row[:5] == [tid, str(producer_id), str(epoch), "Ongoing", "300000"]
    assert row[5].endswith("Z") and int(row[6]) >= 0
    assert sorted(row[7].split(",")) == [f"{topic}-0", f"{topic}-1"]
    missing = pybroker(module_broker, "txn", "describe", "no-such-id", check=False)
    assert missing.returncode == 1 and b"TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr

    stable, end = stable_and_end(module_broker.bootstrap, topic)
    assert stable == [0, 0] and end == [100, 100]
    aborted = pybroker(module_broker, "txn", "abort", tid)
    assert b"aborted the transaction" in aborted.stdout
    stable, end = stable_and_end(module_broker.bootstrap, topic)
    assert stable == end and end[0] > 100  # the abort markers
    after = lines(pybroker(module_broker, "txn", "describe", tid))[1]
    assert after[3] != "Ongoing" and int(after[2]) > epoch
    again = pybroker(module_broker, "txn", "abort", tid, check=False)
    assert again.returncode == 1 and b"no open transaction" in again.stderr


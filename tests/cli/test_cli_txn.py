"""``pybroker txn`` as a subprocess against a real broker, with transactions left open by
pybroker's bulk producer."""

import pyarrow as pa
from confluent_kafka.admin import AdminClient, NewTopic

from pybroker._native.records import encode_batch
from pybroker.client import READ_COMMITTED, BulkProducer, Cluster
from tests.admin.clients import unique
from tests.broker.wire_client import WireClient, produce_body
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



def hanging_transaction(broker):
    """A transaction open on partition 1 of a new topic that no coordinator knows (a
    producer id without a transactional id, written with the broker's verification
    off), beside one its coordinator drives on both partitions: (topic, producer id,
    epoch, first offset of the hanging one, transactional id of the driven one)."""
    topic, driven = unique("txn-hang"), unique("txn-hang-id")
    _, driven_id, _ = open_transaction(broker.bootstrap, topic, driven)
    with WireClient(broker.bootstrap) as client:
        init = client.request(22, 1, {"transactional_id": None,
                                      "transaction_timeout_ms": 60_000})
        producer_id, epoch = init["producer_id"], init["producer_epoch"]
        batch = encode_batch([b"orphan"], producer_id=producer_id, producer_epoch=epoch,
                             base_sequence=0, transactional=True)
        body = produce_body(topic, 1, batch, acks=-1)
        body["transactional_id"] = "nobody-knows-this-id"
        answer = client.request(0, 8, body)["responses"][0]["partition_responses"][0]
    assert answer["error_code"] == 0 and producer_id != driven_id
    return topic, producer_id, epoch, answer["base_offset"], driven


UNVERIFIED = {"transaction.partition.verification.enable": "false"}


def test_find_hanging_tells_a_hanging_transaction_from_a_driven_one(broker_factory):
    broker = broker_factory(**UNVERIFIED)
    topic, producer_id, epoch, start, _ = hanging_transaction(broker)
    # Both transactions are open for longer than 0 minutes; only one has no coordinator.
    found = lines(pybroker(broker, "txn", "find-hanging", "--topic", topic,
                           "--max-transaction-timeout", "0"))
    assert found[0] == ["TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH",
                        "COORDINATOR-EPOCH", "START-OFFSET", "LAST-TIMESTAMP", "DURATION-MIN"]
    assert [row[:4] + row[5:6] for row in found[1:]] == [
        [topic, "1", str(producer_id), str(epoch), str(start)]]
    # Within the default 15 minutes nothing is hanging yet.
    assert len(lines(pybroker(broker, "txn", "find-hanging", "--topic", topic))) == 1
    wrong = pybroker(broker, "txn", "abort", "--topic", topic, "--partition", "1",
                     "--start-offset", str(start + 7), check=False)
    assert wrong.returncode == 1 and b"no open transaction began at offset" in wrong.stderr


def test_abort_a_hanging_transaction_on_one_partition(broker_factory):
    broker = broker_factory(**UNVERIFIED)
    topic, producer_id, epoch, start, driven = hanging_transaction(broker)
    stable, end = stable_and_end(broker.bootstrap, topic)
    assert stable[1] == 0 < end[1]
    done = pybroker(broker, "txn", "abort", "--topic", topic, "--partition", "1",
                    "--start-offset", str(start))
    assert f"producer id {producer_id} epoch {epoch}".encode() in done.stdout
    # The marker closes the hanging transaction; the driven one still holds partition 1
    # from offset 0 until its coordinator aborts it.
    assert len(lines(pybroker(broker, "txn", "find-hanging", "--topic", topic,
                              "--max-transaction-timeout", "0"))) == 1
    assert stable_and_end(broker.bootstrap, topic)[0][1] == 0
    pybroker(broker, "txn", "abort", driven)
    stable, end = stable_and_end(broker.bootstrap, topic)
    assert stable == end

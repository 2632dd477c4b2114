"""The bulk producer's transactions and the fetcher's read_committed, against a real
broker, checked with confluent-kafka's read_committed consumer as well."""

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition

from pybroker.client import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    BulkProducer,
    Cluster,
    Fetcher,
    ProducerFencedError,
)
from pybroker.errors import KafkaError
from tests.client.test_bulk_client import create_topic

PARTITIONS = 3
ROWS = 3000


def rows(tag):
    return pa.array([b"%s-%d" % (tag, i) for i in range(ROWS)])


KEYS = pa.array([b"k%d" % i for i in range(ROWS)])


def tags_read(cluster, topic, isolation_level):
    """Rows per tag, read by the fetcher up to each partition's end for the level."""
    ends = cluster.list_offsets(topic, -1, isolation_level)
    fetcher = Fetcher(cluster, isolation_level=isolation_level, max_wait_ms=100)
    counts: dict[bytes, int] = {}
    for p in range(PARTITIONS):
        for cols in fetcher.read_range(topic, p, 0, ends[p]):
            for value in cols["value"].to_pylist():
                tag = value.rsplit(b"-", 1)[0]
                counts[tag] = counts.get(tag, 0) + 1
    return counts


def confluent_read_committed(bootstrap, topic, expected):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values, at_end = [], set()
    while len(at_end) < PARTITIONS:
        msgs = consumer.consume(10000, timeout=10)
        assert msgs, f"stalled after {len(values)} of {expected}"
        for m in msgs:
            if m.error() is not None:
                assert m.error().code() == -191, m.error()  # _PARTITION_EOF
                at_end.add(m.partition())
            else:
                values.append(m.value())
    consumer.close()
    return values


def test_committed_aborted_and_open_transactions(module_broker):
    bootstrap, topic = module_broker.bootstrap, "txn-levels"
    create_topic(bootstrap, topic, PARTITIONS)
    producer = BulkProducer(bootstrap, transactional_id="txn-levels",
                            batch_bytes=16 << 10)
    cluster = Cluster(bootstrap)
    try:
        for tag, commit in ((b"first", True), (b"aborted", False), (b"second", True)):
            producer.begin_transaction()
            producer.send_arrow(topic, rows(tag), KEYS)
            producer.flush()
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
        producer.begin_transaction()
        producer.send_arrow(topic, rows(b"open"), KEYS)
        producer.flush()

        # The open transaction holds every partition's last stable offset back.
        stable = cluster.list_offsets(topic, -1, READ_COMMITTED)
        high = cluster.list_offsets(topic, -1, READ_UNCOMMITTED)
        assert all(s < h for s, h in zip(stable, high, strict=True))
        assert tags_read(cluster, topic, READ_COMMITTED) == {b"first": ROWS, b"second": ROWS}
        assert tags_read(cluster, topic, READ_UNCOMMITTED) == {
            b"first": ROWS, b"aborted": ROWS, b"second": ROWS, b"open": ROWS}

        producer.commit_transaction()
        # EndTxn is answered before the markers are written, as Kafka's is.
        cluster.wait_for_markers("txn-levels")
        assert tags_read(cluster, topic, READ_COMMITTED) == {
            b"first": ROWS, b"second": ROWS, b"open": ROWS}
        values = confluent_read_committed(bootstrap, topic, 3 * ROWS)
        assert sorted(values) == sorted(
            v for tag in (b"first", b"second", b"open") for v in rows(tag).to_pylist())
    finally:
        producer.close()
        cluster.close()


def test_a_newer_producer_fences_the_older_one(module_broker):
    bootstrap, topic = module_broker.bootstrap, "txn-fencing"
    create_topic(bootstrap, topic, PARTITIONS)
    zombie = BulkProducer(bootstrap, transactional_id="txn-fencing")
    zombie.begin_transaction()
    zombie.send_arrow(topic, rows(b"zombie"), KEYS)
    zombie.flush()
    successor = BulkProducer(bootstrap, transactional_id="txn-fencing")
    cluster = Cluster(bootstrap)
    try:
        assert successor.producer_id == zombie.producer_id
        assert successor.producer_epoch > zombie.producer_epoch
        # The zombie's open transaction was aborted by the successor's InitProducerId;
        # its next write or commit is refused, and so is all it tries after.
        with pytest.raises(ProducerFencedError):
            zombie.send_arrow(topic, rows(b"late"), KEYS)
            zombie.commit_transaction()
        with pytest.raises(ProducerFencedError):
            zombie.begin_transaction()
        successor.begin_transaction()
        successor.send_arrow(topic, rows(b"successor"), KEYS)
        successor.commit_transaction()
        cluster.wait_for_markers("txn-fencing")
        assert tags_read(cluster, topic, READ_COMMITTED) == {b"successor": ROWS}
        with pytest.raises(KafkaError):  # nothing open to commit
            successor.commit_transaction()
    finally:
        zombie.close()
        successor.close()
        cluster.close()


def test_the_driver_side_ends_a_transaction_a_closed_producer_left_open(module_broker):
    """What the Spark writer does: tasks flush and close, the driver commits."""
    bootstrap, topic = module_broker.bootstrap, "txn-handover"
    create_topic(bootstrap, topic, PARTITIONS)
    states = []
    for task in range(2):
        with BulkProducer(bootstrap, transactional_id=f"txn-handover-{task}",
                          transaction_timeout_ms=300_000) as producer:
            producer.begin_transaction()
            producer.send_arrow(topic, rows(b"task%d" % task), KEYS)
            producer.flush()
            states.append(producer.transaction_state())
    cluster = Cluster(bootstrap)
    try:
        assert tags_read(cluster, topic, READ_COMMITTED) == {}
        cluster.end_transaction(*states[0], commit=True)
        cluster.end_transaction(*states[1], commit=False)
        for transactional_id, _, _ in states:
            cluster.wait_for_markers(transactional_id)
        assert tags_read(cluster, topic, READ_COMMITTED) == {b"task0": ROWS}
        assert (cluster.list_offsets(topic, -1, READ_COMMITTED) ==
                cluster.list_offsets(topic, -1, READ_UNCOMMITTED))
    finally:
        cluster.close()

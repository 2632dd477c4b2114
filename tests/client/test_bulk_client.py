"""The project's bulk client against a real broker, checked with confluent-kafka."""

import signal

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.partitioner.default import murmur2

from pybroker.client import BulkProducer, Cluster, Fetcher
from pybroker.errors import ErrorCode, KafkaError


def create_topic(bootstrap, name, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def read_all(bootstrap, topic, partitions, expected):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    while len(got) < expected:
        msgs = consumer.consume(min(10000, expected - len(got)), timeout=10)
        assert msgs, f"stalled after {len(got)} of {expected}"
        for m in msgs:
            assert m.error() is None, m.error()
            got.append(m)
    consumer.close()
    return got


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd", "gzip", "snappy"])
def test_keyed_rows_land_on_the_java_partition(module_broker, compression):
    topic = f"bulk-{compression}"
    create_topic(module_broker.bootstrap, topic, 6)
    n = 20_000
    keys = pa.array([b"key-%d" % (i % 997) for i in range(n)])
    values = pa.array([b"value-%d" % i for i in range(n)])
    headers = pa.array([[{"key": "h", "value": b"%d" % i}] for i in range(n)],
                       pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))
    timestamps = pa.array([1_700_000_000_000 + i for i in range(n)], pa.int64())
    with BulkProducer(module_broker.bootstrap, compression=compression,
                      batch_bytes=64 << 10) as producer:
        producer.send_arrow(topic, values, keys, timestamps, headers)
        stats = producer.flush()
    assert stats.records == n and stats.batches > 6 and stats.retries == 0
    messages = read_all(module_broker.bootstrap, topic, 6, n)
    assert len(messages) == n
    by_value = {m.value(): m for m in messages}
    assert len(by_value) == n
    for i in range(0, n, 97):
        m = by_value[b"value-%d" % i]
        assert m.key() == b"key-%d" % (i % 997)
        assert m.partition() == (murmur2(m.key()) & 0x7FFFFFFF) % 6
        assert m.headers() == [("h", b"%d" % i)]
        assert m.timestamp()[1] == 1_700_000_000_000 + i


def test_null_keys_and_values_and_columnar_read_back(module_broker):
    topic = "bulk-nulls"
    create_topic(module_broker.bootstrap, topic, 1)
    values = pa.array([b"x", None, b"z"] * 1000)
    keys = pa.array([None, b"k", None] * 1000)
    with BulkProducer(module_broker.bootstrap) as producer:
        producer.send_arrow(topic, values, keys, partition=0)
    cluster = Cluster(module_broker.bootstrap)
    end = cluster.list_offsets(topic, -1)[0]
    assert end == 3000
    chunks = list(Fetcher(cluster).read_range(topic, 0, 0, end))
    cluster.close()
    got_values = [v for c in chunks for v in c["value"].to_pylist()]
    got_keys = [k for c in chunks for k in c["key"].to_pylist()]
    got_offsets = [o for c in chunks for o in c["offset"].to_pylist()]
    assert got_values == values.to_pylist()
    assert got_keys == keys.to_pylist()
    assert got_offsets == list(range(3000))


def test_read_range_over_many_fetches_and_stopped_early(module_broker):
    """Small fetches make read_range send each next Fetch ahead of decoding the last: every
    row comes once and in order, in chunks; a read abandoned with a Fetch ahead leaves the
    cluster's connection answering its next request correctly."""
    topic = "bulk-many-fetches"
    create_topic(module_broker.bootstrap, topic, 1)
    values = pa.array([b"m-%d" % i for i in range(20_000)])
    with BulkProducer(module_broker.bootstrap, batch_bytes=8 << 10) as producer:
        producer.send_arrow(topic, values, partition=0)
    cluster = Cluster(module_broker.bootstrap)
    fetcher = Fetcher(cluster, partition_max_bytes=32 << 10)
    chunks = list(fetcher.read_range(topic, 0, 150, 19_990, rows_per_chunk=5000))
    assert len(chunks) >= 3
    assert [v for c in chunks for v in c["value"].to_pylist()] == \
        values.to_pylist()[150:19_990]
    assert [o for c in chunks for o in c["offset"].to_pylist()] == list(range(150, 19_990))
    reader = fetcher.read_range(topic, 0, 0, 20_000, rows_per_chunk=1000)
    assert next(reader)["offset"].to_pylist()[:1] == [0]
    reader.close()  # with the next Fetch sent and not read
    assert cluster.list_offsets(topic, -1) == [20_000]
    assert [o for c in fetcher.read_range(topic, 0, 19_000, 19_005)
            for o in c["offset"].to_pylist()] == list(range(19_000, 19_005))
    cluster.close()


def test_retries_after_broker_restart_do_not_duplicate(broker):
    """Batches in flight when the broker dies are resent; idempotence drops duplicates."""
    topic = "bulk-restart"
    create_topic(broker.bootstrap, topic, 2)
    values = pa.array([b"r-%d" % i for i in range(50_000)])
    keys = pa.array([b"k-%d" % i for i in range(50_000)])
    producer = BulkProducer(broker.bootstrap, batch_bytes=32 << 10, retries=50)
    producer.send_arrow(topic, values.slice(0, 25_000), keys.slice(0, 25_000))
    producer.flush()
    producer.send_arrow(topic, values.slice(25_000), keys.slice(25_000))
    broker.restart(signal.SIGTERM)
    producer.flush()
    producer.close()
    messages = read_all(broker.bootstrap, topic, 2, 50_000)
    assert sorted(m.value() for m in messages) == sorted(values.to_pylist())


def test_sender_thread_error_is_raised_in_the_caller(module_broker):
    """A non-retriable error met by the sender thread surfaces in flush(); close() ends."""
    topic = "bulk-too-large"
    admin = AdminClient({"bootstrap.servers": module_broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": "2000"})]
                        )[topic].result(30)
    values = pa.array([b"x" * 100 for _ in range(2000)])
    producer = BulkProducer(module_broker.bootstrap, batch_bytes=64 << 10)
    with pytest.raises(KafkaError) as raised:
        producer.send_arrow(topic, values)  # the error may come back here already
        producer.flush()
    assert raised.value.code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE)
    producer.close()
    assert not producer._sender.is_alive()


def test_small_sends_fill_one_batch_per_partition_until_flush(module_broker):
    """Rows of many send_arrow calls share their partition's open batch; the open batches
    go at flush(), or all at once when together they pass max_open_bytes."""
    topic = "bulk-open-batches"
    create_topic(module_broker.bootstrap, topic, 3)
    chunks = [pa.array([b"c%d-%d" % (c, i) for i in range(300)]) for c in range(20)]
    keys = [pa.array([b"k%d" % (i % 50) for i in range(300)]) for _ in range(20)]
    with BulkProducer(module_broker.bootstrap) as producer:
        for values, k in zip(chunks, keys, strict=True):
            producer.send_arrow(topic, values, k)
        assert producer.stats.batches == 0  # all still open
        stats = producer.flush()
    assert (stats.records, stats.batches) == (6000, 3)
    messages = read_all(module_broker.bootstrap, topic, 3, 6000)
    by_partition: dict[int, list[bytes]] = {}
    for m in messages:
        by_partition.setdefault(m.partition(), []).append(m.value())
    # Each partition holds its rows in the order they were sent.
    expected: dict[int, list[bytes]] = {}
    for values, k in zip(chunks, keys, strict=True):
        for key, value in zip(k.to_pylist(), values.to_pylist(), strict=True):
            expected.setdefault((murmur2(key) & 0x7FFFFFFF) % 3, []).append(value)
    assert by_partition == expected
    # A small max_open_bytes sends the open batches whenever they pass it.
    with BulkProducer(module_broker.bootstrap, max_open_bytes=10_000) as producer:
        for values, k in zip(chunks, keys, strict=True):
            producer.send_arrow(topic, values, k)
        stats = producer.flush()
    assert stats.records == 6000 and stats.batches > 3


def test_a_rejected_row_leaves_no_empty_batch_behind(module_broker):
    """A partition's first row rejected (a null header key) must not leave an empty open
    batch that a later flush would fail on, taking the other open batches with it."""
    topic = "bulk-rejected"
    create_topic(module_broker.bootstrap, topic, 2)
    header_type = pa.list_(pa.struct([("key", pa.binary()), ("value", pa.binary())]))
    with BulkProducer(module_broker.bootstrap) as producer:
        producer.send_arrow(topic, pa.array([b"kept"]), partition=0)
        with pytest.raises(ValueError):
            producer.send_arrow(topic, pa.array([b"bad"]),
                                headers=pa.array([[{"key": None, "value": b"v"}]], header_type),
                                partition=1)
        producer.flush()
        producer.send_arrow(topic, pa.array([b"after"]), partition=1)
    got = read_all(module_broker.bootstrap, topic, 2, 2)
    assert sorted((m.partition(), m.value()) for m in got) == [(0, b"kept"), (1, b"after")]

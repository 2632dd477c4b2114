"""Real Kafka clients with their default settings against one broker for the module.

confluent-kafka (librdkafka), kafka-python 3.x (idempotent by default), aiokafka and the
kcat binary: every compression codec, keys, null keys and values, headers, timestamps,
LogAppendTime topics, many partitions, offsets by time.
"""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    Producer,
    TopicPartition,
)

from tests.admin.clients import create_topic, unique

TIMEOUT = 30.0
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def sample(i: int) -> dict:
    """Message i: every third has no key, every fifth no value, odd ones carry headers."""
    return {"key": None if i % 3 == 0 else b"key-%d" % i,
            "value": None if i % 5 == 0 else b"value-%d-" % i + b"x" * (i % 50),
            "headers": [("h", b"%d" % i), ("empty", None)] if i % 2 else None,
            "timestamp": 1_700_000_000_000 + i}


def confluent_consume(bootstrap: str, topic: str, count: int, partitions: int = 1) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g"),
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                out.append(msg)
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_round_trip(module_broker, codec):
    topic = unique(f"cf-{codec}")
    create_topic(module_broker.bootstrap, topic)
    producer = Producer({"bootstrap.servers": module_broker.bootstrap,
                         "compression.type": codec, "enable.idempotence": True})
    delivered = []
    for i in range(300):
        m = sample(i)
        producer.produce(topic, m["value"], m["key"], headers=m["headers"],
                         timestamp=m["timestamp"],
                         on_delivery=lambda err, msg: delivered.append(err or msg.offset()))
    assert producer.flush(TIMEOUT) == 0
    assert sorted(delivered) == list(range(300))
    got = confluent_consume(module_broker.bootstrap, topic, 300)
    assert [m.offset() for m in got] == list(range(300))
    for i, msg in enumerate(got):
        m = sample(i)
        assert (msg.key(), msg.value()) == (m["key"], m["value"])
        assert msg.timestamp() == (TIMESTAMP_CREATE_TIME, m["timestamp"])
        assert msg.headers() == m["headers"]


def test_log_append_time_topic(module_broker):
    topic = unique("lat")
    create_topic(module_broker.bootstrap, topic, config={"message.timestamp.type":
                                                          "LogAppendTime"})
    producer = Producer({"bootstrap.servers": module_broker.bootstrap})
    before = int(time.time() * 1000)
    producer.produce(topic, b"v", timestamp=1000)
    assert producer.flush(TIMEOUT) == 0
    (msg,) = confluent_consume(module_broker.bootstrap, topic, 1)
    kind, timestamp = msg.timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME and timestamp >= before


def test_many_partitions_and_offsets_by_time(module_broker):
    topic = unique("many")
    partitions = 48
    create_topic(module_broker.bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": module_broker.bootstrap, "linger.ms": 5})
    for p in range(partitions):
        for i in range(10):
            producer.produce(topic, b"%d-%d" % (p, i), partition=p, timestamp=1000 * (i + 1))
    assert producer.flush(TIMEOUT) == 0
    got = confluent_consume(module_broker.bootstrap, topic, partitions * 10, partitions)
    assert len(got) == partitions * 10
    assert {(m.partition(), m.value()) for m in got} == \
        {(p, b"%d-%d" % (p, i)) for p in range(partitions) for i in range(10)}
    consumer = Consumer({"bootstrap.servers": module_broker.bootstrap, "group.id": unique("g")})
    try:
        found = consumer.offsets_for_times(
            [TopicPartition(topic, p, 4500) for p in range(partitions)], TIMEOUT)
        assert {tp.offset for tp in found} == {4}
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 7), TIMEOUT)
        assert (low, high) == (0, 10)
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_idempotent_round_trip(module_broker, codec):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    topic = unique(f"kp-{codec}")
    producer = KafkaProducer(bootstrap_servers=module_broker.bootstrap, compression_type=codec)
    futures = []
    for i in range(200):
        m = sample(i)
        if m["key"] is None and m["value"] is None:
            m["value"] = b""
        futures.append(producer.send(topic, key=m["key"], value=m["value"],
                                     headers=[(k, v or b"") for k, v in m["headers"] or []],
                                     timestamp_ms=m["timestamp"]))
    producer.flush(TIMEOUT)
    assert [f.get(TIMEOUT).offset for f in futures] == list(range(200))
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=module_broker.bootstrap,
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([KTopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = []
    for msg in consumer:
        got.append(msg)
        if len(got) == 200:
            break
    consumer.close()
    assert [m.offset for m in got] == list(range(200))
    assert got[7].key == b"key-7" and got[7].value.startswith(b"value-7-")
    assert got[7].timestamp == sample(7)["timestamp"]
    assert got[5].value is None


def test_aiokafka_round_trip(module_broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = unique("aio")

    async def run() -> list:
        producer = AIOKafkaProducer(bootstrap_servers=module_broker.bootstrap,
                                    enable_idempotence=True, compression_type="lz4")
        await producer.start()
        try:
            sent = [await producer.send_and_wait(topic, b"v%d" % i, key=b"k%d" % i,
                                                 headers=[("h", b"1")]) for i in range(50)]
        finally:
            await producer.stop()
        assert [r.offset for r in sent] == list(range(50))
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=module_broker.bootstrap,
                                    auto_offset_reset="earliest", group_id=None)
        await consumer.start()
        got: list = []
        try:
            while len(got) < 50:
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500), TIMEOUT)
                for messages in batches.values():
                    got += messages
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(run())
    assert [(m.key, m.value) for m in got] == [(b"k%d" % i, b"v%d" % i) for i in range(50)]
    assert got[0].headers == (("h", b"1"),)


def test_kcat_round_trip(module_broker):
    topic = unique("kcat")
    lines = "".join(f"k{i}:v{i}\n" for i in range(100))
    subprocess.run(["kcat", "-b", module_broker.bootstrap, "-P", "-t", topic, "-K:",
                    "-z", "snappy"], input=lines.encode(), check=True, timeout=TIMEOUT)
    out = subprocess.run(["kcat", "-b", module_broker.bootstrap, "-C", "-t", topic, "-e",
                          "-q", "-f", "%o %k %s\n"], check=True, capture_output=True,
                         timeout=TIMEOUT).stdout.decode()
    assert out.splitlines() == [f"{i} k{i} v{i}" for i in range(100)]
    listing = subprocess.run(["kcat", "-b", module_broker.bootstrap, "-L", "-t", topic],
                             check=True, capture_output=True, timeout=TIMEOUT).stdout.decode()
    assert f'topic "{topic}" with 1 partitions' in listing


def test_confluent_message_past_max_message_bytes_is_refused(module_broker):
    topic = unique("big")
    create_topic(module_broker.bootstrap, topic, config={"max.message.bytes": "100000"})
    producer = Producer({"bootstrap.servers": module_broker.bootstrap,
                         "message.max.bytes": 1_000_000, "compression.type": "none"})
    results = []
    producer.produce(topic, b"a" * 90_000, on_delivery=lambda err, msg: results.append(err))
    producer.flush(TIMEOUT)
    producer.produce(topic, b"b" * 150_000, on_delivery=lambda err, msg: results.append(err))
    producer.flush(TIMEOUT)
    assert results[0] is None
    assert results[1] is not None and results[1].name() == "MSG_SIZE_TOO_LARGE"

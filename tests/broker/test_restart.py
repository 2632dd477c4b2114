"""Restarts between produce and consume: clean (SIGTERM) and crash (SIGKILL).

Every acknowledged message must be read back, producer ids must not be reused, and an
idempotent producer's retry after the restart must still be recognised as a duplicate.
"""

from __future__ import annotations

import signal
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from pybroker._native.records import encode_batch
from pybroker.errors import ErrorCode
from tests.broker.wire_client import WireClient, produce_body

TIMEOUT = 30.0
PRODUCE, INIT_PRODUCER_ID = 0, 22


def produce_acked(bootstrap: str, topic: str, count: int) -> list[tuple[int, bytes]]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 2,
                         "compression.type": "lz4"})
    acked: list[tuple[int, bytes]] = []

    def report(err, msg) -> None:
        if err is None:
            acked.append((msg.offset(), msg.value()))

    for i in range(count):
        producer.produce(topic, b"message-%06d" % i, partition=i % 3, on_delivery=report)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(TIMEOUT) == 0
    assert len(acked) == count
    return acked


def consume_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
    out: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append(msg.value())
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["clean", "crash"])
def test_acknowledged_messages_survive_a_restart(broker_factory, sig):
    broker = broker_factory(num_partitions=3)
    topic = f"restart-{uuid.uuid4().hex[:8]}"
    acked = produce_acked(broker.bootstrap, topic, 3000)
    broker.restart(sig)
    got = consume_all(broker.bootstrap, topic, len(acked))
    assert sorted(got) == sorted(value for _, value in acked)
    text = broker.log_text()
    assert "recovery done" in text and "ready: listening on" in text
    if sig == signal.SIGTERM:
        assert "closed logs" in text and "(clean)" in text
    else:
        assert "after an unclean shutdown" in text


def _init_pid(client: WireClient) -> int:
    response = client.request(INIT_PRODUCER_ID, 4, {"transactional_id": None,
                                                    "transaction_timeout_ms": 60000})
    assert response["error_code"] == 0
    return response["producer_id"]


def _produce(client: WireClient, topic: str, batch: bytes) -> dict:
    response = client.request(PRODUCE, 9, produce_body(topic, 0, batch))
    return response["responses"][0]["partition_responses"][0]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["clean", "crash"])
def test_producer_state_survives_a_restart(broker_factory, sig):
    broker = broker_factory()
    topic = f"idem-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.bootstrap) as client:
        client.request(3, 9, {"topics": [{"name": topic}], "allow_auto_topic_creation": True})
        pid = _init_pid(client)

        def batch(seq: int, n: int = 2) -> bytes:
            return encode_batch([b"s%d" % (seq + i) for i in range(n)], producer_id=pid,
                                producer_epoch=0, base_sequence=seq)

        assert _produce(client, topic, batch(0))["base_offset"] == 0
        assert _produce(client, topic, batch(2))["base_offset"] == 2
    broker.restart(sig)
    with WireClient(broker.bootstrap) as client:
        retried = _produce(client, topic, batch(2))
        assert retried["error_code"] == 0 and retried["base_offset"] == 2
        assert _produce(client, topic, batch(7))["error_code"] == \
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert _produce(client, topic, batch(4))["base_offset"] == 4
        assert _init_pid(client) > pid  # ids are never handed out twice

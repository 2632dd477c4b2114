"""Real clients over the SASL_PLAINTEXT and SASL_SSL listeners of a broker that serves
PLAINTEXT at the same time: confluent-kafka (librdkafka), kafka-python and aiokafka with
SCRAM and PLAIN produce and consume as the user whose SCRAM credentials were made through the
admin client; wrong credentials refused (the client told, the broker logging one line);
and the other clients served meanwhile."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError as KafkaPythonError

from tests.admin.clients import consume, create_topic, produce
from tests.sasl.conftest import SaslBroker

TIMEOUT = 30.0


def _topic() -> str:
    return f"sasl-{uuid.uuid4().hex[:8]}"


def _produce(conf: dict[str, Any], topic: str, values: list[bytes]) -> None:
    errors: list[Any] = []
    producer = Producer({**conf, "error_cb": errors.append})
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _m: err and errors.append(err))
    assert producer.flush(TIMEOUT) == 0, errors
    assert not errors, errors


def _consume(conf: dict[str, Any], topic: str, count: int) -> list[bytes]:
    consumer = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out.append(msg.value())
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize("mechanism,password", [
    ("SCRAM-SHA-512", "alice-secret"), ("SCRAM-SHA-256", "alice-secret"),
    ("PLAIN", "alice-secret")])
def test_confluent_kafka(module_sasl_broker: SaslBroker, mechanism: str, password: str):
    broker = module_sasl_broker
    topic = _topic()
    create_topic(broker.plaintext, topic)
    values = [b"%s-%d" % (mechanism.encode(), i) for i in range(50)]
    conf = broker.confluent("alice", password, mechanism)
    _produce(conf, topic, values)
    assert _consume(conf, topic, len(values)) == values
    # what went over SASL is what a plaintext client reads
    assert [m.value() for m in consume(broker.plaintext, topic, count=len(values))] == values


def test_confluent_kafka_over_sasl_ssl(module_sasl_broker: SaslBroker):
    broker = module_sasl_broker
    topic = _topic()
    create_topic(broker.plaintext, topic)
    values = [b"tls-%d" % i for i in range(20)]
    conf = broker.confluent("alice", "alice-secret", "SCRAM-SHA-512", tls=True)
    _produce(conf, topic, values)
    assert _consume(conf, topic, len(values)) == values
    plain = broker.confluent("bob", "bob-secret", "PLAIN", tls=True)
    assert _consume(plain, topic, len(values)) == values


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_kafka_python(module_sasl_broker: SaslBroker, mechanism: str):
    broker = module_sasl_broker
    topic = _topic()
    create_topic(broker.plaintext, topic)
    conf = broker.kafka_python("alice", "alice-secret", mechanism)
    producer = KafkaProducer(**conf)
    for i in range(20):
        producer.send(topic, b"kp-%d" % i)
    producer.flush(TIMEOUT)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=5000,
                             **conf)
    got = [m.value for m in consumer]
    consumer.close()
    assert got == [b"kp-%d" % i for i in range(20)]


@pytest.mark.parametrize("mechanism,user,password", [
    ("SCRAM-SHA-512", "alice", "wrong"), ("SCRAM-SHA-256", "nobody", "x"),
    ("PLAIN", "alice", "wrong"), ("PLAIN", "carol", "alice-secret")])
def test_wrong_credentials_refused(module_sasl_broker: SaslBroker, mechanism: str,
                                   user: str, password: str, caplog: pytest.LogCaptureFixture):
    broker = module_sasl_broker
    before = broker.process.log_text().count("failed authentication")
    errors: list[Any] = []
    client = AdminClient({**broker.confluent(user, password, mechanism),
                          "error_cb": errors.append, "reconnect.backoff.ms": 10000,
                          "reconnect.backoff.max.ms": 10000})
    with pytest.raises(KafkaException):
        client.list_topics(timeout=3)
    client.poll(1)
    assert any(e.name() == "_AUTHENTICATION" and "Authentication failed" in e.str()
               for e in errors), errors
    log = broker.process.log_text()
    assert log.count("failed authentication") > before
    assert f"failed authentication with {mechanism} on listener SASL_PLAINTEXT" in log
    # kafka-python is refused too, and told why
    with caplog.at_level(logging.ERROR, logger="kafka"), pytest.raises(KafkaPythonError):
        KafkaProducer(**broker.kafka_python(user, password, mechanism,
                                            bootstrap_timeout_ms=3000))
    # (kafka-python's PLAIN reports only the closed connection, against Kafka 4.1 too)
    assert "SaslAuthenticationFailedError" in caplog.text or mechanism == "PLAIN"
    # and the others are still served
    topic = _topic()
    create_topic(broker.plaintext, topic)
    produce(broker.plaintext, topic, [b"x"])
    assert _consume(broker.confluent("alice", "alice-secret"), topic, 1) == [b"x"]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_aiokafka(module_sasl_broker: SaslBroker, mechanism: str):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    broker = module_sasl_broker
    topic = _topic()
    create_topic(broker.plaintext, topic)
    conf = {"bootstrap_servers": broker.sasl, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism, "sasl_plain_username": "alice",
            "sasl_plain_password": "alice-secret"}

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**conf)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, b"aio-%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf)
        await consumer.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + TIMEOUT
            while len(got) < 10 and time.monotonic() < deadline:
                for messages in (await consumer.getmany(timeout_ms=500)).values():
                    got += [m.value for m in messages]
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == [b"aio-%d" % i for i in range(10)]

"""Real clients over the SSL listener of a broker that serves PLAINTEXT at the same time:
confluent-kafka (librdkafka) and kafka-python produce and consume, large fetches (file
regions sent through TLS by the copying path), each listener's clients told that
listener's endpoints, and bad TLS clients closed with a log line while others go on."""

from __future__ import annotations

import hashlib
import os
import socket
import ssl
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer

from tests.broker.wire_client import WireClient
from tests.tls.certs import Stores
from tests.tls.conftest import TlsBroker, client_context, confluent_ssl

API_VERSIONS, METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = 18, 3, 10, 60
DEADLINE_S = 60


def _topic() -> str:
    return f"tls-{uuid.uuid4().hex[:8]}"


def _wait_for_log(broker: TlsBroker, text: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while text not in broker.process.log_text():
        assert time.monotonic() < deadline, f"no {text!r} in the broker's log"
        time.sleep(0.05)


def _read_until_closed(sock: socket.socket) -> None:
    """Whatever the broker sends (a TLS alert at most), then its close."""
    received = 0
    try:
        while chunk := sock.recv(4096):
            received += len(chunk)
            assert received < 1024, "the broker answered a client that never shook hands"
    except ConnectionResetError:
        pass


def _consume_all(conf: dict, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                         "fetch.max.bytes": 50 * 1024 * 1024,
                         "max.partition.fetch.bytes": 10 * 1024 * 1024})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    finally:
        consumer.close()
    return values


def test_each_listener_tells_its_own_endpoints(module_tls_broker: TlsBroker,
                                               stores: Stores) -> None:
    over_ssl = AdminClient(confluent_ssl(stores, module_tls_broker.ssl))
    brokers = over_ssl.list_topics(timeout=30).brokers
    assert [(b.host, b.port) for b in brokers.values()] == [
        ("127.0.0.1", module_tls_broker.ssl_port)]
    plain = AdminClient({"bootstrap.servers": module_tls_broker.plaintext})
    brokers = plain.list_topics(timeout=30).brokers
    assert [(b.host, b.port) for b in brokers.values()] == [
        ("127.0.0.1", module_tls_broker.process.port)]


def test_wire_requests_over_tls_name_the_ssl_endpoint(module_tls_broker: TlsBroker,
                                                      stores: Stores) -> None:
    with WireClient(module_tls_broker.ssl, tls=client_context(stores)) as client:
        versions = client.request(API_VERSIONS, 3, {"client_software_name": "tests",
                                                    "client_software_version": "1"})
        assert versions["error_code"] == 0
        cluster = client.request(DESCRIBE_CLUSTER, 0, {})
        assert [(b["host"], b["port"]) for b in cluster["brokers"]] == [
            ("127.0.0.1", module_tls_broker.ssl_port)]
        deadline = time.monotonic() + DEADLINE_S
        while True:  # the offsets topic is created on the first FindCoordinator
            found = client.request(FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
            if found["error_code"] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert (found["error_code"], found["port"]) == (0, module_tls_broker.ssl_port)
    with WireClient(module_tls_broker.plaintext) as client:
        found = client.request(FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
        assert (found["error_code"], found["port"]) == (0, module_tls_broker.process.port)


def test_confluent_produce_and_large_fetch_over_tls(module_tls_broker: TlsBroker,
                                                    stores: Stores) -> None:
    """Batches of ~1 MiB and fetches of many MiB: file regions well above the TLS
    path's read chunk go out in pieces, every byte intact."""
    topic = _topic()
    conf = confluent_ssl(stores, module_tls_broker.ssl)
    producer = Producer({**conf, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "none"})
    sent = [hashlib.sha256(str(i).encode()).digest() * 3000 for i in range(300)]  # 96 KB
    for value in sent:
        producer.produce(topic, value)
    assert producer.flush(DEADLINE_S) == 0
    received = _consume_all(conf, topic, len(sent))
    assert sorted(received) == sorted(sent)


def test_kafka_python_over_tls(module_tls_broker: TlsBroker, stores: Stores) -> None:
    topic = _topic()
    producer = KafkaProducer(bootstrap_servers=module_tls_broker.ssl,
                             security_protocol="SSL", ssl_cafile=stores.ca)
    for i in range(200):
        producer.send(topic, f"value-{i}".encode() * 100)
    producer.flush(DEADLINE_S)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=module_tls_broker.ssl,
                             security_protocol="SSL", ssl_cafile=stores.ca,
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    values = [message.value for message in consumer]
    consumer.close()
    assert sorted(values) == sorted(f"value-{i}".encode() * 100 for i in range(200))


def test_plaintext_and_garbage_on_the_ssl_port_are_closed(module_tls_broker: TlsBroker,
                                                          stores: Stores) -> None:
    before = module_tls_broker.process.log_text().count("TLS handshake failed")
    with WireClient(module_tls_broker.ssl) as plain:  # a Kafka request, no TLS
        plain.send(API_VERSIONS, 0, {})
        _read_until_closed(plain.sock)
    with socket.create_connection(("127.0.0.1", module_tls_broker.ssl_port),
                                  timeout=DEADLINE_S) as raw:
        raw.sendall(b"\x16\x03\x01\x00\x05garbage and more garbage")
        _read_until_closed(raw)
    deadline = time.monotonic() + DEADLINE_S
    while module_tls_broker.process.log_text().count("TLS handshake failed") < before + 2:
        assert time.monotonic() < deadline, "the refused handshakes were not logged"
        time.sleep(0.05)
    with WireClient(module_tls_broker.ssl, tls=client_context(stores)) as client:
        assert client.request(API_VERSIONS, 3, {"client_software_name": "t",
                                                "client_software_version": "1"}
                              )["error_code"] == 0


def test_a_client_trusting_another_ca_refuses_the_broker(module_tls_broker: TlsBroker,
                                                         stores: Stores) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        WireClient(module_tls_broker.ssl, tls=client_context(stores, ca=stores.other_ca))


def test_tls_versions(tls_broker_factory, stores: Stores) -> None:
    only13 = tls_broker_factory(ssl_enabled_protocols="TLSv1.3")
    ctx = client_context(stores)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        WireClient(only13.ssl, tls=ctx)
    with WireClient(only13.ssl, tls=client_context(stores)) as client:
        assert client.sock.version() == "TLSv1.3"
    both = tls_broker_factory()
    with WireClient(both.ssl, tls=ctx) as client:
        assert client.sock.version() == "TLSv1.2"
        assert client.request(API_VERSIONS, 3, {"client_software_name": "t",
                                                "client_software_version": "1"}
                              )["error_code"] == 0


def test_a_handshake_never_finished_is_closed(tls_broker_factory, stores: Stores) -> None:
    broker = tls_broker_factory(ssl_handshake_timeout_ms=300)
    with socket.create_connection(("127.0.0.1", broker.ssl_port), timeout=30) as silent:
        assert silent.recv(1) == b""  # closed by the broker, not by our timeout
    _wait_for_log(broker, "TLS handshake not done")
    with WireClient(broker.ssl, tls=client_context(stores)) as client:
        assert client.request(METADATA, 1, {"topics": []})["brokers"]


def test_aiokafka_over_tls(module_tls_broker: TlsBroker, stores: Stores) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    topic = _topic()
    values = [f"aio-{i}".encode() * 1000 for i in range(100)]

    async def run() -> list[bytes]:
        context = create_ssl_context(cafile=stores.ca)
        producer = AIOKafkaProducer(bootstrap_servers=module_tls_broker.ssl,
                                    security_protocol="SSL", ssl_context=context)
        await producer.start()
        try:
            for value in values:
                await producer.send(topic, value)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=module_tls_broker.ssl,
                                    security_protocol="SSL", ssl_context=context,
                                    auto_offset_reset="earliest")
        await consumer.start()
        received: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        try:
            while len(received) < len(values) and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                received += [m.value for messages in batches.values() for m in messages]
        finally:
            await consumer.stop()
        return received

    assert sorted(asyncio.run(run())) == sorted(values)


def test_garbage_after_the_handshake_closes_that_connection(module_tls_broker: TlsBroker,
                                                            stores: Stores) -> None:
    """A record that does not decrypt: the connection goes with a log line."""
    before = module_tls_broker.process.log_text().count("receive failed")
    with WireClient(module_tls_broker.ssl, tls=client_context(stores)) as client:
        assert client.request(METADATA, 1, {"topics": []})["brokers"]
        raw = socket.socket(fileno=os.dup(client.sock.fileno()))
        raw.sendall(b"\x17\x03\x03\x00\x20" + b"\x00" * 32)  # application data, bad MAC
        raw.close()
        with pytest.raises((ssl.SSLError, ConnectionError)):
            client.request(METADATA, 1, {"topics": []})
    deadline = time.monotonic() + DEADLINE_S
    while module_tls_broker.process.log_text().count("receive failed") <= before:
        assert time.monotonic() < deadline, "the bad record was not logged"
        time.sleep(0.05)


def test_memory_bound_pauses_and_resumes_tls_connections(tls_broker_factory,
                                                          stores: Stores) -> None:
    """Producers of large batches on a broker whose request memory holds two of them:
    TLS connections paused by the bound resume (bytes OpenSSL holds decrypted included)
    and every record is acknowledged."""
    broker = tls_broker_factory(queued_max_request_bytes=2_500_000,
                                socket_request_max_bytes=2_000_000)
    topic = _topic()
    conf = confluent_ssl(stores, broker.ssl)
    errors: list[object] = []
    producers = [Producer({**conf, "linger.ms": 5, "batch.size": 900_000,
                           "compression.type": "none"}) for _ in range(4)]
    sent = 0
    for round_ in range(40):
        for i, producer in enumerate(producers):
            value = hashlib.sha256(f"{round_}-{i}".encode()).digest() * 6000  # 192 KB
            producer.produce(topic, value,
                             on_delivery=lambda err, _msg: err and errors.append(err))
            sent += 1
        for producer in producers:
            producer.poll(0)
    for producer in producers:
        assert producer.flush(DEADLINE_S) == 0
    assert errors == []
    assert len(_consume_all(conf, topic, sent)) == sent

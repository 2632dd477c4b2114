"""Restarts between produce and consume: clean (SIGTERM) and crash (SIGKILL).

Every acknowledged message must be read back, producer ids must not be reused, and an
idempotent producer's retry after the restart must still be recognised as a duplicate,
also when its last write is far behind the log end (its state comes from the partition's
producer snapshots, ``<offset>.snapshot``, taken at every roll and at shutdown).
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import threading
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from pybroker._native.records import HEADER_SIZE, encode_batch, read_batch_header
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


def consume_all(bootstrap: str, topic: str, count: int, partitions: int = 3,
                isolation: str = "read_uncommitted") -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
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
    broker.stop(sig)
    if sig == signal.SIGTERM:  # a clean shutdown snapshots the producers at the log end
        assert _snapshots(broker, topic) == [4]
    broker.start()
    with WireClient(broker.bootstrap) as client:
        retried = _produce(client, topic, batch(2))
        assert retried["error_code"] == 0 and retried["base_offset"] == 2
        assert _produce(client, topic, batch(7))["error_code"] == \
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert _produce(client, topic, batch(4))["base_offset"] == 4
        assert _init_pid(client) > pid  # ids are never handed out twice


def _snapshots(broker, topic: str) -> list[int]:
    names = os.listdir(os.path.join(broker.data_dir, f"{topic}-0"))
    return sorted(int(name[:20]) for name in names if name.endswith(".snapshot"))


def stored_idempotent_batches(data_dir: str, topic: str) -> list[tuple[int, bytes]]:
    """(base offset, bytes) of every batch with a producer id in partition 0, all
    segments, as stored: a producer's retry of one is these bytes (the CRC does not cover
    the offset the broker stamped)."""
    directory = os.path.join(data_dir, f"{topic}-0")
    found = []
    for name in sorted(n for n in os.listdir(directory) if n.endswith(".log")):
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        position = 0
        while position + HEADER_SIZE <= len(data):
            info = read_batch_header(data, position)
            if info.producer_id >= 0:
                found.append((info.base_offset, data[position:position + info.size]))
            position += info.size
    return found


def test_an_old_producers_retry_is_recognised_after_a_crash(broker_factory):
    """A confluent-kafka idempotent producer writes; then 72 MB of other writes follow
    on the partition, more than the 64 MiB tail an earlier version replayed after a
    crash. SIGKILL, restart: a retry of the producer's last batch is answered with its
    original offset (a duplicate, not written again), which only a snapshot can know."""
    broker = broker_factory(log_segment_bytes=8 * 1024 * 1024)
    topic = f"old-idem-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    for i in range(500):
        producer.produce(topic, b"idempotent-%04d" % i, partition=0)
    assert producer.flush(TIMEOUT) == 0
    *_, (last_offset, last_batch) = stored_idempotent_batches(broker.data_dir, topic)
    filler = encode_batch([b"f" * 1000] * 1000)  # ~1 MB (max.message.bytes), no producer id
    with WireClient(broker.bootstrap) as client:
        for _ in range(72):
            assert _produce(client, topic, filler)["error_code"] == 0
    assert len(_snapshots(broker, topic)) >= 8  # one at each roll
    broker.restart(signal.SIGKILL)
    assert "after an unclean shutdown" in broker.log_text()
    with WireClient(broker.bootstrap) as client:
        retried = _produce(client, topic, last_batch)
        assert retried["error_code"] == 0 and retried["base_offset"] == last_offset
        end = client.request(2, 1, {"replica_id": -1, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "timestamp": -1}]}]})
    assert end["topics"][0]["partitions"][0]["offset"] == 500 + 72 * 1000  # not appended
    for i in range(500, 510):  # the producer goes on in sequence
        producer.produce(topic, b"idempotent-%04d" % i, partition=0)
    assert producer.flush(TIMEOUT) == 0


class DroppingProxy:
    """Forwards TCP from ``listener`` to the broker; every ``every``-th response is
    swallowed and both connections closed, so the client must retry requests the broker
    already handled."""

    def __init__(self, listener: socket.socket, target_port: int, every: int) -> None:
        self.listener = listener
        self.target_port = target_port
        self.every = every
        self.responses = 0
        self.dropped = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                return
            threading.Thread(target=self._pump, args=(client, upstream, False),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True),
                             daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, responses: bool) -> None:
        try:
            while True:
                head = src.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    break
                body = src.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
                if responses:
                    with self._lock:
                        self.responses += 1
                        drop = self.responses % self.every == 0
                        self.dropped += drop
                    if drop:
                        break
                dst.sendall(head + body)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass


def test_idempotent_retries_after_lost_responses_write_each_message_once(broker_factory):
    # the broker advertises the proxy, so every connection of the client crosses it
    listener = socket.create_server(("127.0.0.1", 0))
    proxy_port = listener.getsockname()[1]
    broker = broker_factory(num_partitions=3, advertised_listeners=f"127.0.0.1:{proxy_port}")
    proxy = DroppingProxy(listener, broker.port, every=9)
    topic = f"retried-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{proxy_port}", "acks": "all",
                         "enable.idempotence": True, "linger.ms": 1, "batch.num.messages": 20,
                         "retry.backoff.ms": 10, "reconnect.backoff.ms": 10})
    errors: list = []
    for i in range(2000):
        producer.produce(topic, b"m-%05d" % i, partition=i % 3,
                         on_delivery=lambda err, msg: err and errors.append(err))
        if i % 100 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    assert proxy.dropped > 0  # responses were lost and requests retried
    proxy.every = 2**62  # the consumer also goes through the proxy: no more losses
    got = consume_all(broker.bootstrap, topic, 2000)
    listener.close()
    assert sorted(got) == [b"m-%05d" % i for i in range(2000)]  # each exactly once

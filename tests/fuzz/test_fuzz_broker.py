"""Fuzz a running broker over many connections, then check it is healthy.

A seeded loop (reproducible: ``PYBROKER_FUZZ_SEED``, bounded by ``FRAMES`` and
``SECONDS``) sends, over ``CONNECTIONS`` sockets at once:
- valid requests: captured from real clients (confluent-kafka producer, consumer group and
  admin client, kafka-python producer and consumer) through a recording proxy
  (``capture.py``), and built with the codec (ApiVersions, Metadata, Produce, Fetch,
  ListOffsets, InitProducerId, DescribeConfigs, DeleteRecords, DescribeCluster,
  FindCoordinator); and mutations of them: flipped bytes,
  int32 fields set to extremes, truncation, insertion, a rewritten API key or version, a
  lying size prefix, two frames glued together;
- structurally valid bodies with random values (``tests.protocol.samples``) for every
  API version the broker advertises in ApiVersions, except CreateTopics: a random name
  with up to 2^31 partitions is unbounded work the broker does as asked (a random
  CreatePartitions only names topics that do not exist);
- pure random bytes.
Responses are drained as they come and not checked: a broker may answer, refuse or close.
Afterwards the process must be alive, its log free of tracebacks (a handler bug is logged
with one before UNKNOWN_SERVER_ERROR is sent) and a real client must produce and consume.
"""

from __future__ import annotations

import os
import random
import select
import socket
import struct
import time
import warnings
from collections.abc import Callable, Sequence

from pybroker._native.records import encode_batch
from pybroker.net.protocol import codec, messages
from tests.admin.clients import (
    admin,
    consume,
    create_topic,
    forget_admin,
    produce,
    unique,
    wait_all,
)
from tests.broker.wire_client import WireClient
from tests.fuzz.capture import CapturingProxy
from tests.protocol.samples import sample

SEED = int(os.environ.get("PYBROKER_FUZZ_SEED", "20261121"))
FRAMES = 4000
SECONDS = 25.0
CONNECTIONS = 16
MAX_REQUEST = 256 * 1024  # socket.request.max.bytes of the fuzzed broker
UNSAFE_RANDOM = {19}  # CreateTopics, see the module docstring


def valid_requests(topic: str, rnd: random.Random) -> list[bytes]:
    """Requests a client could send, on ``topic`` (2 partitions, some data)."""
    zero = codec.ZERO_UUID
    batch = encode_batch([b"v%d" % i for i in range(rnd.randint(1, 5))])
    idempotent = encode_batch([b"idem"], producer_id=rnd.randint(0, 5), producer_epoch=0,
                              base_sequence=rnd.randint(0, 3))
    part = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 4096}
    bodies: list[tuple[int, int, dict]] = [
        (18, 3, {"client_software_name": "fuzz", "client_software_version": "1"}),
        (18, 0, {}),
        (3, 12, {"topics": [{"name": topic, "topic_id": zero}],
                 "allow_auto_topic_creation": False}),
        (3, 1, {"topics": None}),
        (0, 9, {"transactional_id": None, "acks": rnd.choice([0, 1, -1]), "timeout_ms": 1000,
                "topic_data": [{"name": topic, "partition_data": [
                    {"index": rnd.randint(0, 1), "records": batch}]}]}),
        (0, 3, {"transactional_id": None, "acks": 1, "timeout_ms": 1000,
                "topic_data": [{"name": topic, "partition_data": [
                    {"index": 1, "records": idempotent}]}]}),
        (1, 12, {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": 65536, "topics": [
            {"topic": topic, "partitions": [part]}], "forgotten_topics_data": []}),
        (1, 4, {"max_wait_ms": 10, "min_bytes": 1, "max_bytes": 65536, "topics": [
            {"topic": topic, "partitions": [part]}]}),
        (2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": ts}]}
            for ts in (-1, -2, 0)]}),
        (22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                 "producer_id": -1, "producer_epoch": -1}),
        (32, 4, {"resources": [{"resource_type": 2, "resource_name": topic,
                                "configuration_keys": None},
                               {"resource_type": 4, "resource_name": "0",
                                "configuration_keys": ["num.partitions"]}],
                 "include_synonyms": True, "include_documentation": False}),
        (21, 2, {"topics": [{"name": topic, "partitions": [
            {"partition_index": 1, "offset": 0}]}], "timeout_ms": 1000}),
        (60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 1}),
        (10, 4, {"key_type": 0, "coordinator_keys": ["fuzz-group"]}),
    ]
    return [codec.encode_request(k, v, rnd.randint(0, 2**31 - 1), codec.with_defaults(k, v, body))
            for k, v, body in bodies]


def served_versions(bootstrap: str) -> list[tuple[int, int]]:
    """(api key, version) pairs the broker advertises, less the unsafe ones."""
    with WireClient(bootstrap) as client:
        keys = client.request(18, 3, {"client_software_name": "fuzz",
                                      "client_software_version": "1"})["api_keys"]
    return [(k["api_key"], v) for k in keys if k["api_key"] not in UNSAFE_RANDOM
            and k["api_key"] in messages.APIS
            for v in range(k["min_version"], k["max_version"] + 1)]


def random_body_request(rnd: random.Random, served: list[tuple[int, int]]) -> bytes | None:
    key, version = rnd.choice(served)
    try:
        return codec.encode_request(key, version, rnd.randint(0, 1000),
                                    sample(key, version, False, rnd.randint(0, 50)))
    except ValueError:  # a sample the encoder refuses (value out of its type)
        return None


def _with_size(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def mutate(frame: bytes, rnd: random.Random) -> bytes:
    body = bytearray(frame[4:])
    kind = rnd.randrange(8)
    if kind == 0:  # flip bytes
        for _ in range(rnd.randint(1, 4)):
            body[rnd.randrange(len(body))] = rnd.randrange(256)
    elif kind == 1 and len(body) >= 4:  # an int32 (length, count, partition...) to an extreme
        pos = rnd.randrange(len(body) - 3)
        body[pos:pos + 4] = struct.pack(">i", rnd.choice([-1, -2**31, 2**31 - 1, 0x10000]))
    elif kind == 2:  # truncate
        del body[rnd.randrange(len(body)):]
    elif kind == 3:  # insert garbage
        pos = rnd.randrange(len(body) + 1)
        body[pos:pos] = rnd.randbytes(rnd.randint(1, 16))
    elif kind == 4 and len(body) >= 4:  # another api key or version
        pos = rnd.choice([0, 2])
        body[pos:pos + 2] = struct.pack(">h", rnd.choice([rnd.randint(-5, 80), 999, -1]))
    elif kind == 5:  # the size prefix lies (shorter: the rest is read as the next frame)
        return struct.pack(">i", rnd.randint(0, len(body))) + bytes(body)
    elif kind == 6:  # two frames glued, the second mutated again
        return _with_size(bytes(body)) + mutate(frame, rnd)
    else:  # a varint / compact length byte of a flexible request set huge
        body[rnd.randrange(len(body))] = rnd.choice([0x00, 0x7F, 0x80, 0xFF])
    return _with_size(bytes(body))


class Pool:
    """Non-blocking sockets to the broker; a closed one is replaced."""

    def __init__(self, bootstrap: str, size: int) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.address = (host, int(port))
        self.socks = [self._connect() for _ in range(size)]
        self.closed_by_broker = 0

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=10)
        sock.setblocking(False)
        return sock

    def send(self, index: int, data: bytes) -> None:
        sock = self.socks[index]
        view = memoryview(data)
        deadline = time.monotonic() + 2.0
        while view and time.monotonic() < deadline:
            try:
                view = view[sock.send(view):]
            except BlockingIOError:
                self.drain(0.01)
            except OSError:  # reset by the broker
                self._replace(index)
                return

    def drain(self, timeout: float = 0.0) -> None:
        readable, _, _ = select.select(self.socks, [], [], timeout)
        for sock in readable:
            try:
                data = sock.recv(1 << 20)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                self._replace(self.socks.index(sock))

    def _replace(self, index: int) -> None:
        self.closed_by_broker += 1
        self.socks[index].close()
        self.socks[index] = self._connect()

    def reset(self, index: int) -> None:
        """Start a fresh connection (a lying prefix may leave the old one mid-frame)."""
        self.socks[index].close()
        self.socks[index] = self._connect()

    def close(self) -> None:
        for sock in self.socks:
            sock.close()


def capture_clients(bootstrap: str, topic: str) -> None:
    """Real clients at work on ``topic`` (through the proxy): what they send is recorded."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import ConfigResource

    produce(bootstrap, topic, [b"c%d" % i for i in range(20)], partition=1,
            **{"enable.idempotence": True, "compression.type": "lz4"})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-capture",
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 20
    seen = 0
    while seen < 20 and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        seen += msg is not None and not msg.error()
    consumer.commit(asynchronous=False)
    consumer.close()
    client = admin(bootstrap)
    wait_all(client.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]))
    wait_all(client.delete_records([TopicPartition(topic, 1, 2)]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaConsumer, KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip")
    producer.send(topic, b"kafka-python", key=b"k", partition=0).get(timeout=30)
    producer.close()
    reader = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                           enable_auto_commit=False, consumer_timeout_ms=1000)
    list(reader)
    reader.close()


def fuzz(bootstrap: str, topic: str, seed: int, captured: Sequence[bytes] = ()) -> dict[str, int]:
    rnd = random.Random(seed)
    served = served_versions(bootstrap)
    pool = Pool(bootstrap, CONNECTIONS)

    def seed_request() -> bytes:
        if captured and rnd.random() < 0.5:
            return rnd.choice(captured)
        return rnd.choice(valid_requests(topic, rnd))

    generators: list[Callable[[], bytes | None]] = [
        seed_request,
        lambda: mutate(seed_request(), rnd),
        lambda: mutate(seed_request(), rnd),
        lambda: random_body_request(rnd, served),
        lambda: _with_size(rnd.randbytes(rnd.randint(0, 64))),
    ]
    sent = 0
    deadline = time.monotonic() + SECONDS
    try:
        while sent < FRAMES and time.monotonic() < deadline:
            frame = rnd.choice(generators)()
            if frame is None:
                continue
            index = rnd.randrange(CONNECTIONS)
            pool.send(index, frame)
            sent += 1
            if rnd.random() < 0.02:
                pool.reset(index)
            pool.drain()
        return {"sent": sent, "closed_by_broker": pool.closed_by_broker}
    finally:
        pool.close()


def test_fuzzed_broker_stays_healthy(broker_factory):
    proxy = CapturingProxy()
    broker = broker_factory(socket_request_max_bytes=MAX_REQUEST,
                            auto_create_topics_enable=False,
                            advertised_listeners=proxy.advertised)
    proxy.start(broker.bootstrap)
    topic = unique("fuzz")
    create_topic(broker.bootstrap, topic, 2)
    try:
        capture_clients(f"127.0.0.1:{proxy.port}", topic)
        captured = list(proxy.frames)
        keys = {struct.unpack_from(">h", frame, 4)[0] for frame in captured}
        # Produce, Fetch, ListOffsets, Metadata, OffsetCommit, OffsetFetch, FindCoordinator,
        # JoinGroup, SyncGroup, DeleteRecords, InitProducerId, DescribeConfigs
        assert {0, 1, 2, 3, 8, 9, 10, 11, 14, 21, 22, 32} <= keys, sorted(keys)

        result = fuzz(broker.bootstrap, topic, SEED, captured)
        assert result["sent"] >= 500, result  # the loop really ran (bounded by time)
        assert result["closed_by_broker"] > 0, result  # and bad frames were really refused
        _check_healthy(broker)
    finally:
        forget_admin(f"127.0.0.1:{proxy.port}")  # the broker's own goes when it stops
        proxy.close()


def _check_healthy(broker) -> None:
    assert broker.alive(), broker.log_text()[-4000:]
    log = broker.log_text()
    assert "Traceback" not in log, f"seed {SEED}:\n" + _tracebacks(log)
    healthy = unique("after")
    create_topic(broker.bootstrap, healthy, 1)
    produce(broker.bootstrap, healthy, [b"a", b"b"], **{"enable.idempotence": True})
    assert [m.value() for m in consume(broker.bootstrap, healthy)] == [b"a", b"b"]
    assert broker.stop() == 0  # and it still shuts down cleanly


def _tracebacks(log: str) -> str:
    """The log lines before and after each traceback, for the failure message."""
    lines = log.splitlines()
    picked = [i for i, line in enumerate(lines) if "Traceback" in line]
    return "\n---\n".join("\n".join(lines[max(0, i - 2):i + 25]) for i in picked[:5])

"""Producer backends: how a producer process turns "send n messages" into requests.

``librdkafka`` (confluent-kafka) is the client every broker is compared with.
``pybroker-native`` drives the project's own bulk producer (``pybroker.client``, issue 5)
to find the broker's ceiling when librdkafka's per-message Python calls are the limit.

A backend has ``connect(timeout)``, ``send(n) -> enqueued``, ``service(timeout)`` (run
delivery callbacks), ``flush(timeout) -> still in flight`` and ``close()``, and reports each
acknowledged message's publish latency to the worker's Recorder.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from bench.driver.messages import payload_pool, stamp
from bench.driver.recorder import Recorder
from bench.driver.workload import TIMESTAMP_BYTES, Workload


class BackendUnavailable(RuntimeError):
    """The workload asks for a producer backend this installation cannot run."""


class Backend:
    """What the pacing loop needs; subclasses set ``producer`` and implement ``send``."""
    producer: Any

    def connect(self, timeout: float) -> None:
        pass

    def send(self, n: int) -> int:
        raise NotImplementedError

    def service(self, timeout: float) -> None:
        self.producer.poll(timeout)

    def flush(self, timeout: float) -> int:
        return int(self.producer.flush(timeout))

    def close(self) -> None:
        pass


class LibrdkafkaBackend(Backend):
    def __init__(self, workload: Workload, bootstrap: str, topics: list[str],
                 keys: list[bytes] | None, seed: int, recorder: Recorder):
        from confluent_kafka import Producer

        pending = recorder.pending.append
        report_error = recorder.error

        def on_delivery(err: Any, message: Any) -> None:
            # Runs once per message inside poll()/flush(): keep it to one append.
            if err is None:
                pending(message.latency() * 1e6)
            else:
                report_error(err)

        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "acks": workload.acks,
            "linger.ms": workload.linger_ms,
            "batch.size": workload.batch_size,
            "compression.type": workload.compression,
            # At "max" the local queue fills and BufferError paces the sender. Keep it a
            # fraction of a second deep: enough to keep batches full, but shallow enough
            # that publish latency is mostly the broker's and the final flush is short.
            "queue.buffering.max.messages": 200_000,
            "queue.buffering.max.kbytes": 32_768,
            "on_delivery": on_delivery,
        }
        config.update(workload.producer_config)
        self.producer = Producer(config)
        self.topics = topics
        self.bodies = payload_pool(workload, seed)
        self.keys = keys
        self.counter = itertools.count()

    def connect(self, timeout: float) -> None:
        for topic in self.topics:
            self.producer.list_topics(topic, timeout=timeout)

    def send(self, n: int) -> int:
        produce, monotonic_ns = self.producer.produce, time.monotonic_ns
        bodies, keys, topics, counter = self.bodies, self.keys, self.topics, self.counter
        nbodies, ntopics = len(bodies), len(topics)
        keys = keys or [None]  # type: ignore[list-item]
        nkeys = len(keys)
        sent = 0
        for _ in range(n):
            i = next(counter)
            value = stamp(monotonic_ns()) + bodies[i % nbodies]
            try:
                produce(topics[i % ntopics], value, keys[i % nkeys])
            except BufferError:
                break  # local queue full: the caller services callbacks and retries
            sent += 1
        return sent


def native_client() -> Any:
    """``pybroker.client``, or BackendUnavailable saying why and what to do instead."""
    try:
        from pybroker import client
    except ImportError as e:
        raise BackendUnavailable(
            "producer: pybroker-native needs the project's native bulk producer "
            f"(pybroker.client, issue 5), which is not importable here ({e}). Build it, "
            "or run the workload with producer: librdkafka.") from e
    if not hasattr(getattr(client, "BulkProducer", None), "send_arrow"):
        raise BackendUnavailable(
            "producer: pybroker-native needs pybroker.client.BulkProducer with "
            "send_arrow(topic, values, keys=None, partition=None) and flush(); this "
            "pybroker.client does not provide them.")
    return client


class NativeBackend(Backend):
    """Columns in, record batches out: ``pybroker.client.BulkProducer`` as load generator.

    A chunk of rows is built with numpy (no Python per row), handed over with
    ``send_arrow`` (one slice per partition when unkeyed, so every partition is busy;
    keyed rows are placed by the client's murmur2), and ``flush``ed: the client has no
    per-record acknowledgement callback, so every row of a chunk gets the chunk's send ->
    all-acknowledged time as its publish latency (an upper bound; chunks are sized to
    ~4 MB so batches still pipeline within one). ``linger_ms`` does not apply.
    """

    CHUNK_BYTES = 4 << 20

    def __init__(self, workload: Workload, bootstrap: str, topics: list[str],
                 keys: list[bytes] | None, seed: int, recorder: Recorder):
        import numpy as np

        client = native_client()
        acks = {"0": 0, "1": 1}.get(workload.acks, -1)
        # The client's idempotence needs acks=all; at acks 0/1 it sends without a pid.
        self.producer = client.BulkProducer(
            bootstrap, acks=acks, idempotent=acks == -1, compression=workload.compression,
            batch_bytes=min(workload.batch_size, 1_000_000))
        self.np = np
        self.topics = topics
        self.partitions = workload.partitions
        self.recorder = recorder
        size = workload.message_size
        rows = b"".join(bytes(TIMESTAMP_BYTES) + body for body in payload_pool(workload, seed))
        self.rows = np.frombuffer(rows, np.uint8).reshape(-1, size)
        self.keys = None if keys is None else \
            np.frombuffer(b"".join(keys), np.uint8).reshape(len(keys), -1)
        self.chunk = max(1000, self.CHUNK_BYTES // size)
        self.sent = 0
        self.calls = 0

    def connect(self, timeout: float) -> None:
        for topic in self.topics:
            self.producer.cluster.topic(topic)

    def send(self, n: int) -> int:
        import pyarrow as pa

        np = self.np
        index = np.arange(self.sent, self.sent + n)
        self.sent += n
        self.calls += 1
        data = self.rows[index % len(self.rows)]  # a copy: (n, message_size)
        sent_ns = time.monotonic_ns()
        data[:, :TIMESTAMP_BYTES] = np.frombuffer(stamp(sent_ns), np.uint8)
        values = _binary_array(pa, np, data)
        topic = self.topics[self.calls % len(self.topics)]
        if self.keys is not None:
            keys = _binary_array(pa, np, self.keys[index % len(self.keys)])
            self.producer.send_arrow(topic, values, keys)
        else:
            step = -(-n // self.partitions)
            for p, start in enumerate(range(0, n, step)):
                self.producer.send_arrow(topic, values.slice(start, step), partition=p)
        try:
            self.producer.flush()
        except Exception as e:  # KafkaError after the client's own retries
            for _ in range(n):
                self.recorder.error(e)
            return n
        latency_us = (time.monotonic_ns() - sent_ns) / 1000.0
        self.recorder.pending.extend(itertools.repeat(latency_us, n))
        return n

    def service(self, timeout: float) -> None:
        time.sleep(timeout)  # flush() in send() already collected every acknowledgement

    def flush(self, timeout: float) -> int:
        return 0

    def close(self) -> None:
        self.producer.close()


def _binary_array(pa: Any, np: Any, rows: Any) -> Any:
    """An Arrow binary array over the rows of a 2-D uint8 array (fixed-width values)."""
    n, width = rows.shape
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(np.ascontiguousarray(rows))])


BACKENDS: dict[str, Any] = {"librdkafka": LibrdkafkaBackend, "pybroker-native": NativeBackend}

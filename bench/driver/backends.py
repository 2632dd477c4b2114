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
from bench.driver.workload import Workload


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
            # A deep local queue so "max" is limited by the broker, not by the client
            # refusing to buffer; BufferError still signals back-pressure.
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
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


NATIVE_API = ("BulkProducer(bootstrap, *, acks, compression, linger_ms, batch_size); "
              ".send(topic, values, keys=None, callback=None) with callback(error, count) "
              "once the records of that call are acknowledged; .poll(timeout); "
              ".flush(timeout) -> records in flight; .close()")


def native_client() -> Any:
    """``pybroker.client``, or BackendUnavailable saying why and what to do instead."""
    try:
        from pybroker import client  # type: ignore[attr-defined,unused-ignore]
    except ImportError as e:
        raise BackendUnavailable(
            "producer: pybroker-native needs the project's native bulk producer "
            f"(pybroker.client, issue 5), which is not importable here ({e}). Build it, "
            "or run the workload with producer: librdkafka.") from e
    if not hasattr(client, "BulkProducer"):
        raise BackendUnavailable(
            "producer: pybroker-native expects pybroker.client.BulkProducer with this "
            f"interface: {NATIVE_API}; pybroker.client does not provide it.")
    return client


class NativeBackend(Backend):
    """Sends ``n`` messages as one bulk call: columns in, record batches out natively."""

    def __init__(self, workload: Workload, bootstrap: str, topics: list[str],
                 keys: list[bytes] | None, seed: int, recorder: Recorder):
        client = native_client()
        self.producer = client.BulkProducer(
            bootstrap, acks=workload.acks, compression=workload.compression,
            linger_ms=workload.linger_ms, batch_size=workload.batch_size)
        self.topics = topics
        self.bodies = payload_pool(workload, seed)
        self.keys = keys
        self.recorder = recorder
        self.calls = 0

    def send(self, n: int) -> int:
        self.calls += 1
        sent_ns = time.monotonic_ns()
        prefix = stamp(sent_ns)
        bodies = self.bodies
        values = [prefix + bodies[i % len(bodies)] for i in range(n)]
        keys = [self.keys[i % len(self.keys)] for i in range(n)] if self.keys else None
        recorder = self.recorder

        def on_ack(error: Any, count: int) -> None:
            if error is not None:
                for _ in range(count):
                    recorder.error(error)
                return
            latency_us = (time.monotonic_ns() - sent_ns) / 1000.0
            recorder.pending.extend(itertools.repeat(latency_us, count))

        topic = self.topics[self.calls % len(self.topics)]
        self.producer.send(topic, values, keys=keys, callback=on_ack)
        return n

    def close(self) -> None:
        self.producer.close()


BACKENDS: dict[str, Any] = {"librdkafka": LibrdkafkaBackend, "pybroker-native": NativeBackend}

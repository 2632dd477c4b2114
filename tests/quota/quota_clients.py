"""Helpers of the quota tests: quotas set and described with exact requests (neither
confluent-kafka nor kafka-python's admin client offers client quotas; kafka-python's
protocol classes encode them, ``test_client_quotas_kafka_python``), and clients that
measure the rate they achieve."""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.broker.wire_client import WireClient

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
VALUE = b"v" * 1000
# Batches and fetches small beside the 1 MB/s quota: a fetch over the quota is answered
# empty and asked again, so the rate a consumer gets moves in steps of one fetch
BATCH_BYTES = 16 * 1024


def alter(bootstrap: str, entity: dict[str, str | None], quotas: dict[str, float | None],
          validate_only: bool = False) -> dict:
    """AlterClientQuotas of one entity (a value None removes the key); the entry answer."""
    ops = [{"key": k, "value": v or 0.0, "remove": v is None} for k, v in quotas.items()]
    with WireClient(bootstrap) as client:
        answer = client.request(ALTER_CLIENT_QUOTAS, 1, {"entries": [
            {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
             "ops": ops}], "validate_only": validate_only})
    (entry,) = answer["entries"]
    return entry


def describe(bootstrap: str, components: list[tuple[str, int, str | None]] = (),  # type: ignore[assignment]
             strict: bool = False) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    """DescribeClientQuotas: entity (sorted (type, name)) -> quotas."""
    with WireClient(bootstrap) as client:
        answer = client.request(DESCRIBE_CLIENT_QUOTAS, 1, {"components": [
            {"entity_type": t, "match_type": m, "match": s} for t, m, s in components],
            "strict": strict})
    assert answer["error_code"] == 0, answer
    return {tuple(sorted((e["entity_type"], e["entity_name"]) for e in entry["entity"])):
            {v["key"]: v["value"] for v in entry["values"]} for entry in answer["entries"]}


class Meter:
    """Bytes a client moved, by time, so a rate can be read over any interval."""

    def __init__(self) -> None:
        self.start = 0.0  # when the measured run began
        self.events: list[tuple[float, int]] = []
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self.events.append((time.monotonic(), n))

    def rate(self, start: float, end: float) -> float:
        with self._lock:
            moved = sum(n for t, n in self.events if start <= t < end)
        return moved / (end - start)

    @property
    def last(self) -> float:
        """When the last bytes moved."""
        with self._lock:
            return self.events[-1][0] if self.events else self.start

    @property
    def total(self) -> int:
        with self._lock:
            return sum(n for _, n in self.events)


def produce_for(bootstrap: str, topic: str, client_id: str, until: float, meter: Meter,
                errors: list[Any], max_bytes: int | None = None) -> None:
    """Produce 1000-byte records as fast as the broker takes them until ``until`` (or
    ``max_bytes`` of values)."""
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id,
                         "linger.ms": 5, "batch.size": BATCH_BYTES,
                         "queue.buffering.max.kbytes": 4096})

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            meter.add(len(msg.value()))
    left = max_bytes if max_bytes is not None else float("inf")
    while time.monotonic() < until and left > 0:
        try:
            producer.produce(topic, VALUE, on_delivery=delivered)
        except BufferError:
            producer.poll(0.01)
            continue
        left -= len(VALUE)
        producer.poll(0)
    producer.flush(30)


def consume_for(bootstrap: str, topic: str, client_id: str, until: float, meter: Meter,
                errors: list[Any]) -> None:
    """Read ``topic`` (partition 0) from the start until ``until`` or its end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id,
                         "group.id": client_id, "enable.auto.commit": False,
                         "fetch.max.bytes": 4 * BATCH_BYTES,
                         "message.max.bytes": 4 * BATCH_BYTES,
                         "max.partition.fetch.bytes": BATCH_BYTES})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        while time.monotonic() < until:
            for msg in consumer.consume(500, 0.1):
                if msg.error() is not None:
                    errors.append(msg.error())
                else:
                    meter.add(len(msg.value()))
    finally:
        consumer.close()

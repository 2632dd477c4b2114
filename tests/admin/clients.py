"""Real-client helpers shared by the admin, CLI and fuzz tests (confluent-kafka)."""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import BrokerProcess

TIMEOUT = 30.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


_ADMINS: dict[str, AdminClient] = {}


def admin(bootstrap: str) -> AdminClient:
    """One client per broker, kept while the broker runs: a client that is collected
    fails its pending futures."""
    client = _ADMINS.get(bootstrap)
    if client is None:
        client = _ADMINS[bootstrap] = AdminClient({"bootstrap.servers": bootstrap})
    return client


def forget_admin(bootstrap: str) -> None:
    """Drop the client of a broker that stopped (``BrokerProcess.stop``): kept, it would
    reconnect to the closed port for the rest of the run, logging each refusal."""
    _ADMINS.pop(bootstrap, None)


BrokerProcess.stop_listeners.append(forget_admin)


def wait_all(futures: dict[Any, Any]) -> dict[Any, Any]:
    """Results of every future (raises the first error)."""
    return {key: fut.result(timeout=TIMEOUT) for key, fut in futures.items()}


def error_of(future: Any) -> Any:
    """The KafkaError a failed admin future carries, or None if it succeeded."""
    try:
        future.result(timeout=TIMEOUT)
    except KafkaException as exc:
        return exc.args[0]
    return None


def create_topic(bootstrap: str, name: str, partitions: int = 1,
                 config: dict[str, str] | None = None) -> None:
    wait_all(admin(bootstrap).create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=TIMEOUT))


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0,
            key: bytes | None = None, **config: Any) -> list[Any]:
    """Produce ``values`` in order (acks=all, idempotent), each with ``key``; returns the
    delivered messages."""
    delivered: list[Any] = []
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})

    def report(err: Any, msg: Any) -> None:
        (errors if err is not None else delivered).append(err if err is not None else msg)

    for value in values:
        producer.produce(topic, value, key=key, partition=partition, on_delivery=report)
    producer.flush(TIMEOUT)
    if errors:
        raise KafkaException(errors[0])
    assert len(delivered) == len(values)
    return delivered


def consume(bootstrap: str, topic: str, partition: int = 0, count: int | None = None,
            start: int = OFFSET_BEGINNING) -> list[Any]:
    """Messages of one partition from ``start`` up to its high watermark (or ``count``)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tests",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                   timeout=TIMEOUT)
        wanted = count if count is not None else high - max(low, start if start >= 0 else low)
        out: list[Any] = []
        if wanted <= 0:
            return out
        consumer.assign([TopicPartition(topic, partition, start)])
        for _ in range(int(TIMEOUT / 0.2)):
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == msg.error()._PARTITION_EOF and len(out) >= wanted:
                    break
                if msg.error().code() == msg.error()._PARTITION_EOF:
                    continue
                raise KafkaException(msg.error())
            out.append(msg)
            if len(out) >= wanted:
                break
        return out
    finally:
        consumer.close()

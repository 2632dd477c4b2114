"""A confluent-kafka group consumer in its own process, for tests that kill consumers.

Usage: ``python consumer_proc.py '<json>'`` with ``bootstrap``, ``group``, ``topics`` and
optional ``conf`` (extra librdkafka settings). It prints one JSON object per line on
stdout, flushed, as things happen:

    {"event": "assign", "partitions": [[topic, p], ...], "incremental": bool}
    {"event": "revoke", "partitions": [...], "incremental": bool}
    {"event": "msg", "topic": t, "partition": p, "offset": o, "value": "..."}

Every message is printed (processed) before its offset is committed, synchronously, after
each batch and before partitions are given up: at-least-once, never skipping. SIGTERM
closes the consumer (a static member does not leave the group on close).
"""

from __future__ import annotations

import json
import signal
import sys
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition


def emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main() -> int:
    cfg = json.loads(sys.argv[1])
    conf = {"bootstrap.servers": cfg["bootstrap"], "group.id": cfg["group"],
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    conf.update(cfg.get("conf", {}))
    consumer = Consumer(conf)
    cooperative = conf.get("partition.assignment.strategy") == "cooperative-sticky"
    processed: dict[tuple[str, int], int] = {}
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))

    def commit(partitions: list[TopicPartition] | None = None) -> None:
        wanted = {(tp.topic, tp.partition) for tp in partitions} if partitions else None
        offsets = [TopicPartition(t, p, o) for (t, p), o in processed.items()
                   if wanted is None or (t, p) in wanted]
        if not offsets:
            return
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:  # e.g. a rebalance in progress: retried next batch
            emit(event="commit_failed", error=str(exc))
            return
        for tp in offsets:
            if processed.get((tp.topic, tp.partition)) == tp.offset:
                del processed[(tp.topic, tp.partition)]

    def on_assign(c: Consumer, partitions: list[TopicPartition]) -> None:
        emit(event="assign", partitions=[[tp.topic, tp.partition] for tp in partitions],
             incremental=cooperative)

    def on_revoke(c: Consumer, partitions: list[TopicPartition]) -> None:
        commit(partitions)
        emit(event="revoke", partitions=[[tp.topic, tp.partition] for tp in partitions],
             incremental=cooperative)

    consumer.subscribe(cfg["topics"], on_assign=on_assign, on_revoke=on_revoke,
                       on_lost=on_revoke)
    while not stopping:
        batch = consumer.consume(num_messages=200, timeout=0.2)
        for msg in batch:
            if msg.error():
                emit(event="error", error=str(msg.error()))
                continue
            emit(event="msg", topic=msg.topic(), partition=msg.partition(),
                 offset=msg.offset(), value=(msg.value() or b"").decode())
            processed[(msg.topic(), msg.partition())] = msg.offset() + 1
        commit()
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

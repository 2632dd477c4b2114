"""At-least-once delivery and durable commits, with real consumers and broker restarts.

Consumers commit only what they have processed (printed), so across rebalances, killed
consumers and broker restarts every message must arrive at least once and none may be
skipped; committed offsets must survive a SIGKILL of the broker.
"""

from __future__ import annotations

import signal
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from tests.groups.helpers import WAIT, Consumers, create_topic, produce, wait_until


def _values(members: list[Any]) -> list[str]:
    return [m["value"] for c in members for m in c.messages()]


def test_every_message_once_or_more_across_rebalances_and_broker_restart(
        broker_factory: Any, consumers: Any) -> None:
    broker = broker_factory()
    create_topic(broker.bootstrap, "work", 6)
    group: Consumers = consumers(broker)
    produced = [f"m-{i}" for i in range(3000)]
    produce(broker.bootstrap, "work", produced[:1000])
    members = [group.start("g-work", ["work"]) for _ in range(2)]
    wait_until(lambda: len(_values(members)) >= 300, what="first consumption")

    members.append(group.start("g-work", ["work"]))  # rebalance while consuming
    wait_until(lambda: members[2].assignment(), what="the third member's partitions")
    produce(broker.bootstrap, "work", produced[1000:2000])
    wait_until(lambda: members[2].messages(), what="the third member to consume")
    members[0].kill(signal.SIGKILL)  # partitions move after its session timeout
    wait_until(lambda: len(set(_values(members))) >= 1500, what="more consumption")

    broker.restart(signal.SIGTERM)  # consumers ride through it on the same port
    produce(broker.bootstrap, "work", produced[2000:])
    members.append(group.start("g-work", ["work"]))
    wait_until(lambda: set(_values(members)) >= set(produced), timeout=2 * WAIT,
               what="every produced message")

    seen = _values(members)
    assert set(seen) == set(produced)  # nothing skipped, nothing invented
    assert len(seen) >= len(produced)
    # per partition, the offsets consumed have no hole
    by_partition: dict[int, set[int]] = {}
    for c in members:
        for m in c.messages():
            by_partition.setdefault(m["partition"], set()).add(m["offset"])
    assert sum(len(offsets) for offsets in by_partition.values()) == len(produced)
    for offsets in by_partition.values():
        assert offsets == set(range(max(offsets) + 1))


def test_committed_offsets_and_metadata_survive_broker_sigkill(broker_factory: Any) -> None:
    broker = broker_factory()
    create_topic(broker.bootstrap, "durable", 3)
    for p in range(3):
        produce(broker.bootstrap, "durable", [f"p{p}-{i}" for i in range(30)], partition=p)
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": "g-durable",
            "enable.auto.commit": False}
    consumer = Consumer(conf)
    wanted = [TopicPartition("durable", 0, 5, metadata="zero"),
              TopicPartition("durable", 1, 17, metadata="one"),
              TopicPartition("durable", 2, 30)]
    consumer.commit(offsets=wanted, asynchronous=False)
    consumer.close()

    assert broker.restart(signal.SIGKILL)
    consumer = Consumer({**conf, "auto.offset.reset": "earliest"})
    try:
        committed = consumer.committed([TopicPartition("durable", p) for p in range(3)],
                                       timeout=WAIT)
        assert [(tp.partition, tp.offset, tp.metadata) for tp in committed] == \
            [(0, 5, "zero"), (1, 17, "one"), (2, 30, None)]
        # a member of the group resumes exactly there
        consumer.subscribe(["durable"])
        first: dict[int, int] = {}
        def resumed() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                first.setdefault(msg.partition(), msg.offset())
            return set(first) == {0, 1}
        wait_until(resumed, what="messages from partitions 0 and 1")
        assert first == {0: 5, 1: 17}
    finally:
        consumer.close()

"""Committed offsets through the real client libraries: kafka-python, confluent-kafka,
aiokafka. One broker for the module; each test has its own topic and group."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.structs import OffsetAndMetadata

from tests.groups.helpers import WAIT, create_topic, produce, wait_until


@pytest.fixture(scope="module")
def bootstrap(module_broker: Any) -> str:
    return module_broker.bootstrap


# kafka-python 3.0.12 can lose the end of a rebalance when poll() times out in the middle
# of it (the consumer then keeps an empty assignment); polls of 1 s leave it time to finish.
KP_POLL_MS = 1000


def _poll_values(consumer: Any, want: int, timeout_ms: int = KP_POLL_MS
                 ) -> list[tuple[int, int, str]]:
    """kafka-python: (partition, offset, value) until ``want`` records arrived."""
    out: list[tuple[int, int, str]] = []

    def more() -> bool:
        for records in consumer.poll(timeout_ms=timeout_ms).values():
            out.extend((r.partition, r.offset, r.value.decode()) for r in records)
        return len(out) >= want
    wait_until(more, what=f"{want} records")
    return out


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_auto_offset_reset_kafka_python(bootstrap: str, reset: str) -> None:
    topic = f"reset-kp-{reset}"
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [f"old-{i}" for i in range(5)])
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"g-{topic}",
                             auto_offset_reset=reset, enable_auto_commit=False)
    got: list[str] = []
    tp = KTopicPartition(topic, 0)

    def poll() -> None:
        for records in consumer.poll(timeout_ms=KP_POLL_MS).values():
            got.extend(r.value.decode() for r in records)
    try:
        # the reset happens when the group has assigned the partition and the position is
        # looked up; only then are the new messages produced
        wait_until(lambda: poll() or (tp in consumer.assignment()
                                      and consumer.position(tp) is not None),
                   what="an assignment with a position")
        produce(bootstrap, topic, [f"new-{i}" for i in range(3)])
        want = 8 if reset == "earliest" else 3
        wait_until(lambda: poll() or len(got) >= want, what=f"{want} records")
        assert got == ([f"old-{i}" for i in range(5)] if reset == "earliest" else []) \
            + [f"new-{i}" for i in range(3)]
    finally:
        consumer.close()


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_auto_offset_reset_confluent(bootstrap: str, reset: str) -> None:
    topic = f"reset-ck-{reset}"
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [f"old-{i}" for i in range(5)])
    # partition EOF events say the reset happened and fetching reached the end
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": reset, "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.subscribe([topic])
    got: list[str] = []
    eof: list[int] = []

    def poll() -> None:
        msg = consumer.poll(0.1)
        if msg is None:
            return
        if msg.error():
            eof.append(msg.offset())
        else:
            got.append(msg.value().decode())
    try:
        wait_until(lambda: poll() or eof, what="the end of the partition")
        produce(bootstrap, topic, [f"new-{i}" for i in range(3)])
        want = 8 if reset == "earliest" else 3
        wait_until(lambda: poll() or len(got) >= want, what=f"{want} messages")
        assert got == ([f"old-{i}" for i in range(5)] if reset == "earliest" else []) \
            + [f"new-{i}" for i in range(3)]
    finally:
        consumer.close()


def test_kafka_python_commit_sync_async_metadata_and_seek(bootstrap: str) -> None:
    topic = "commits-kp"
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, [f"p0-{i}" for i in range(10)], partition=0)
    produce(bootstrap, topic, [f"p1-{i}" for i in range(10)], partition=1)
    tp0, tp1 = KTopicPartition(topic, 0), KTopicPartition(topic, 1)
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="g-commits-kp",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        _poll_values(consumer, 20)
        consumer.commit({tp0: OffsetAndMetadata(4, "four", -1)})  # sync
        done: list[Any] = []
        consumer.commit_async({tp1: OffsetAndMetadata(7, "seven", -1)},
                              callback=lambda offsets, result: done.append(result))
        wait_until(lambda: consumer.poll(timeout_ms=KP_POLL_MS) is not None and done,
                   what="the async commit callback")
        assert not isinstance(done[0], Exception), done[0]
        stored = consumer.committed(tp0, metadata=True)
        assert (stored.offset, stored.metadata) == (4, "four")
        assert consumer.committed(tp1, metadata=True).metadata == "seven"
        assert consumer.committed(tp0) == 4 and consumer.committed(tp1) == 7
        consumer.seek(tp0, 2)  # seeking moves the position, not the committed offset
        records = _poll_values(consumer, 8)
        assert [(p, o) for p, o, _ in records if p == 0][:1] == [(0, 2)]
        assert consumer.committed(tp0) == 4
    finally:
        consumer.close()

    # a new member of the group starts from the committed offsets
    resumed = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="g-commits-kp",
                            auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        records = _poll_values(resumed, 9)
        firsts = {p: min(o for q, o, _ in records if q == p) for p in (0, 1)}
        assert firsts == {0: 4, 1: 7}
    finally:
        resumed.close()


def test_confluent_commit_async_with_metadata_and_seek(bootstrap: str) -> None:
    topic = "commits-ck"
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [f"v-{i}" for i in range(10)], partition=0)
    results: list[Any] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-commits-ck",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "on_commit": lambda err, parts: results.append((err, parts))})
    consumer.subscribe([topic])
    seen: list[int] = []
    try:
        def more() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                seen.append(msg.offset())
            return len(seen) >= 10
        wait_until(more, what="ten messages")
        consumer.commit(offsets=[TopicPartition(topic, 0, 6, metadata="six")],
                        asynchronous=True)
        wait_until(lambda: consumer.poll(0.1) is None and results, what="the commit callback")
        assert results[0][0] is None
        committed = consumer.committed([TopicPartition(topic, 0)], timeout=WAIT)[0]
        assert (committed.offset, committed.metadata) == (6, "six")
        consumer.seek(TopicPartition(topic, 0, 3))
        seen.clear()
        wait_until(lambda: more() or len(seen) >= 7, what="messages after the seek")
        assert seen[0] == 3
    finally:
        consumer.close()


def test_kafka_python_members_split_partitions(bootstrap: str) -> None:
    topic = "split-kp"
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, [f"v-{i}" for i in range(40)])
    members = [KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="g-split-kp",
                             auto_offset_reset="earliest", session_timeout_ms=6000,
                             heartbeat_interval_ms=500) for _ in range(2)]
    try:
        def split() -> bool:
            for m in members:
                m.poll(timeout_ms=KP_POLL_MS)
            owned = [m.assignment() for m in members]
            return all(len(o) == 2 for o in owned) and not owned[0] & owned[1]
        wait_until(split, what="two partitions each")
    finally:
        for m in members:
            m.close()


def test_aiokafka_group_commit_and_committed(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATopicPartition

    topic = "commits-aio"
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [f"v-{i}" for i in range(5)], partition=0)

    async def body() -> None:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="g-aio",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            got = await asyncio.wait_for(consumer.getmany(timeout_ms=WAIT * 1000), WAIT)
            assert sum(len(v) for v in got.values()) > 0
            tp = ATopicPartition(topic, 0)
            await consumer.commit({tp: 3})
            assert await consumer.committed(tp) == 3
        finally:
            await consumer.stop()

    asyncio.run(body())

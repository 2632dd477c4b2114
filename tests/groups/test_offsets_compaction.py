"""``__consumer_offsets`` is compacted by the log cleaner like any compacted topic: with
small segments and a client committing the same partitions over and over, the topic's
size stays bounded once the cleaner has run, and a restart loads the latest committed
offsets back from what the cleaner kept. A deleted group's tombstones keep it deleted."""

from __future__ import annotations

import glob
import os
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from pybroker.coordinator.offset_store import OFFSETS_TOPIC, offsets_topic_config
from pybroker.log.log_config import LogConfig
from tests.groups.helpers import WAIT, create_topic, wait_until

SEGMENT_BYTES = 4096
PARTITIONS = 4
COMMITS = 600  # ~400 bytes each: about 60 segments' worth of offset commits


def offsets_log_bytes(data_dir: str) -> int:
    while True:
        try:
            return sum(os.path.getsize(path) for path in
                       glob.glob(os.path.join(data_dir, f"{OFFSETS_TOPIC}-0", "*.log")))
        except FileNotFoundError:
            continue  # the cleaner swapped a segment between the listing and its stat


def committer(bootstrap: str, group: str) -> Any:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "enable.auto.commit": False})


def committed(bootstrap: str, group: str, topic: str) -> list[int]:
    consumer = committer(bootstrap, group)
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                                   timeout=WAIT)
    finally:
        consumer.close()
    return [tp.offset for tp in found]


def test_the_offsets_topic_is_created_compacted_with_its_segment_size() -> None:
    config = LogConfig.from_properties(offsets_topic_config(SEGMENT_BYTES))
    assert (config.segment_bytes, config.compacts) == (SEGMENT_BYTES, True)


def test_cleaning_bounds_the_offsets_topic_and_a_restart_loads_the_latest(
        broker_factory: Any) -> None:
    broker = broker_factory(**{"offsets.topic.num.partitions": 1,
                               "offsets.topic.segment.bytes": SEGMENT_BYTES,
                               "log.cleaner.backoff.ms": 100})
    create_topic(broker.bootstrap, "t", PARTITIONS)
    consumer = committer(broker.bootstrap, "busy")
    gone = committer(broker.bootstrap, "gone")
    try:
        gone.commit(offsets=[TopicPartition("t", p, 1) for p in range(PARTITIONS)],
                    asynchronous=False)
        for i in range(COMMITS):
            consumer.commit(offsets=[TopicPartition("t", p, i * 10 + p)
                                     for p in range(PARTITIONS)], asynchronous=False)
    finally:
        consumer.close()
        gone.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_consumer_groups(["gone"], request_timeout=WAIT).values():
        future.result(timeout=WAIT)
    reader = committer(broker.bootstrap, "reader")
    try:
        _, end = reader.get_watermark_offsets(TopicPartition(OFFSETS_TOPIC, 0), timeout=WAIT)
    finally:
        reader.close()
    assert end >= COMMITS * PARTITIONS  # every commit was written: ~60 segments' worth
    # the cleaner keeps the live keys, the segments it has not cleaned yet (at most about
    # as much again: min.cleanable.dirty.ratio 0.5) and the active segment
    wait_until(lambda: offsets_log_bytes(broker.data_dir) <= 6 * SEGMENT_BYTES,
               what=f"{OFFSETS_TOPIC} cleaned")

    broker.restart()
    latest = [(COMMITS - 1) * 10 + p for p in range(PARTITIONS)]
    assert committed(broker.bootstrap, "busy", "t") == latest
    assert committed(broker.bootstrap, "gone", "t") == [-1001] * PARTITIONS  # none


def test_a_deleted_topics_offsets_go_with_tombstones(broker_factory: Any) -> None:
    broker = broker_factory()
    create_topic(broker.bootstrap, "doomed", PARTITIONS)
    create_topic(broker.bootstrap, "t", PARTITIONS)
    consumer = committer(broker.bootstrap, "g")
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, 5) for topic in ("doomed", "t")
                                 for p in range(PARTITIONS)], asynchronous=False)
    finally:
        consumer.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_topics(["doomed"], operation_timeout=WAIT).values():
        future.result(timeout=WAIT)
    assert committed(broker.bootstrap, "g", "doomed") == [-1001] * PARTITIONS
    assert committed(broker.bootstrap, "g", "t") == [5] * PARTITIONS
    # the tombstones are in the log: a restart (the topic recreated) finds no offsets
    broker.restart()
    create_topic(broker.bootstrap, "doomed", PARTITIONS)
    assert committed(broker.bootstrap, "g", "doomed") == [-1001] * PARTITIONS
    assert committed(broker.bootstrap, "g", "t") == [5] * PARTITIONS

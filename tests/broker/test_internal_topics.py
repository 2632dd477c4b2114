"""Internal topics are the broker's own log: a client's Produce to ``__consumer_offsets``
is refused with INVALID_TOPIC_EXCEPTION, as Kafka refuses it, so no client can corrupt
committed offsets; the offsets the coordinator wrote survive the attempt and a restart."""

from __future__ import annotations

import signal

from confluent_kafka import Consumer, TopicPartition

from pybroker._native.records import encode_batch
from pybroker.errors import ErrorCode
from pybroker.net.protocol import codec
from tests.admin.clients import create_topic
from tests.broker.wire_client import WireClient, produce_body

PRODUCE, METADATA = 0, 3


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        return tp.offset
    finally:
        consumer.close()


def test_produce_to_the_offsets_topic_is_refused_and_offsets_survive(broker):
    create_topic(broker.bootstrap, "orders", 1)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "billing",
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("orders", 0, 42)], asynchronous=False)
    consumer.close()

    with WireClient(broker.bootstrap) as client:
        metadata = client.request(METADATA, 12, {"topics": [{"name": "__consumer_offsets",
                                                             "topic_id": codec.ZERO_UUID}],
                                                 "allow_auto_topic_creation": False,
                                                 "include_topic_authorized_operations": False})
        [offsets_topic] = metadata["topics"]
        assert offsets_topic["is_internal"]
        for partition in offsets_topic["partitions"]:
            garbage = encode_batch([b"\xff not an offset record"], keys=[b"\x00\x01junk"])
            response = client.request(PRODUCE, 9, produce_body(
                "__consumer_offsets", partition["partition_index"], garbage))
            [answer] = response["responses"][0]["partition_responses"]
            assert answer["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION

    assert _committed(broker.bootstrap, "billing", "orders") == 42
    broker.restart(signal.SIGKILL)
    assert _committed(broker.bootstrap, "billing", "orders") == 42


def test_a_topic_named_with_two_underscores_is_an_ordinary_topic(broker):
    create_topic(broker.bootstrap, "__mine", 1)
    with WireClient(broker.bootstrap) as client:
        response = client.request(PRODUCE, 9, produce_body("__mine", 0, encode_batch([b"v"])))
        [answer] = response["responses"][0]["partition_responses"]
        assert answer["error_code"] == ErrorCode.NONE

"""Creating a topic with many partitions does not stall other clients, and the partition
limit per topic answers INVALID_PARTITIONS. Real broker process, raw protocol clients."""

from __future__ import annotations

import signal
import threading
from typing import Any

from pybroker._native.records import encode_batch
from pybroker.broker.topic_manager import MAX_PARTITIONS_PER_TOPIC
from pybroker.errors import ErrorCode
from tests.admin.clients import unique
from tests.broker.wire_client import WireClient, fetch_body, produce_body

PRODUCE, FETCH, METADATA, CREATE_TOPICS, CREATE_PARTITIONS = 0, 1, 3, 19, 37
BIG = 2000


def create_body(name: str, partitions: int) -> dict:
    return {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": -1,
                        "assignments": [], "configs": []}],
            "timeout_ms": 60000, "validate_only": False}


def partitions_of(client: WireClient, name: str) -> int:
    meta = client.request(METADATA, 12, {"topics": [{"name": name}],
                                         "allow_auto_topic_creation": False})
    topic = meta["topics"][0]
    return 0 if topic["error_code"] else len(topic["partitions"])


def test_produce_and_fetch_are_answered_while_a_big_topic_is_created(broker: Any) -> None:
    small, big = unique("small"), unique("big")
    with WireClient(broker.bootstrap) as admin, WireClient(broker.bootstrap) as client:
        assert admin.request(CREATE_TOPICS, 7, create_body(small, 1))["topics"][0][
            "error_code"] == ErrorCode.NONE
        admin.send(CREATE_TOPICS, 7, create_body(big, BIG))
        created: list[dict] = []
        waiter = threading.Thread(target=lambda: created.append(
            admin.receive(CREATE_TOPICS, 7)["topics"][0]))
        waiter.start()
        # Served while the creation is under way: the big topic is seen part-created
        # (some of its partitions exist, not all) between answered produces and fetches.
        served_mid_creation = 0
        offset = 0
        while not created:
            seen = partitions_of(client, big)
            produced = client.request(PRODUCE, 9, produce_body(
                small, 0, encode_batch([b"during"])))["responses"][0]["partition_responses"][0]
            assert produced["error_code"] == ErrorCode.NONE
            fetched = client.request(FETCH, 12, fetch_body(small, 0, offset, max_wait_ms=0))
            assert fetched["responses"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
            offset = produced["base_offset"] + 1
            if 0 < seen < BIG and 0 < partitions_of(client, big) < BIG:
                served_mid_creation += 1
        waiter.join()
        assert created[0]["error_code"] == ErrorCode.NONE
        assert created[0]["num_partitions"] == BIG
        assert served_mid_creation > 0
        assert partitions_of(client, big) == BIG
    broker.restart()
    with WireClient(broker.bootstrap) as client:
        assert partitions_of(client, big) == BIG


def test_partition_limit_per_topic(broker: Any) -> None:
    name = unique("limit")
    with WireClient(broker.bootstrap) as client:
        too_many = client.request(CREATE_TOPICS, 7, create_body(name, MAX_PARTITIONS_PER_TOPIC + 1))
        answer = too_many["topics"][0]
        assert answer["error_code"] == ErrorCode.INVALID_PARTITIONS
        assert f"limit of {MAX_PARTITIONS_PER_TOPIC} partitions" in answer["error_message"]
        assert partitions_of(client, name) == 0
        assert client.request(CREATE_TOPICS, 7, create_body(name, 2))["topics"][0][
            "error_code"] == ErrorCode.NONE
        grown = client.request(CREATE_PARTITIONS, 3, {
            "topics": [{"name": name, "count": MAX_PARTITIONS_PER_TOPIC + 1,
                        "assignments": None}], "timeout_ms": 60000, "validate_only": False})
        assert grown["results"][0]["error_code"] == ErrorCode.INVALID_PARTITIONS
        assert "limit of" in grown["results"][0]["error_message"]
        assert partitions_of(client, name) == 2


def test_a_broker_stopped_mid_creation_ends_it_at_the_next_start(broker: Any) -> None:
    big = unique("interrupted")
    with WireClient(broker.bootstrap) as admin, WireClient(broker.bootstrap) as client:
        admin.send(CREATE_TOPICS, 7, create_body(big, BIG))
        while partitions_of(client, big) == 0:
            pass  # the topic exists: its logs are being created
        broker.proc.send_signal(signal.SIGTERM)
        answer = admin.receive(CREATE_TOPICS, 7)["topics"][0]  # answered, not held up
        assert answer["error_code"] == ErrorCode.NONE and answer["num_partitions"] == BIG
    assert broker.stop() == 0
    broker.start()
    with WireClient(broker.bootstrap) as client:
        assert partitions_of(client, big) == BIG

"""``controller_mutation_rate`` (KIP-599), as Kafka 4.1 answers it: the partitions
CreateTopics, CreatePartitions and DeleteTopics create or delete take tokens from a
bucket of ``rate x controller.quota.window.num x controller.quota.window.size.seconds``;
while it is below zero, strict versions (CreateTopics v6+, CreatePartitions v3+,
DeleteTopics v5+) answer THROTTLING_QUOTA_EXCEEDED per topic and do nothing, older ones
are carried out; either way the answer carries the time until the bucket is back at zero.

The quota is 1 partition a second with a bucket of 2 (``controller.quota.window.num=2``),
and the requests that take it below zero take it far below (50 partitions), so that the
refusals after them hold whatever the machine's speed: tokens only come back. A throttled
connection is muted for its throttle time, so each request goes on a connection of its
own (the bucket is the client id's, not the connection's)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.errors import ThrottlingQuotaExceededError

from pybroker.errors import ErrorCode
from pybroker.net.protocol.codec import ZERO_UUID
from tests.admin.clients import TIMEOUT
from tests.broker.wire_client import WireClient
from tests.quota.quota_clients import alter

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, METADATA = 19, 20, 37, 3
THROTTLED = ErrorCode.THROTTLING_QUOTA_EXCEEDED
DEFICIT = 50  # partitions below zero after the request that goes over
BUCKET_SETTINGS = {"controller_quota_window_num": 2, "controller_quota_window_size_seconds": 1}


def _quota_broker(broker_factory: Any, *client_ids: str) -> Any:
    """A broker whose ``client_ids`` (default WireClient's) may mutate 1 partition/s."""
    broker = broker_factory(**BUCKET_SETTINGS)
    for client_id in client_ids or ("tests",):
        assert alter(broker.bootstrap, {"client-id": client_id},
                     {"controller_mutation_rate": 1.0})["error_code"] == 0
    return broker


def _request(bootstrap: str, api_key: int, version: int, body: dict) -> dict:
    with WireClient(bootstrap) as client:
        return client.request(api_key, version, body)


def _create(bootstrap: str, version: int, topics: dict[str, int], validate_only: bool = False,
            replication_factor: int = 1) -> tuple[int, dict[str, int]]:
    """CreateTopics of ``topics`` (name -> partitions): (throttle ms, name -> error)."""
    answer = _request(bootstrap, CREATE_TOPICS, version, {"topics": [
        {"name": name, "num_partitions": n, "replication_factor": replication_factor,
         "assignments": [], "configs": []} for name, n in topics.items()],
        "timeout_ms": 30000, "validate_only": validate_only})
    return answer["throttle_time_ms"], {t["name"]: t["error_code"] for t in answer["topics"]}


def _exists(bootstrap: str, topic: str) -> bool:
    answer = _request(bootstrap, METADATA, 12, {
        "topics": [{"name": topic, "topic_id": ZERO_UUID}], "allow_auto_topic_creation": False})
    return answer["topics"][0]["error_code"] == 0


def test_strict_create_topics_refuses_while_over_the_quota(broker_factory):
    broker = _quota_broker(broker_factory)
    bootstrap = broker.bootstrap
    # the request that takes the bucket below zero is carried out, unthrottled
    assert _create(bootstrap, 7, {"big": 2 + DEFICIT}) == (0, {"big": 0})
    throttle, errors = _create(bootstrap, 7, {"late-1": 1, "late-2": 1})
    assert errors == {"late-1": THROTTLED, "late-2": THROTTLED}
    # the time until the bucket is back at zero: at most DEFICIT seconds
    assert 0 < throttle <= DEFICIT * 1000
    assert not _exists(bootstrap, "late-1") and not _exists(bootstrap, "late-2")


def test_older_versions_are_carried_out_and_throttled(broker_factory):
    broker = _quota_broker(broker_factory)
    bootstrap = broker.bootstrap
    throttle, errors = _create(bootstrap, 5, {"big": 2 + DEFICIT})
    assert errors == {"big": 0} and 0 < throttle <= DEFICIT * 1000
    throttle, errors = _create(bootstrap, 5, {"more": 1})
    assert errors == {"more": 0} and 0 < throttle <= (DEFICIT + 1) * 1000
    assert _exists(bootstrap, "more")


def test_refused_topics_are_not_counted_and_validation_is(broker_factory):
    broker = _quota_broker(broker_factory)
    bootstrap = broker.bootstrap
    assert _create(bootstrap, 7, {"there": 1}) == (0, {"there": 0})  # one token left
    # a topic that exists, and one the broker cannot place, take nothing
    assert _create(bootstrap, 7, {"there": 40}) == \
        (0, {"there": ErrorCode.TOPIC_ALREADY_EXISTS})
    assert _create(bootstrap, 7, {"unplaceable": 40}, replication_factor=3) == \
        (0, {"unplaceable": ErrorCode.INVALID_REPLICATION_FACTOR})
    # so the token is still there: this one goes through, far below zero; being
    # validate-only, it creates nothing, but counts as Kafka 4.1 counts it
    assert _create(bootstrap, 7, {"next": 1 + DEFICIT}, validate_only=True) == (0, {"next": 0})
    assert not _exists(bootstrap, "next")
    assert _create(bootstrap, 7, {"after": 1})[1] == {"after": THROTTLED}
    # while over it, what would mutate nothing gets its own error, as in Kafka
    assert _create(bootstrap, 7, {"there": 1})[1] == {"there": ErrorCode.TOPIC_ALREADY_EXISTS}


def _delete(bootstrap: str, version: int, topic: str) -> tuple[int, int]:
    """DeleteTopics of one topic by name: (throttle ms, error)."""
    body = {"topics": [{"name": topic, "topic_id": ZERO_UUID}]} if version >= 6 \
        else {"topic_names": [topic]}
    answer = _request(bootstrap, DELETE_TOPICS, version, {**body, "timeout_ms": 30000})
    return answer["throttle_time_ms"], answer["responses"][0]["error_code"]


def _grow(bootstrap: str, version: int, topic: str, count: int) -> tuple[int, int]:
    """CreatePartitions of one topic: (throttle ms, error)."""
    answer = _request(bootstrap, CREATE_PARTITIONS, version, {"topics": [
        {"name": topic, "count": count, "assignments": None}], "timeout_ms": 30000,
        "validate_only": False})
    return answer["throttle_time_ms"], answer["results"][0]["error_code"]


def test_delete_topics_and_create_partitions_count_their_partitions(broker_factory):
    broker = broker_factory(**BUCKET_SETTINGS)
    bootstrap = broker.bootstrap
    assert _create(bootstrap, 7, {"wide": 2 + DEFICIT, "small": 1, "grown": 1}) == \
        (0, {"wide": 0, "small": 0, "grown": 0})  # no quota yet
    assert alter(bootstrap, {"client-id": "tests"},
                 {"controller_mutation_rate": 1.0})["error_code"] == 0
    assert _delete(bootstrap, 5, "wide") == (0, 0)  # below zero now
    assert _delete(bootstrap, 6, "small")[1] == THROTTLED
    assert _grow(bootstrap, 3, "grown", 3)[1] == THROTTLED
    assert _exists(bootstrap, "small")
    # older versions are carried out, and told how long to wait
    throttle, error = _grow(bootstrap, 2, "grown", 3)
    assert error == 0 and 0 < throttle <= (DEFICIT + 2) * 1000
    throttle, error = _delete(bootstrap, 4, "small")
    assert error == 0 and 0 < throttle <= (DEFICIT + 3) * 1000
    assert not _exists(bootstrap, "small")


def test_real_clients_over_the_quota(broker_factory):
    """kafka-python speaks CreateTopics v6+: its topics are refused with
    ThrottlingQuotaExceededError. librdkafka speaks an older version: its topics are
    created, and it is told to wait (its throttle callback)."""
    broker = _quota_broker(broker_factory, "kafka-python", "librdkafka")

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="kafka-python")
    try:
        admin.create_topics({"kp-big": {"num_partitions": 2 + DEFICIT,
                                        "replication_factor": 1}})
        with pytest.raises(ThrottlingQuotaExceededError):
            admin.create_topics({"kp-late": {"num_partitions": 1, "replication_factor": 1}})
    finally:
        admin.close()
    assert _exists(broker.bootstrap, "kp-big") and not _exists(broker.bootstrap, "kp-late")

    # three partitions over: librdkafka's connection is muted for about three seconds
    throttled: list[Any] = []
    confluent = AdminClient({"bootstrap.servers": broker.bootstrap,
                             "client.id": "librdkafka", "throttle_cb": throttled.append})
    confluent.create_topics([NewTopic("rd-big", 2 + 3, 1)])["rd-big"].result(TIMEOUT)
    confluent.poll(1)  # serves the throttle callback
    assert [0 < t.throttle_time <= 3 for t in throttled] == [True], \
        [(t.broker_name, t.throttle_time) for t in throttled]
    assert _exists(broker.bootstrap, "rd-big")

"""Replication quotas (KIP-73, pybroker/repl/throttle.py) on one broker process: the
configs as Kafka 4.1 validates them, and the leader side answering follower fetches
(sent over the wire with a follower's replica id) of a throttled partition with no
records while its rate is exceeded. The follower side is in test_fetcher.py, the whole
path between brokers in tests/cluster/test_cluster_replication_throttle.py.

Kafka's answers below were taken from Kafka 4.1 (/work/shared/reference) with the same
requests.
"""

from __future__ import annotations

import pytest

from pybroker.errors import ErrorCode
from pybroker.repl.throttle import throttled_partitions
from tests.admin.clients import produce, unique
from tests.broker.prometheus import metrics_url, scrape
from tests.broker.wire_client import WireClient, fetch_body

FETCH, CREATE_TOPICS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 1, 19, 32, 44
DESCRIBE_CLUSTER = 60
SET, DELETE, APPEND = 0, 1, 2
TOPIC, BROKER = 2, 4
LONG, LIST = 5, 7  # DescribeConfigs' config types
LEADER_REPLICAS = "leader.replication.throttled.replicas"
LEADER_RATE = "leader.replication.throttled.rate"
FORMAT = ("must be the literal '*' or a list of replicas in the following format: "
          "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


def create(client: WireClient, name: str, configs: dict[str, str],
           validate_only: bool = False) -> dict:
    body = {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                        "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
            "timeout_ms": 10000, "validate_only": validate_only}
    return client.request(CREATE_TOPICS, 7, body)["topics"][0]


def alter_broker(client: WireClient, key: str, value: str | None,
                 validate_only: bool = False, broker: str = "") -> dict:
    """IncrementalAlterConfigs of ``broker``'s dynamic config, by default the cluster
    default's (None: delete the key)."""
    body = {"resources": [{"resource_type": BROKER, "resource_name": broker, "configs": [
        {"name": key, "value": value, "config_operation": SET if value is not None
         else DELETE}]}], "validate_only": validate_only}
    (result,) = client.request(INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"]
    return result


@pytest.fixture(scope="module")
def client(module_broker):
    with WireClient(module_broker.bootstrap) as c:
        yield c


@pytest.mark.parametrize("key", [LEADER_REPLICAS, "follower.replication.throttled.replicas"])
@pytest.mark.parametrize(("value", "shown"), [
    ("*", None), ("", None), (" ", None), ("0:1", None), (" 0:1 , 1:2 ", None),
    ("0:1,", None), (",", None), ("*,", None), ("0:1,,1:2", None),
    ("*,0:1", "[*, 0:1]"), ("a:1", "[a:1]"), ("0:-1", "[0:-1]"), ("0", "[0]"),
    ("0:1:2", "[0:1:2]"), ("0 : 1", "[0 : 1]"), ("*,*", "[*, *]")])
def test_throttled_replicas_are_validated_as_kafka(client, key, value, shown):
    answer = create(client, unique("thr-valid"), {key: value}, validate_only=True)
    if shown is None:
        assert answer["error_code"] == ErrorCode.NONE, answer
    else:
        assert answer["error_code"] == ErrorCode.INVALID_CONFIG
        assert answer["error_message"] == (f"Invalid value {shown} for configuration {key}: "
                                           f"{key} {FORMAT}")


def test_a_broker_reads_the_partitions_listed_with_its_id():
    assert throttled_partitions(" 0:1 , 1:2 ,3:1,", 1) == frozenset({0, 3})
    assert throttled_partitions("0:1", 2) == frozenset()
    assert throttled_partitions("*", 7) is None
    assert throttled_partitions("", 1) == frozenset()


@pytest.mark.parametrize("key", [LEADER_RATE, "follower.replication.throttled.rate"])
def test_rates_are_dynamic_longs_at_least_zero(client, key):
    for value in ("0", "100", str(2**63 - 1)):
        assert alter_broker(client, key, value, validate_only=True)["error_code"] == 0
    refused = alter_broker(client, key, "-1", validate_only=True)
    assert refused["error_code"] == ErrorCode.INVALID_REQUEST
    assert refused["error_message"] == (f"Invalid value -1 for configuration {key}: "
                                        "Value must be at least 0")
    for value in ("abc", "1.5", str(2**63)):
        refused = alter_broker(client, key, value, validate_only=True)
        assert refused["error_code"] == ErrorCode.INVALID_REQUEST
        assert refused["error_message"] == (f"Invalid value {value} for configuration "
                                            f"{key}: Not a number of type LONG")


def broker_id(client: WireClient) -> str:
    """A single node's id: it is its own controller."""
    return str(client.request(DESCRIBE_CLUSTER, 0, {
        "include_cluster_authorized_operations": False})["controller_id"])


def replica_fetch(client: WireClient, offsets: dict[str, int],
                  replica_id: int = 5) -> dict[str, tuple[int, int, int]]:
    """A fetch of partition 0 of each topic from its offset, as a follower (or, with
    replica_id -1, a consumer) sends it: topic -> (error code, high watermark, bytes)."""
    body = fetch_body("", 0, 0, partition_max_bytes=PARTITION_MAX_BYTES)
    body["replica_id"] = replica_id
    body["topics"] = [{"topic": topic, "partitions": [
        {"partition": 0, "fetch_offset": offset, "partition_max_bytes": PARTITION_MAX_BYTES}]}
        for topic, offset in offsets.items()]
    answer = client.request(FETCH, 12, body)
    return {t["topic"]: (p["error_code"], p["high_watermark"], len(p["records"] or b""))
            for t in answer["responses"] for p in t["partitions"]}


PARTITION_MAX_BYTES = 16 * 1024
RECORDS = 2000


def test_leader_answers_a_lagging_follower_without_the_throttled_records(broker_factory):
    # Samples of a minute: the first fetch keeps a rate of 1 byte/s exceeded for ten
    # minutes, far longer than the test.
    broker = broker_factory(**{"replication.quota.window.size.seconds": 60,
                               "metrics.listener": "127.0.0.1:0"})
    throttled, free = unique("thr-leader"), unique("thr-free")
    with WireClient(broker.bootstrap) as client:
        assert create(client, throttled, {LEADER_REPLICAS: "*"})["error_code"] == 0
        assert create(client, free, {})["error_code"] == 0
        for topic in (throttled, free):
            produce(broker.bootstrap, topic, [b"v" * 100] * RECORDS, **{"batch.size": 4096})
        # this broker's own setting (the cluster tests set the cluster default)
        assert alter_broker(client, LEADER_RATE, "1", broker=broker_id(client))[
            "error_code"] == 0

        # under the rate: served, and what it sent counts against it
        first = replica_fetch(client, {throttled: 0, free: 0})
        assert first[throttled][0] == first[free][0] == ErrorCode.NONE
        sent = first[throttled][2]
        assert 0 < sent <= PARTITION_MAX_BYTES
        # over it: no records of the throttled partition, the other one as before
        second = replica_fetch(client, {throttled: 0, free: 0})
        assert second[throttled] == (ErrorCode.NONE, RECORDS, 0)
        assert second[free][2] > 0
        # consumers are not replication: served
        assert replica_fetch(client, {throttled: 0}, replica_id=-1)[throttled][2] > 0
        rate = scrape(metrics_url(broker))
        assert rate[("kafka_server_leaderreplication_byte_rate", ())] == \
            pytest.approx(sent / 600, rel=0.05)  # ten windows of 60 s, the least measured
        assert rate[("kafka_server_followerreplication_byte_rate", ())] == 0

        # the rate removed: served at once, no restart
        assert alter_broker(client, LEADER_RATE, None, broker=broker_id(client))[
            "error_code"] == 0
        assert replica_fetch(client, {throttled: 0})[throttled][2] > 0


def describe(client: WireClient, kind: int, name: str, keys: list[str]) -> dict[str, dict]:
    answer = client.request(DESCRIBE_CONFIGS, 4, {"resources": [{
        "resource_type": kind, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": False, "include_documentation": False})
    (result,) = answer["results"]
    assert result["error_code"] == ErrorCode.NONE, result
    return {c["name"]: c for c in result["configs"]}


def test_described_with_kafkas_types_and_appended_as_lists(client, module_broker):
    topic = unique("thr-list")
    assert create(client, topic, {LEADER_REPLICAS: "0:1"})["error_code"] == 0
    body = {"resources": [{"resource_type": TOPIC, "resource_name": topic, "configs": [
        {"name": LEADER_REPLICAS, "value": "1:2", "config_operation": APPEND}]}],
        "validate_only": False}
    (result,) = client.request(INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"]
    assert result["error_code"] == ErrorCode.NONE, result
    described = describe(client, TOPIC, topic, [LEADER_REPLICAS])[LEADER_REPLICAS]
    assert (described["value"], described["config_type"]) == ("0:1,1:2", LIST)

    # "*" with a replica is refused, as a SET of the same value is
    body["resources"][0]["configs"][0]["value"] = "*"
    (result,) = client.request(INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"]
    assert result["error_code"] == ErrorCode.INVALID_CONFIG

    rate = describe(client, BROKER, broker_id(client), [LEADER_RATE])[LEADER_RATE]
    assert (rate["value"], rate["config_type"], rate["read_only"]) == (
        str(2**63 - 1), LONG, False)

"""Each API checked as Kafka's KafkaApis checks it, asked with exact wire requests of the
client ``User:ANONYMOUS`` held to the ACLs of ``test_acls_broker.GRANTS``: ALTER and
CREATE on the cluster, ALL on topic ``open``, READ and WRITE on topics prefixed ``pre-``,
READ on group ``g-ok``; nothing on topic ``secret``, group ``g-no`` or any transactional
id."""

from __future__ import annotations

import uuid

from tests.broker.wire_client import WireClient
from tests.security.test_acls_broker import acl_broker  # noqa: F401 (the fixture)

OK = 0
TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = 29, 30, 31, 53
ZERO = uuid.UUID(int=0)
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
DESCRIBE_CONFIGS, ALTER_CONFIGS = 10, 11


def _bits(*ops: int) -> int:
    return sum(1 << op for op in ops)


def _ask(broker, api_key: int, version: int, body: dict) -> dict:
    with WireClient(broker.bootstrap) as client:
        return client.request(api_key, version, body)


def test_topic_apis(acl_broker):  # noqa: F811
    listed = _ask(acl_broker, 2, 7, {"replica_id": -1, "topics": [
        {"name": t, "partitions": [{"partition_index": 0, "timestamp": -1}]}
        for t in ("open", "secret")]})
    assert [t["partitions"][0]["error_code"] for t in listed["topics"]] == [OK, TOPIC_DENIED]
    deleted = _ask(acl_broker, 20, 6, {"topics": [{"name": "secret", "topic_id": ZERO}],
                                       "timeout_ms": 5000})
    assert deleted["responses"][0]["error_code"] == TOPIC_DENIED
    grown = _ask(acl_broker, 37, 3, {"topics": [{"name": "secret", "count": 2,
                                                 "assignments": None}], "timeout_ms": 5000})
    assert grown["results"][0]["error_code"] == TOPIC_DENIED
    records = _ask(acl_broker, 21, 2, {"topics": [{"name": "secret", "partitions": [
        {"partition_index": 0, "offset": 0}]}], "timeout_ms": 5000})
    assert records["topics"][0]["partitions"][0]["error_code"] == TOPIC_DENIED
    configs = _ask(acl_broker, 32, 4, {"resources": [
        {"resource_type": 2, "resource_name": "open", "configuration_keys": None},
        {"resource_type": 2, "resource_name": "secret", "configuration_keys": None},
        {"resource_type": 4, "resource_name": "0", "configuration_keys": None}]})
    assert [r["error_code"] for r in configs["results"]] == [OK, TOPIC_DENIED, CLUSTER_DENIED]


def test_authorized_operations_come_from_the_acls(acl_broker):  # noqa: F811
    answer = _ask(acl_broker, 3, 12, {
        "topics": [{"name": t, "topic_id": ZERO} for t in ("open", "pre-x", "secret")],
        "allow_auto_topic_creation": False, "include_topic_authorized_operations": True})
    topics = {t["name"]: t for t in answer["topics"]}
    assert topics["open"]["topic_authorized_operations"] == _bits(
        READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS)
    assert topics["pre-x"]["topic_authorized_operations"] == _bits(READ, WRITE, DESCRIBE)
    assert topics["secret"]["error_code"] == TOPIC_DENIED
    cluster = _ask(acl_broker, 60, 1, {"include_cluster_authorized_operations": True})
    assert cluster["error_code"] == OK  # DESCRIBE on the cluster, implied by ALTER
    assert cluster["cluster_authorized_operations"] == _bits(CREATE, ALTER, DESCRIBE)


def test_group_apis(acl_broker):  # noqa: F811
    found = _ask(acl_broker, 10, 4, {"key_type": 0, "coordinator_keys": ["g-ok", "g-no"]})
    assert [c["error_code"] for c in found["coordinators"]] == [OK, GROUP_DENIED]
    described = _ask(acl_broker, 15, 5, {"groups": ["g-ok", "g-no"]})
    assert [g["error_code"] for g in described["groups"]] == [OK, GROUP_DENIED]
    deleted = _ask(acl_broker, 42, 2, {"groups_names": ["g-ok"]})  # READ is not DELETE
    assert deleted["results"][0]["error_code"] == GROUP_DENIED
    fetched = _ask(acl_broker, 9, 8, {"groups": [{"group_id": "g-no", "topics": None}]})
    assert fetched["groups"][0]["error_code"] == GROUP_DENIED
    committed = _ask(acl_broker, 8, 8, {
        "group_id": "g-ok", "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": t, "partitions": [{"partition_index": 0, "committed_offset": 0,
                                                "committed_metadata": None}]}
                   for t in ("open", "secret")]})
    assert [t["partitions"][0]["error_code"] for t in committed["topics"]] == \
        [OK, TOPIC_DENIED]
    joined = _ask(acl_broker, 11, 7, {
        "group_id": "g-no", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
        "member_id": "", "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}]})
    assert joined["error_code"] == GROUP_DENIED


def test_transaction_apis(acl_broker):  # noqa: F811
    found = _ask(acl_broker, 10, 4, {"key_type": 1, "coordinator_keys": ["tx"]})
    assert found["coordinators"][0]["error_code"] == TXN_DENIED
    init = _ask(acl_broker, 22, 5, {"transactional_id": "tx", "transaction_timeout_ms": 60000})
    assert init["error_code"] == TXN_DENIED
    # idempotent: WRITE on some topic stands for IDEMPOTENT_WRITE on the cluster (Kafka 3+)
    idempotent = _ask(acl_broker, 22, 5, {"transactional_id": None,
                                          "transaction_timeout_ms": 60000})
    assert idempotent["error_code"] == OK
    added = _ask(acl_broker, 24, 3, {
        "v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": 1,
        "v3_and_below_producer_epoch": 0,
        "v3_and_below_topics": [{"name": "open", "partitions": [0]}]})
    assert added["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
        "partition_error_code"] == TXN_DENIED
    ended = _ask(acl_broker, 26, 3, {"transactional_id": "tx", "producer_id": 1,
                                     "producer_epoch": 0, "committed": True})
    assert ended["error_code"] == TXN_DENIED
    described = _ask(acl_broker, 65, 0, {"transactional_ids": ["tx"]})
    assert described["transaction_states"][0]["error_code"] == TXN_DENIED
    markers = _ask(acl_broker, 27, 1, {"markers": [{
        "producer_id": 1, "producer_epoch": 0, "transaction_result": True,
        "coordinator_epoch": 0, "topics": [{"name": "open", "partition_indexes": [0]}]}]})
    assert markers["markers"][0]["topics"][0]["partitions"][0]["error_code"] == \
        CLUSTER_DENIED


def test_described_topics_are_those_the_client_may_describe(acl_broker):  # noqa: F811
    named = _ask(acl_broker, 75, 0, {"topics": [{"name": "open"}, {"name": "secret"}],
                                     "response_partition_limit": 100, "cursor": None})
    assert {t["name"]: t["error_code"] for t in named["topics"]} == \
        {"open": OK, "secret": TOPIC_DENIED}
    every = _ask(acl_broker, 75, 0, {"topics": [], "response_partition_limit": 100,
                                     "cursor": None})
    names = {t["name"] for t in every["topics"]}
    assert "open" in names and "secret" not in names
    producers = _ask(acl_broker, 61, 0, {"topics": [
        {"name": t, "partition_indexes": [0]} for t in ("open", "secret")]})
    assert [t["partitions"][0]["error_code"] for t in producers["topics"]] == \
        [OK, TOPIC_DENIED]


def test_configs_need_alter_configs(acl_broker):  # noqa: F811
    altered = _ask(acl_broker, 44, 1, {"resources": [
        {"resource_type": 2, "resource_name": t, "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "86400000"}]}
        for t in ("open", "secret")], "validate_only": True})
    assert [r["error_code"] for r in altered["responses"]] == [OK, TOPIC_DENIED]


def test_created_topics_configs_need_describe_configs(acl_broker):  # noqa: F811
    created = _ask(acl_broker, 19, 7, {"topics": [
        {"name": "pre-created", "num_partitions": 1, "replication_factor": 1,
         "assignments": [], "configs": []}], "timeout_ms": 10000})
    topic = created["topics"][0]
    assert (topic["error_code"], topic["topic_config_error_code"], topic["configs"]) == \
        (OK, TOPIC_DENIED, [])


def test_log_dirs_need_describe_on_the_cluster(acl_broker, broker_factory):  # noqa: F811
    assert _ask(acl_broker, 35, 4, {"topics": None})["error_code"] == OK  # implied by ALTER
    refused = broker_factory(authorizer_class_name="kafka.security.authorizer.AclAuthorizer")
    answer = _ask(refused, 35, 4, {"topics": None})
    assert (answer["error_code"], answer["results"]) == (CLUSTER_DENIED, [])

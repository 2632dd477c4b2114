"""ACLs on a real broker: CreateAcls/DescribeAcls/DeleteAcls through confluent-kafka's and
kafka-python's admin clients, and each API checked as Kafka checks it, seen by
confluent-kafka, kafka-python, kcat and exact wire requests.

Without SASL every client is ``User:ANONYMOUS``, so the ACLs under test name it: the
broker starts with it as a super user to set them up, then restarts without (the ACLs
come back from ``acls.json``), and the client is held to them.
"""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePatternFilter,
)
from kafka.admin import ResourcePattern as KpResource
from kafka.admin import ResourceType as KpResourceType
from kafka.errors import TopicAuthorizationFailedError

from tests.admin.clients import admin, create_topic, error_of, wait_all
from tests.broker.wire_client import WireClient

AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
ANON = "User:ANONYMOUS"
TIMEOUT = 30.0
# error codes
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED = 29, 30
CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, SECURITY_DISABLED = 31, 42, 54

ANY_FILTER = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)


def _allow(kind: ResourceType, name: str, op: AclOperation,
           pattern: ResourcePatternType = ResourcePatternType.LITERAL,
           permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(kind, name, pattern, ANON, "*", op, permission)


# What ANONYMOUS may do once it is no longer a super user.
GRANTS = [
    _allow(ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER),  # manage ACLs
    _allow(ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE),  # create topics
    _allow(ResourceType.TOPIC, "open", AclOperation.ALL),
    _allow(ResourceType.TOPIC, "pre-", AclOperation.READ, ResourcePatternType.PREFIXED),
    _allow(ResourceType.TOPIC, "pre-", AclOperation.WRITE, ResourcePatternType.PREFIXED),
    _allow(ResourceType.TOPIC, "pre-denied", AclOperation.READ,
           permission=AclPermissionType.DENY),
    _allow(ResourceType.GROUP, "g-ok", AclOperation.READ),
]


@pytest.fixture(scope="module")
def acl_broker(module_broker_factory):
    broker = module_broker_factory(authorizer_class_name=AUTHORIZER, super_users=ANON)
    for topic in ("open", "pre-x", "pre-denied", "secret"):
        create_topic(broker.bootstrap, topic)
    wait_all(admin(broker.bootstrap).create_acls(GRANTS))
    broker.settings.pop("super.users")
    return broker.restart()


def _produce(bootstrap: str, topic: str) -> KafkaError | None:
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000})
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(TIMEOUT)
    return errors[0]


def _consume_error(bootstrap: str, topic: str, group: str) -> tuple[int | None, int]:
    """(error code the consumer reported or None, messages read) for a subscription."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    read = 0
    try:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                return msg.error().code(), read
            read += 1
            return None, read
    finally:
        consumer.close()
    return None, read


def test_acls_survive_restart_and_are_listed(acl_broker):
    listed = admin(acl_broker.bootstrap).describe_acls(ANY_FILTER).result(timeout=TIMEOUT)
    assert sorted(map(str, listed)) == sorted(map(str, GRANTS))


def test_produce_needs_write(acl_broker):
    assert _produce(acl_broker.bootstrap, "open") is None
    assert _produce(acl_broker.bootstrap, "pre-x") is None  # PREFIXED
    assert _produce(acl_broker.bootstrap, "secret").code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_fetch_needs_read_and_deny_wins(acl_broker):
    assert _produce(acl_broker.bootstrap, "pre-denied") is None  # WRITE allowed by prefix
    assert _produce(acl_broker.bootstrap, "open") is None
    assert _consume_error(acl_broker.bootstrap, "open", "g-ok") == (None, 1)
    # described (WRITE implies DESCRIBE), so the client fetches and is refused
    consumer = Consumer({"bootstrap.servers": acl_broker.bootstrap, "group.id": "g-ok",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("pre-denied", 0, 0)])
    try:
        deadline = time.monotonic() + TIMEOUT
        code = None
        while code is None and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is not None:
                code = msg.error().code()
        assert code == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()
    # not even described: the subscription is refused from the metadata
    assert _consume_error(acl_broker.bootstrap, "secret", "g-ok")[0] == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_group_needs_read(acl_broker):
    code, _ = _consume_error(acl_broker.bootstrap, "open", "g-refused")
    assert code == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_metadata_lists_only_described_topics(acl_broker):
    topics = admin(acl_broker.bootstrap).list_topics(timeout=TIMEOUT).topics
    assert {"open", "pre-x", "pre-denied"} <= set(topics)  # READ/WRITE imply DESCRIBE
    assert "secret" not in topics
    out = subprocess.run(["kcat", "-b", acl_broker.bootstrap, "-L", "-J"], capture_output=True,
                         timeout=TIMEOUT, check=True, text=True).stdout
    assert '"open"' in out and '"secret"' not in out


def test_kafka_python_and_kcat_see_topic_authorization_failed(acl_broker):
    producer = KafkaProducer(bootstrap_servers=acl_broker.bootstrap)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("secret", b"v").get(timeout=TIMEOUT)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=acl_broker.bootstrap, group_id="g-ok")
    try:
        consumer.assign([KpTopicPartition("pre-denied", 0)])
        consumer.seek(KpTopicPartition("pre-denied", 0), 0)
        with pytest.raises(TopicAuthorizationFailedError):
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline:
                consumer.poll(timeout_ms=500)
    finally:
        consumer.close()
    run = subprocess.run(["kcat", "-b", acl_broker.bootstrap, "-C", "-t", "secret", "-o",
                          "beginning", "-e", "-q", "-m", "5"], capture_output=True,
                         timeout=TIMEOUT, text=True)
    assert "authorization" in (run.stdout + run.stderr).lower()


def test_acl_requests_validated_as_kafka(acl_broker):
    with WireClient(acl_broker.bootstrap) as client:
        created = client.request(30, 3, {"creations": [
            {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 2,
             "principal": ANON, "host": "*", "operation": 3, "permission_type": 3},
            {"resource_type": 4, "resource_name": "other", "resource_pattern_type": 3,
             "principal": ANON, "host": "*", "operation": 7, "permission_type": 3},
            {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3,
             "principal": "alice", "host": "*", "operation": 3, "permission_type": 3}]})
        assert [(r["error_code"], r["error_message"]) for r in created["results"]] == [
            (INVALID_REQUEST, "invalid pattern type MATCH"),
            (INVALID_REQUEST, "The only valid name for the CLUSTER resource is kafka-cluster"),
            (INVALID_REQUEST, "Could not parse principal from `alice` (no colon is present "
                              "separating the principal type from the principal name)")]
        # DESCRIBE on the cluster is implied by ALTER there
        described = client.request(29, 3, {
            "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1,
            "permission_type": 1})
        assert (described["error_code"], described["error_message"]) == (0, "")
        # a filter with an UNKNOWN element: Kafka refuses to parse it and closes
        client.send(29, 3, {
            "resource_type_filter": 0, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1,
            "permission_type": 1})
        with pytest.raises(ConnectionError):
            client.read_frame()


def test_kafka_python_admin_round_trip(acl_broker):
    client = KafkaAdminClient(bootstrap_servers=acl_broker.bootstrap)
    try:
        acl = ACL(ANON, "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW,
                  KpResource(KpResourceType.TOPIC, "kp-", ACLResourcePatternType.PREFIXED))
        result = client.create_acls([acl])
        assert not result["failed"]
        found, error = client.describe_acls(ACLFilter(
            ANON, "*", ACLOperation.ANY, ACLPermissionType.ANY,
            ResourcePatternFilter(KpResourceType.TOPIC, "kp-", ACLResourcePatternType.ANY)))
        assert [a.resource_pattern.resource_name for a in found] == ["kp-"]
        deleted = client.delete_acls([ACLFilter(
            ANON, "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW,
            ResourcePatternFilter(KpResourceType.TOPIC, "kp-",
                                  ACLResourcePatternType.PREFIXED))])
        assert len(deleted[0][1]) == 1
    finally:
        client.close()


def test_without_alter_on_cluster_acls_are_refused(broker_factory):
    broker = broker_factory(authorizer_class_name=AUTHORIZER)
    errors = admin(broker.bootstrap).create_acls([GRANTS[2]])
    assert error_of(next(iter(errors.values()))).code() == \
        KafkaError.CLUSTER_AUTHORIZATION_FAILED
    with WireClient(broker.bootstrap) as client:
        assert client.request(29, 3, {
            "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1,
            "permission_type": 1})["error_code"] == CLUSTER_AUTHORIZATION_FAILED


def test_allow_everyone_if_no_acl_found(broker_factory):
    broker = broker_factory(authorizer_class_name=AUTHORIZER, super_users=ANON)
    create_topic(broker.bootstrap, "free")
    create_topic(broker.bootstrap, "guarded")
    wait_all(admin(broker.bootstrap).create_acls([
        AclBinding(ResourceType.TOPIC, "guarded", ResourcePatternType.LITERAL, "User:alice",
                   "*", AclOperation.WRITE, AclPermissionType.ALLOW),
        AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                   "User:alice", "*", AclOperation.CREATE, AclPermissionType.ALLOW),
        _allow(ResourceType.TOPIC, "auto-", AclOperation.READ, ResourcePatternType.PREFIXED)]))
    broker.settings.pop("super.users")
    broker.settings["allow.everyone.if.no.acl.found"] = "true"
    broker.restart()
    assert _produce(broker.bootstrap, "free") is None
    assert _produce(broker.bootstrap, "guarded").code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    # described (READ implies DESCRIBE) but not creatable, on the topic or the cluster
    with WireClient(broker.bootstrap) as client:
        for _ in range(2):  # the second asks whether the first created it
            answer = client.request(3, 12, {
                "topics": [{"name": "auto-x", "topic_id": uuid.UUID(int=0)}],
                "allow_auto_topic_creation": True})
            assert answer["topics"][0]["error_code"] == TOPIC_AUTHORIZATION_FAILED
        answer = client.request(3, 12, {
            "topics": [{"name": "other-x", "topic_id": uuid.UUID(int=0)}],
            "allow_auto_topic_creation": True})  # no ACL at all on it: everyone may
        assert answer["topics"][0]["error_code"] in (0, 5)  # created (leader maybe not yet)


def test_no_authorizer_answers_security_disabled(module_broker_factory):
    broker = module_broker_factory()
    with WireClient(broker.bootstrap) as client:
        described = client.request(29, 3, {
            "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1,
            "permission_type": 1})
        assert (described["error_code"], described["error_message"]) == \
            (SECURITY_DISABLED, "No Authorizer is configured on the broker")
        created = client.request(30, 3, {"creations": [
            {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3,
             "principal": ANON, "host": "*", "operation": 3, "permission_type": 3}]})
        assert created["results"][0]["error_code"] == SECURITY_DISABLED


def test_an_unknown_authorizer_stops_the_start(broker_factory):
    with pytest.raises(RuntimeError, match="authorizer.class.name='com.example.Custom'"):
        broker_factory(authorizer_class_name="com.example.Custom")

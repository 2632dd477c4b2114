"""The principal a client certificate gives is the one the ACLs see: alice (her
certificate's subject mapped by ``ssl.principal.mapping.rules``) may write the topic she
is granted and no other, while PLAINTEXT clients stay ``User:ANONYMOUS``."""

from __future__ import annotations

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from tests.admin.clients import admin, create_topic, wait_all
from tests.tls.certs import Stores
from tests.tls.conftest import confluent_ssl

AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
TIMEOUT = 30.0


def _produce(conf: dict, topic: str) -> KafkaError | None:
    errors: list[KafkaError | None] = []
    producer = Producer({**conf, "message.timeout.ms": 10000})
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(TIMEOUT)
    return errors[0]


def test_acls_see_the_certificate_principal(tls_broker_factory, stores: Stores) -> None:
    broker = tls_broker_factory(authorizer_class_name=AUTHORIZER,
                                super_users="User:ANONYMOUS",  # the PLAINTEXT admin
                                ssl_client_auth="required",
                                ssl_principal_mapping_rules="RULE:^CN=([^,]*),.*$/$1/")
    for topic in ("alice-topic", "other-topic"):
        create_topic(broker.plaintext, topic)
    wait_all(admin(broker.plaintext).create_acls([
        AclBinding(ResourceType.TOPIC, "alice-topic", ResourcePatternType.LITERAL,
                   "User:alice", "*", operation, AclPermissionType.ALLOW)
        for operation in (AclOperation.WRITE, AclOperation.DESCRIBE)]))
    alice = confluent_ssl(stores, broker.ssl,
                          **{"ssl.certificate.location": stores.client_cert,
                             "ssl.key.location": stores.client_key})
    assert _produce(alice, "alice-topic") is None
    refused = _produce(alice, "other-topic")
    assert refused is not None
    assert refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

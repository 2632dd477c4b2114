"""A user quota on a client certificate's principal (mTLS, ``ssl.principal.mapping.rules``)
holds back that client over TLS; confluent-kafka's ``throttle_cb`` reports the throttle
time the broker answered, and a plaintext client on the same broker is not throttled."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer

from tests.admin.clients import TIMEOUT, create_topic, unique
from tests.quota.quota_clients import alter
from tests.tls.certs import Stores
from tests.tls.conftest import confluent_ssl, stores, tls_broker_factory  # noqa: F401 (fixtures)


def _produce_50k(config: dict[str, Any], topic: str) -> list[float]:
    """Throttle times (seconds) librdkafka reported while producing 50 KB in one batch."""
    throttled: list[float] = []
    producer = Producer({**config, "linger.ms": 50,
                         "throttle_cb": lambda event: throttled.append(event.throttle_time)})
    for _ in range(50):
        producer.produce(topic, b"x" * 1000)
    assert producer.flush(TIMEOUT) == 0
    for _ in range(3):  # throttle events are served by poll
        producer.poll(0.2)
    return throttled


def test_user_quota_on_a_certificate_principal(tls_broker_factory: Any,  # noqa: F811
                                                stores: Stores) -> None:  # noqa: F811
    broker = tls_broker_factory(
        ssl_client_auth="requested",
        ssl_principal_mapping_rules="RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/U,DEFAULT")
    topic = unique("tls-quota")
    create_topic(broker.plaintext, topic)
    assert alter(broker.plaintext, {"user": "ALICE@ENG"},
                 {"producer_byte_rate": 1000})["error_code"] == 0
    alice = confluent_ssl(stores, broker.ssl, **{"ssl.certificate.location": stores.client_cert,
                                                  "ssl.key.location": stores.client_key})
    assert 1.0 in _produce_50k(alice, topic)  # 1000 ms: far over, one window
    assert _produce_50k({"bootstrap.servers": broker.plaintext}, topic) == []

"""Client authentication (``ssl.client.auth``): who may connect, and the principal a
client certificate gives its connection (``User:`` + the subject in RFC 2253 form, or
what ``ssl.principal.mapping.rules`` make of it). The principal shows in the broker's
DEBUG line of each handshake."""

from __future__ import annotations

import re
import ssl

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tests.broker.wire_client import WireClient
from tests.tls.certs import CLIENT_SUBJECT, Stores
from tests.tls.conftest import client_context, confluent_ssl, ssl_port, tls_settings

METADATA = 3


def _metadata_over(bootstrap: str, ctx: ssl.SSLContext) -> list:
    with WireClient(bootstrap, tls=ctx) as client:
        return client.request(METADATA, 1, {"topics": []})["brokers"]


def _refused(bootstrap: str, ctx: ssl.SSLContext) -> None:
    """The handshake fails, or (TLS 1.3: the client's certificate is checked after the
    client thinks it is done) the first request finds the connection closed."""
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _metadata_over(bootstrap, ctx)


def test_required_refuses_clients_without_a_trusted_certificate(tls_broker_factory,
                                                                stores: Stores) -> None:
    broker = tls_broker_factory(ssl_client_auth="required", log_level="DEBUG")
    _refused(broker.ssl, client_context(stores))
    _refused(broker.ssl, client_context(stores, stores.stranger_cert, stores.stranger_key))
    assert _metadata_over(broker.ssl, client_context(stores, stores.client_cert,
                                                     stores.client_key))
    log = broker.process.log_text()
    assert log.count("TLS handshake failed") >= 2
    assert f"principal User:{CLIENT_SUBJECT}" in log
    # the PLAINTEXT listener is not affected
    with WireClient(broker.plaintext) as client:
        assert client.request(METADATA, 1, {"topics": []})["brokers"]


def test_confluent_with_a_client_certificate(tls_broker_factory, stores: Stores) -> None:
    broker = tls_broker_factory(ssl_client_auth="required")
    with_cert = AdminClient(confluent_ssl(stores, broker.ssl,
                                          **{"ssl.certificate.location": stores.client_cert,
                                             "ssl.key.location": stores.client_key}))
    assert with_cert.list_topics(timeout=30).brokers
    without = AdminClient(confluent_ssl(stores, broker.ssl))
    with pytest.raises(KafkaException):
        without.list_topics(timeout=5)


def test_kafka_python_with_a_client_certificate(tls_broker_factory, stores: Stores) -> None:
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    broker = tls_broker_factory(ssl_client_auth="required")
    admin = KafkaAdminClient(bootstrap_servers=broker.ssl, security_protocol="SSL",
                             ssl_cafile=stores.ca, ssl_certfile=stores.client_cert,
                             ssl_keyfile=stores.client_key)
    assert admin.describe_cluster()["brokers"][0]["port"] == broker.ssl_port
    admin.close()
    with pytest.raises(KafkaError):
        KafkaAdminClient(bootstrap_servers=broker.ssl, security_protocol="SSL",
                         ssl_cafile=stores.ca, request_timeout_ms=3000,
                         api_version_auto_timeout_ms=3000)


def test_requested_lets_anonymous_clients_in(tls_broker_factory, stores: Stores) -> None:
    broker = tls_broker_factory(ssl_client_auth="requested", log_level="DEBUG")
    assert _metadata_over(broker.ssl, client_context(stores))
    assert _metadata_over(broker.ssl, client_context(stores, stores.client_cert,
                                                     stores.client_key))
    log = broker.process.log_text()
    assert "principal User:ANONYMOUS" in log
    assert f"principal User:{CLIENT_SUBJECT}" in log


def test_principal_mapping_rules(tls_broker_factory, stores: Stores) -> None:
    broker = tls_broker_factory(
        ssl_client_auth="required", log_level="DEBUG",
        ssl_principal_mapping_rules="RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/U,DEFAULT")
    assert _metadata_over(broker.ssl, client_context(stores, stores.client_cert,
                                                     stores.client_key))
    assert "principal User:ALICE@ENG" in broker.process.log_text()


def test_a_subject_no_rule_maps_is_refused(tls_broker_factory, stores: Stores) -> None:
    broker = tls_broker_factory(ssl_client_auth="required",
                                ssl_principal_mapping_rules="RULE:^CN=bob,.*$/bob/")
    _refused(broker.ssl, client_context(stores, stores.client_cert, stores.client_key))
    assert "no ssl.principal.mapping.rules rule applies" in broker.process.log_text()


def test_per_listener_settings(broker_factory, stores: Stores) -> None:
    """Kafka's listener.name.<listener>.ssl.*: mTLS on one SSL listener only."""
    broker = broker_factory(**tls_settings(
        stores, listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,"
                          "INTERNAL://127.0.0.1:0",
        listener_security_protocol_map="PLAINTEXT:PLAINTEXT,SSL:SSL,INTERNAL:SSL",
        **{"listener.name.internal.ssl.client.auth": "required"}))
    internal = re.findall(r"listener INTERNAL \(SSL\) on \S+:(\d+)", broker.log_text())
    internal_address = f"127.0.0.1:{internal[-1]}"
    assert _metadata_over(f"127.0.0.1:{ssl_port(broker)}", client_context(stores))
    _refused(internal_address, client_context(stores))
    assert _metadata_over(internal_address, client_context(stores, stores.client_cert,
                                                           stores.client_key))
    assert "ignoring unknown config listener.name" not in broker.log_text()

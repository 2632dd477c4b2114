"""TLS and listener settings: what a broker accepts at start, what it refuses with a
clear message, and certificates renewed without a restart. The parsers (listeners,
``ssl.principal.mapping.rules``, RFC 2253 names) are checked against Kafka's own
examples."""

from __future__ import annotations

import os
import shutil

import pytest

from pybroker.config import BrokerConfig
from pybroker.net.listeners import Listener, advertised_endpoints, listeners_from
from pybroker.net.tls import PrincipalMapper, TlsError, rfc2253_name
from tests.broker.wire_client import WireClient
from tests.tls.certs import KEY_PASSWORD, Stores, broker_keystore
from tests.tls.conftest import client_context, tls_settings

METADATA, DESCRIBE_CONFIGS = 3, 32


def _subject_cn(bootstrap: str, stores: Stores) -> str:
    with WireClient(bootstrap, tls=client_context(stores)) as client:
        cert = client.sock.getpeercert()  # type: ignore[attr-defined]
    return dict(rdn[0] for rdn in cert["subject"])["commonName"]


def test_certificates_reload_without_restart(tls_broker_factory, stores: Stores,
                                             tmp_path) -> None:
    keystore = str(tmp_path / "keystore.pem")
    shutil.copy(stores.keystore, keystore)
    broker = tls_broker_factory(ssl_keystore_location=keystore)
    assert _subject_cn(broker.ssl, stores) == "localhost"
    with WireClient(broker.ssl, tls=client_context(stores)) as before:
        renewed = broker_keystore(stores, "CN=127.0.0.1,OU=renewed", "renewed.pem")
        os.replace(renewed, keystore)  # an atomic swap, as a renewal tool does
        assert _subject_cn(broker.ssl, stores) == "127.0.0.1"
        # a connection made before goes on with its session
        assert before.request(METADATA, 1, {"topics": []})["brokers"]
    assert "certificates reloaded" in broker.process.log_text()


def test_a_keystore_that_does_not_load_keeps_the_previous_one(tls_broker_factory,
                                                               stores: Stores,
                                                               tmp_path) -> None:
    keystore = str(tmp_path / "keystore.pem")
    shutil.copy(stores.keystore, keystore)
    broker = tls_broker_factory(ssl_keystore_location=keystore)
    with open(keystore, "wb") as f:
        f.write(b"-----BEGIN PRIVATE KEY-----\nhalf written")
    assert _subject_cn(broker.ssl, stores) == "localhost"
    assert "do not load" in broker.process.log_text()


def test_encrypted_key_with_ssl_key_password(tls_broker_factory, stores: Stores) -> None:
    broker = tls_broker_factory(ssl_keystore_location=stores.keystore_encrypted,
                                ssl_key_password=KEY_PASSWORD)
    assert _subject_cn(broker.ssl, stores) == "localhost"


def test_passwords_are_never_shown(tls_broker_factory, stores: Stores) -> None:
    """DescribeConfigs names the key password sensitive with no value (Kafka's PASSWORD
    type) and the start-up settings line hides it."""
    broker = tls_broker_factory(ssl_keystore_location=stores.keystore_encrypted,
                                ssl_key_password=KEY_PASSWORD)
    with WireClient(broker.plaintext) as client:
        answer = client.request(DESCRIBE_CONFIGS, 4, {
            "resources": [{"resource_type": 4, "resource_name": "0",
                           "configuration_keys": ["ssl.key.password",
                                                  "ssl.keystore.location"]}],
            "include_synonyms": True, "include_documentation": False})
    entries = {e["name"]: e for e in answer["results"][0]["configs"]}
    secret = entries["ssl.key.password"]
    assert (secret["value"], secret["is_sensitive"]) == (None, True)
    assert all(synonym["value"] is None for synonym in secret["synonyms"])
    assert entries["ssl.keystore.location"]["value"] == stores.keystore_encrypted
    log = "\n".join(line for line in broker.process.log_text().splitlines()
                    if not line.startswith("--- "))  # the test's own command line
    assert "ssl.key.password=[hidden]" in log and KEY_PASSWORD not in log


@pytest.mark.parametrize(("settings", "message"), [
    ({"ssl_key_password": "wrong"}, "cannot start"),
    ({"ssl_keystore_location": "/nonexistent/keystore.pem"}, "cannot start"),
    ({"ssl_keystore_type": "JKS"}, "only PEM stores"),
    ({"ssl_enabled_protocols": "TLSv1.1"}, "only TLSv1.2 and TLSv1.3"),
    ({"ssl_client_auth": "sometimes"}, "ssl.client.auth"),
    ({"ssl_cipher_suites": "NO-SUCH-CIPHER"}, "cannot start"),
    ({"listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"},
     "sasl.enabled.mechanisms GSSAPI"),
    ({"listeners": "INTERNAL://127.0.0.1:0"}, "no security protocol"),
])
def test_bad_settings_stop_the_start(tls_broker_factory, stores: Stores, settings: dict,
                                     message: str) -> None:
    if "ssl_key_password" in settings:
        settings = {**settings, "ssl_keystore_location": stores.keystore_encrypted}
    with pytest.raises(RuntimeError, match=message):
        tls_broker_factory(**settings)


def test_cipher_suites_restrict_tls12(tls_broker_factory, stores: Stores) -> None:
    broker = tls_broker_factory(ssl_cipher_suites="ECDHE-ECDSA-AES128-GCM-SHA256",
                                ssl_protocol="TLSv1.2")
    with WireClient(broker.ssl, tls=client_context(stores)) as client:
        assert client.sock.version() == "TLSv1.2"  # type: ignore[attr-defined]
        assert client.sock.cipher()[0] == \
            "ECDHE-ECDSA-AES128-GCM-SHA256"  # type: ignore[attr-defined]


def test_named_listeners_and_inter_broker_listener(broker_factory, stores: Stores) -> None:
    broker = broker_factory(**tls_settings(
        stores, listeners="CLIENTS://127.0.0.1:0,REPLICATION://127.0.0.1:0",
        listener_security_protocol_map="CLIENTS:SSL,REPLICATION:PLAINTEXT",
        inter_broker_listener_name="REPLICATION"))
    log = broker.log_text()
    assert "listener CLIENTS (SSL)" in log and "listener REPLICATION (PLAINTEXT)" in log
    # the ready line names the first listener: it speaks TLS
    assert _subject_cn(broker.bootstrap, stores) == "localhost"


# parsers ---------------------------------------------------------------------------------

def _config(**values: str) -> BrokerConfig:
    return BrokerConfig({k.replace("_", "."): v for k, v in values.items()})


def test_listeners_parse_as_kafka_writes_them() -> None:
    config = _config(listeners="PLAINTEXT://:9092,SSL://0.0.0.0:9093,EXTERNAL://h:9094",
                     listener_security_protocol_map="PLAINTEXT:PLAINTEXT,SSL:SSL,"
                                                    "EXTERNAL:SSL")
    listeners = listeners_from(config)
    assert listeners.bind == [Listener("PLAINTEXT", "PLAINTEXT", "", 9092),
                              Listener("SSL", "SSL", "0.0.0.0", 9093),
                              Listener("EXTERNAL", "SSL", "h", 9094)]
    assert listeners.inter_broker == "PLAINTEXT"  # security.inter.broker.protocol's name
    bound = {"PLAINTEXT": ("0.0.0.0", 9092), "SSL": ("0.0.0.0", 9093), "EXTERNAL": ("h", 9094)}
    assert advertised_endpoints(config, bound) == {
        "PLAINTEXT": ("127.0.0.1", 9092), "SSL": ("127.0.0.1", 9093), "EXTERNAL": ("h", 9094)}
    advertised = _config(listeners="PLAINTEXT://:9092,SSL://:9093",
                         advertised_listeners="SSL://broker1.example:19093")
    assert advertised_endpoints(advertised, {"PLAINTEXT": ("", 9092), "SSL": ("", 9093)}) == {
        "PLAINTEXT": ("127.0.0.1", 9092), "SSL": ("broker1.example", 19093)}


def test_listen_is_one_plaintext_listener() -> None:
    assert listeners_from(_config(listen="127.0.0.1:0")).bind == [
        Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 0)]


@pytest.mark.parametrize(("values", "message"), [
    ({"listeners": "SSL://:1,SSL://:2"}, "named twice"),
    ({"listeners": "PLAINTEXT://:1", "inter_broker_listener_name": "PLAINTEXT",
      "security_inter_broker_protocol": "SSL"}, "only one of"),
    ({"listeners": "PLAINTEXT://:1", "inter_broker_listener_name": "SSL",
      "zookeeper_connect": "127.0.0.1:2181"}, "inter-broker listener SSL"),
    ({"listener_security_protocol_map": "A:TLS"}, "NAME:PROTOCOL"),
])
def test_listener_settings_refused(values: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        listeners_from(_config(**values))


def test_advertising_a_wildcard_is_refused() -> None:
    config = _config(listeners="PLAINTEXT://:9092", advertised_listeners="PLAINTEXT://:9092")
    with pytest.raises(ValueError, match="wildcard"):
        advertised_endpoints(config, {"PLAINTEXT": ("", 9092)})


def test_principal_mapping_rules_as_kafka_applies_them() -> None:
    """Kafka's SslPrincipalMapperTest cases."""
    mapper = PrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
        "DEFAULT")
    assert mapper.map("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "Duke"
    assert mapper.map("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.map("cn=duke,ou=javasoft,dc=mycp,dc=com") == "DUKE@JAVASOFT"
    assert mapper.map("cn=duke,ou=javasoft") == "DUKE"
    assert mapper.map("OU=JavaSoft,O=Sun Microsystems,C=US") == \
        "OU=JavaSoft,O=Sun Microsystems,C=US"
    assert PrincipalMapper("RULE:^CN=(.*)$/$1/").map("OU=x") is None
    with pytest.raises(TlsError):
        PrincipalMapper("RULE:^CN=(.*$/$1/")


def test_rfc2253_names() -> None:
    subject = ((("countryName", "US"),), (("organizationName", "Acme, Inc."),),
               (("commonName", "alice"), ("userId", "a1")))
    assert rfc2253_name(subject) == "CN=alice+UID=a1,O=Acme\\, Inc.,C=US"

"""Fixtures of the SASL tests: brokers with a PLAINTEXT listener (for setting up users and
ACLs, as ``User:ANONYMOUS``), a SASL_PLAINTEXT and a SASL_SSL listener
(``sasl_broker_factory(**settings)``: extra broker settings on top), and the clients'
settings for each."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from tests.admin.clients import admin
from tests.conftest import BrokerProcess
from tests.tls.certs import Stores, make_stores

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret" user_bob="bob-secret";')
TIMEOUT = 30.0


class SaslBroker(NamedTuple):
    process: BrokerProcess
    sasl_port: int
    sasl_ssl_port: int
    stores: Stores

    @property
    def plaintext(self) -> str:
        return self.process.bootstrap

    @property
    def sasl(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def sasl_ssl(self) -> str:
        return f"127.0.0.1:{self.sasl_ssl_port}"

    def confluent(self, user: str, password: str, mechanism: str = "SCRAM-SHA-512",
                  tls: bool = False, **extra: Any) -> dict[str, Any]:
        """confluent-kafka's settings for ``user`` on the SASL (or SASL_SSL) listener."""
        conf = {"bootstrap.servers": self.sasl_ssl if tls else self.sasl,
                "security.protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT",
                "sasl.mechanisms": mechanism, "sasl.username": user,
                "sasl.password": password, **extra}
        if tls:
            conf["ssl.ca.location"] = self.stores.ca
        return conf

    def kafka_python(self, user: str, password: str, mechanism: str = "SCRAM-SHA-256",
                     **extra: Any) -> dict[str, Any]:
        return {"bootstrap_servers": self.sasl, "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": mechanism, "sasl_plain_username": user,
                "sasl_plain_password": password, **extra}

    def add_user(self, user: str, password: str, iterations: int = 4096) -> None:
        """SCRAM-SHA-256 and -512 credentials for ``user``, through the PLAINTEXT listener."""
        futures = admin(self.plaintext).alter_user_scram_credentials([
            UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations),
                                         password.encode())
            for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)])
        for future in futures.values():
            future.result(timeout=TIMEOUT)


def listener_port(broker: BrokerProcess, name: str) -> int:
    """A listener's port, from the broker's start-up log (its last start)."""
    matches = re.findall(rf"listener {name} \(\S+\) on (\S+):(\d+)", broker.log_text())
    assert matches, f"no {name} listener in the broker's log"
    return int(matches[-1][1])


def sasl_settings(stores: Stores, **settings: Any) -> dict[str, Any]:
    return {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                         "SASL_SSL://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.jaas.config": PLAIN_JAAS,
            "ssl.keystore.location": stores.keystore,
            "ssl.truststore.location": stores.ca, **settings}


def _sasl_broker(broker: BrokerProcess, stores: Stores) -> SaslBroker:
    return SaslBroker(broker, listener_port(broker, "SASL_PLAINTEXT"),
                      listener_port(broker, "SASL_SSL"), stores)


@pytest.fixture(scope="session")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    return make_stores(str(tmp_path_factory.mktemp("sasl-tls")))


@pytest.fixture
def sasl_broker_factory(broker_factory: Callable[..., BrokerProcess],
                        stores: Stores) -> Callable[..., SaslBroker]:
    def make(**settings: Any) -> SaslBroker:
        return _sasl_broker(broker_factory(**sasl_settings(stores, **settings)), stores)
    return make


@pytest.fixture(scope="module")
def module_sasl_broker(module_broker_factory: Callable[..., BrokerProcess],
                       stores: Stores) -> SaslBroker:
    broker = _sasl_broker(module_broker_factory(**sasl_settings(stores)), stores)
    broker.add_user("alice", "alice-secret")
    return broker

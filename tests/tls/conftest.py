"""Fixtures of the TLS tests: the certificates (made once per session) and brokers with
a PLAINTEXT and an SSL listener at once (``tls_broker_factory(**settings)``: extra broker
settings on top, e.g. ``ssl_client_auth="required"``)."""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

from tests.conftest import BrokerProcess
from tests.tls.certs import Stores, make_stores

_SSL_LISTENER = re.compile(r"listener SSL \(SSL\) on (\S+):(\d+)")


class TlsBroker(NamedTuple):
    process: BrokerProcess
    ssl_port: int

    @property
    def plaintext(self) -> str:
        return self.process.bootstrap

    @property
    def ssl(self) -> str:
        return f"127.0.0.1:{self.ssl_port}"


def ssl_port(broker: BrokerProcess) -> int:
    """The SSL listener's port, from the broker's start-up log (its last start)."""
    matches = _SSL_LISTENER.findall(broker.log_text())
    assert matches, "no SSL listener in the broker's log"
    return int(matches[-1][1])


def tls_settings(stores: Stores, **settings: Any) -> dict[str, Any]:
    return {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "ssl.keystore.location": stores.keystore,
            "ssl.truststore.location": stores.ca, **settings}


@pytest.fixture(scope="session")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    return make_stores(str(tmp_path_factory.mktemp("tls")))


@pytest.fixture
def tls_broker_factory(broker_factory: Callable[..., BrokerProcess],
                       stores: Stores) -> Callable[..., TlsBroker]:
    def make(**settings: Any) -> TlsBroker:
        broker = broker_factory(**tls_settings(stores, **settings))
        return TlsBroker(broker, ssl_port(broker))
    return make


@pytest.fixture(scope="module")
def module_tls_broker(module_broker_factory: Callable[..., BrokerProcess],
                      stores: Stores) -> TlsBroker:
    broker = module_broker_factory(**tls_settings(stores, num_partitions=2))
    return TlsBroker(broker, ssl_port(broker))


def client_context(stores: Stores, cert: str | None = None, key: str | None = None,
                   ca: str | None = None) -> ssl.SSLContext:
    """A Python TLS client trusting ``ca`` (the test CA), presenting ``cert`` if given."""
    ctx = ssl.create_default_context(cafile=ca or stores.ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


def confluent_ssl(stores: Stores, bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SSL",
            "ssl.ca.location": stores.ca, **extra}

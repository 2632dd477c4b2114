"""A fetch over TLS of data that is not in the page cache: the copying path reads the
region with preadv, and a cold chunk is read by a cold-read thread, not on the loop. The
bytes must be those a warm fetch returned (see tests/broker/test_cold_reads.py)."""

from __future__ import annotations

from collections.abc import Callable

from tests.broker.test_cold_reads import drop_pages, fetched, topic_with
from tests.broker.wire_client import WireClient
from tests.tls.certs import Stores
from tests.tls.conftest import TlsBroker, client_context


def test_a_cold_fetch_over_tls_returns_what_a_warm_one_did(
        tls_broker_factory: Callable[..., TlsBroker], stores: Stores) -> None:
    broker = tls_broker_factory()
    topic = topic_with(broker.process, 3, 16 * 1024)
    with WireClient(broker.ssl, tls=client_context(stores)) as client:
        warm = fetched(client, topic)
        drop_pages(broker.process, topic)
        cold_before = broker.process.stats()["cold_regions"]
        assert fetched(client, topic) == warm
    assert broker.process.stats()["cold_regions"] > cold_before

"""Fetches of data that is not in the page cache (cold reads), on real broker processes.

The partition's segment files are made cold the way an operator's ``drop_caches`` would
(``fsync`` + ``POSIX_FADV_DONTNEED`` from this process: the page cache is the kernel's, not
the broker's). What a cold fetch must do: return exactly the bytes a warm fetch returned,
and be sent by the cold-read threads (the broker's ``cold_regions`` counter says it saw
them), never on the event loop, so a warm fetch on another connection is answered while
it goes on. Both ways of telling cold from warm run: cachestat (this kernel's) with the
network threads, and the preadv2 RWF_NOWAIT fallback (``PYBROKER_RESIDENCY=nowait``,
the test override) with everything else on the loop (``num.network.threads=0``).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator

import pytest

from bench.driver import pagecache
from pybroker._native.records import encode_batch
from pybroker.net.protocol import codec
from tests.admin.clients import create_topic, unique
from tests.broker.test_network_threads import broker_with_env
from tests.broker.wire_client import WireClient, fetch_body, produce_body
from tests.conftest import BrokerProcess

PRODUCE, FETCH = 0, 1
FETCH_VERSION = 11
MIB = 1 << 20
# (num.network.threads, PYBROKER_RESIDENCY)
SETUPS = [(3, "cachestat"), (0, "nowait")]


@pytest.fixture(scope="module", params=SETUPS, ids=[f"threads{t}-{r}" for t, r in SETUPS])
def cold_broker(request: pytest.FixtureRequest, _broker_root: str) -> Iterator[BrokerProcess]:
    threads, residency = request.param
    with broker_with_env(_broker_root, {"num.network.threads": threads},
                         {"PYBROKER_RESIDENCY": residency}) as broker:
        assert broker.stats()["residency"] == residency
        yield broker


def topic_with(broker: BrokerProcess, batches: int, record_size: int) -> str:
    """A one-partition topic of ``batches`` batches of 64 records of ``record_size``."""
    topic = unique("cold")
    create_topic(broker.bootstrap, topic, 1, {"max.message.bytes": str(2 * MIB)})
    with WireClient(broker.bootstrap) as client:
        for _ in range(batches):
            batch = encode_batch([os.urandom(record_size) for _ in range(64)])
            response = client.request(PRODUCE, 8, produce_body(topic, 0, batch))
            assert response["responses"][0]["partition_responses"][0]["error_code"] == 0
    return topic


def drop_pages(broker: BrokerProcess, topic: str) -> None:
    pagecache.drop(glob.glob(os.path.join(broker.data_dir, f"{topic}-0", "*.log")))


def fetched(client: WireClient, topic: str) -> bytes:
    response = client.request(FETCH, FETCH_VERSION, fetch_body(topic, 0, 0))
    partition = response["responses"][0]["partitions"][0]
    assert partition["error_code"] == 0
    return bytes(partition["records"])


@pytest.mark.parametrize("batches, record_size, sent_cold", [(4, 16 * 1024, True),
                                                            (3, 512, False)],
                         ids=["4-mib-region", "100-kib-region"])
def test_a_cold_fetch_returns_what_a_warm_one_did(cold_broker: BrokerProcess, batches: int,
                                                  record_size: int, sent_cold: bool) -> None:
    """The large region is asked about in a network thread (or on the loop without
    them), the small one on the loop. The large one is sent by the cold-read threads.
    The small one may not be: the broker reads batch headers through a mapping of the
    segment, a fault there maps the cached pages around the header too, and mapped pages
    survive the drop, so all ~100 KiB can still be cached: only its bytes are checked."""
    topic = topic_with(cold_broker, batches, record_size)
    with WireClient(cold_broker.bootstrap) as client:
        warm = fetched(client, topic)
        assert len(warm) >= batches * 64 * record_size
        drop_pages(cold_broker, topic)
        cold_before = cold_broker.stats()["cold_regions"]
        assert fetched(client, topic) == warm
    if sent_cold:
        assert cold_broker.stats()["cold_regions"] > cold_before


def test_a_warm_fetch_is_answered_while_a_cold_one_is_sent(
        cold_broker: BrokerProcess) -> None:
    """The cold fetch's client reads nothing until the warm fetch is answered, so its
    transfer is unfinished (in a cold-read thread, or waiting for the socket) meanwhile.
    Its connection's second request, pipelined behind it, is answered after it."""
    cold_topic = topic_with(cold_broker, 4, 16 * 1024)
    warm_topic = topic_with(cold_broker, 1, 1024)
    with WireClient(cold_broker.bootstrap) as reader, \
            WireClient(cold_broker.bootstrap) as other:
        cold_expected = fetched(reader, cold_topic)
        warm_expected = fetched(other, warm_topic)
        drop_pages(cold_broker, cold_topic)
        first = reader.send(FETCH, FETCH_VERSION, fetch_body(cold_topic, 0, 0))
        second = reader.send(FETCH, FETCH_VERSION, fetch_body(warm_topic, 0, 0))

        assert fetched(other, warm_topic) == warm_expected

        for correlation, expected in ((first, cold_expected), (second, warm_expected)):
            frame = reader.read_frame()
            got, offset = codec.read_response_header(FETCH, FETCH_VERSION, frame)
            assert got == correlation, "responses out of request order"
            response = codec.decode_response(FETCH, FETCH_VERSION, frame, offset)
            assert bytes(response["responses"][0]["partitions"][0]["records"]) == expected

"""Fixtures for the cluster tests: a real ZooKeeper (Debian's package).

- ``zookeeper``: one standalone ZooKeeper per test session (per xdist worker: every test
  works under a chroot of its own, and a test that pauses or stops ZooKeeper starts its
  own), ``tickTime`` 200 ms, so session timeouts of 2-4 s are accepted; data in
  ``tmp_path_factory``; a
  ``pybroker.cluster.zookeeper_server.ZooKeeperProcess`` (``.connect``, ``.port``,
  ``.pause()``/``.resume()``, ``.stop()``). Starting one costs about half a second.
- ``zk_connect``: a connect string with a fresh chroot per test,
  ``"127.0.0.1:PORT/t<random>"``, the chroot node already created, so tests never see
  each other's znodes.
- ``store_factory(session_timeout_ms=3000, connect=None)``: a started ``ClusterStore`` on
  ``zk_connect`` (or ``connect``), stopped after the test.

- ``cluster_security``: ``"plaintext"`` and ``"sasl_ssl"`` in turn, for the tests whose
  point is traffic between brokers (replication, acks=all, failover, coordinators moving,
  transactions across brokers): they hand it to ``LocalCluster(security=...)`` and so run
  once with plaintext between brokers and once with SASL_SSL (SCRAM-SHA-512 over TLS,
  clients still on PLAINTEXT; ``tests/cluster/harness.py``).
  ``PYBROKER_TEST_CLUSTER_SECURITY=sasl_ssl`` makes every ``LocalCluster`` secured, and
  this fixture then gives ``"sasl_ssl"`` only::

      PYBROKER_TEST_CLUSTER_SECURITY=sasl_ssl PYTHONPATH=. python3 -m pytest -n 2 tests/cluster

Not installed: the tests fail with a message saying what to install (never skipped).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from pybroker.cluster.zk_store import ClusterStore
from pybroker.cluster.zookeeper_server import ZooKeeperProcess, find_zookeeper, start_zookeeper
from tests.cluster.harness import SECURITY_MODES, default_security


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    if find_zookeeper() is None:
        pytest.fail("the cluster tests need ZooKeeper and java: `apt-get install zookeeper` "
                    "(Debian), or set JAVA_HOME / ZOOKEEPER_HOME", pytrace=False)
    zk = start_zookeeper(str(tmp_path_factory.mktemp("zookeeper")))
    try:
        yield zk
    finally:
        zk.resume()  # a test that failed while it was paused
        zk.stop()


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperProcess) -> str:
    chroot = f"/t{uuid.uuid4().hex[:12]}"
    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=30)
    try:
        client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()
    return zookeeper.connect + chroot


@pytest.fixture
def store_factory(zk_connect: str) -> Iterator[Callable[..., ClusterStore]]:
    stores: list[ClusterStore] = []

    def make(session_timeout_ms: int = 3000, connect: str | None = None) -> ClusterStore:
        store = ClusterStore(connect or zk_connect, session_timeout_ms, 30_000)
        store.start()
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.stop()


@pytest.fixture(params=SECURITY_MODES if default_security() == "plaintext" else
                ("sasl_ssl",))
def cluster_security(request: pytest.FixtureRequest) -> str:
    return str(request.param)

"""ClusterStore against a real ZooKeeper: Kafka's znode layout, registration and broker
epochs, the controller election, conditional partition-state writes, notifications and
session loss. Waits poll for an outcome (never assert on timing)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kazoo.client import KazooClient

from pybroker.cluster.zk_store import (
    BadVersionError,
    BrokerIdInUseError,
    ClusterStore,
    ControllerMovedError,
    PartitionState,
    decode_topic_id,
    encode_topic_id,
)
from pybroker.cluster.zookeeper_server import (
    ZooKeeperStartError,
    find_zookeeper,
    four_letter_word,
    start_zookeeper,
)
from pybroker.errors import TopicAlreadyExistsError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T = TypeVar("T")


def wait_for(check: Callable[[], T], what: str, timeout_s: float = 20.0) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Recorder:
    """Collects a watch's calls (made on kazoo's thread)."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self._lock = threading.Lock()

    def __call__(self, value: Any) -> None:
        with self._lock:
            self.calls.append(value)

    @property
    def last(self) -> Any:
        with self._lock:
            return self.calls[-1] if self.calls else None

    def snapshot(self) -> list[Any]:
        with self._lock:
            return list(self.calls)


@contextlib.contextmanager
def bare_client(zk_connect: str) -> Iterator[KazooClient]:
    """A plain kazoo session: the znodes as another Kafka tool would read them."""
    client = KazooClient(hosts=zk_connect, timeout=10)
    client.start(timeout=30)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def raw(zk_connect: str, path: str) -> Any:
    with bare_client(zk_connect) as client:
        data, _ = client.get(path)
    return json.loads(data) if data.startswith((b"{", b"[")) else data.decode()


def exists(zk_connect: str, path: str) -> bool:
    with bare_client(zk_connect) as client:
        return client.exists(path) is not None


# the local ZooKeeper -----------------------------------------------------------------

def test_zookeeper_serves_and_names_its_connect_string(zookeeper):
    assert find_zookeeper() is not None
    assert zookeeper.connect == f"127.0.0.1:{zookeeper.port}"
    assert "Mode: standalone" in four_letter_word(zookeeper.host, zookeeper.port, "srvr")
    assert four_letter_word(zookeeper.host, zookeeper.port, "ruok") == "imok"


def test_zookeeper_on_a_taken_port_fails_with_its_log(zookeeper, tmp_path):
    with pytest.raises(ZooKeeperStartError) as info:
        start_zookeeper(str(tmp_path), port=zookeeper.port)
    assert "Address already in use" in str(info.value)


def test_zookeeper_that_exits_says_why(tmp_path):
    with pytest.raises(ZooKeeperStartError) as info:
        start_zookeeper(str(tmp_path), tick_ms=0)  # ZooKeeper refuses tickTime=0
    assert "exited with code" in str(info.value)
    assert "tickTime is not set" in str(info.value)  # the log tail


def test_java_is_found_on_path_alone(tmp_path, monkeypatch):
    real = find_zookeeper()
    assert real is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "java").symlink_to(os.path.realpath(real.java))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(bin_dir))
    found = find_zookeeper()
    assert found is not None and found.java == str(bin_dir / "java")
    assert found.classpath == real.classpath


def test_zookeeper_restarts_with_its_data(tmp_path):
    zk = start_zookeeper(str(tmp_path))
    try:
        with bare_client(zk.connect) as client:
            client.create("/kept", b"yes")
        port = zk.port
        assert zk.stop() in (0, 143)  # SIGTERM: the JVM's shutdown hooks ran
        zk = start_zookeeper(str(tmp_path), port=port)
        with bare_client(zk.connect) as client:
            assert client.get("/kept")[0] == b"yes"
    finally:
        zk.stop()


def test_chroot_is_created(zookeeper, store_factory):
    chroot = f"/pybroker-{uuid.uuid4().hex[:8]}/nested"
    store = store_factory(connect=zookeeper.connect + chroot)
    store.register_broker(1, "127.0.0.1", 9092, "127.0.0.1:9093")
    assert exists(zookeeper.connect, chroot + "/brokers/ids/1")
    for parent in ("/brokers/topics", "/config/topics", "/config/changes",
                   "/admin/delete_topics", "/isr_change_notification"):
        assert exists(zookeeper.connect, chroot + parent)


# cluster id and registration ------------------------------------------------------------

def test_cluster_id_is_created_once(store_factory, zk_connect):
    first, second = store_factory(), store_factory()
    assert first.cluster_id("abcdefghijklmnopqrstuv") == "abcdefghijklmnopqrstuv"
    assert second.cluster_id("something-else") == "abcdefghijklmnopqrstuv"
    assert raw(zk_connect, "/cluster/id") == {"version": "1", "id": "abcdefghijklmnopqrstuv"}


def test_registration_epoch_and_watch(store_factory, zk_connect):
    watcher = store_factory()
    seen = Recorder()
    watcher.watch_brokers(seen)
    assert seen.last == {}

    one = store_factory()
    epoch = one.register_broker(1, "127.0.0.1", 9092, "127.0.0.1:9192")
    info = wait_for(lambda: seen.last.get(1), "broker 1 in the watch")
    assert (info.host, info.port, info.control, info.epoch) == \
        ("127.0.0.1", 9092, "127.0.0.1:9192", epoch)
    assert watcher.brokers()[1] == info
    node = raw(zk_connect, "/brokers/ids/1")
    assert node["version"] == 5 and node["endpoints"] == ["PLAINTEXT://127.0.0.1:9092"]
    assert (node["host"], node["port"], node["jmx_port"], node["control"]) == \
        ("127.0.0.1", 9092, -1, "127.0.0.1:9192")
    assert int(node["timestamp"]) > 0

    one.stop()  # a closed session removes the registration at once
    wait_for(lambda: seen.last == {}, "broker 1 gone from the watch")
    again = store_factory().register_broker(1, "127.0.0.1", 9092, "127.0.0.1:9192")
    assert again > epoch  # a new registration, a new broker epoch


def test_broker_id_in_use(store_factory):
    owner = store_factory()
    owner.register_broker(7, "127.0.0.1", 9092, "127.0.0.1:1")
    intruder = store_factory(session_timeout_ms=1000)
    with pytest.raises(BrokerIdInUseError):
        intruder.register_broker(7, "127.0.0.1", 9093, "127.0.0.1:2")
    assert owner.brokers()[7].port == 9092


def test_registration_of_a_killed_broker_is_waited_for(store_factory, zk_connect):
    # A broker SIGKILLed and restarted within its session timeout finds its old znode:
    # the new registration waits for that session to expire instead of failing.
    script = (
        "import sys, time\n"
        "from pybroker.cluster.zk_store import ClusterStore\n"
        "store = ClusterStore(sys.argv[1], 2000)\n"
        "store.start()\n"
        "print(store.register_broker(3, '127.0.0.1', 1, 'x:1'), flush=True)\n"
        "time.sleep(600)\n")
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.Popen([sys.executable, "-c", script, zk_connect], env=env,
                             stdout=subprocess.PIPE, text=True)
    try:
        old_epoch = int(child.stdout.readline())
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    store = store_factory(session_timeout_ms=4000)
    new_epoch = store.register_broker(3, "127.0.0.1", 2, "y:2")
    assert new_epoch > old_epoch
    assert store.brokers()[3].port == 2


# the controller -------------------------------------------------------------------------

def test_controller_election(store_factory, zk_connect):
    a, b = store_factory(), store_factory()
    seen_by_b = Recorder()
    b.watch_controller(seen_by_b)
    assert seen_by_b.last is None

    assert a.try_become_controller(1) is True
    assert b.try_become_controller(2) is False
    assert a.increment_controller_epoch() == (1, 0)  # the election's increment
    wait_for(lambda: seen_by_b.last == 1, "b sees controller 1")
    assert b.controller_id() == 1
    node = raw(zk_connect, "/controller")
    assert (node["version"], node["brokerid"]) == (1, 1) and int(node["timestamp"]) > 0
    assert raw(zk_connect, "/controller_epoch") == "1"

    a.stop()  # the winner's session closes: /controller goes
    wait_for(lambda: seen_by_b.last is None, "b sees no controller")
    assert b.try_become_controller(2) is True
    assert b.increment_controller_epoch() == (2, 1)
    wait_for(lambda: seen_by_b.last == 2, "b sees itself")


def test_a_controller_holding_the_node_can_take_it_up_again(store_factory):
    holder, other = store_factory(), store_factory()
    assert holder.try_become_controller(1)
    assert holder.increment_controller_epoch() == (1, 0)
    assert holder.try_become_controller(1)  # /controller is this session's: a fresh epoch
    assert holder.increment_controller_epoch() == (2, 1)
    assert not other.try_become_controller(2)
    assert other.controller_id() == 1


def test_only_one_of_many_contenders_wins(store_factory):
    stores = [store_factory() for _ in range(4)]
    results: dict[int, bool] = {}
    threads = [threading.Thread(target=lambda i=i, s=s: results.__setitem__(
        i, s.try_become_controller(i))) for i, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [i for i, won in results.items() if won]
    assert len(winners) == 1
    assert stores[0].controller_id() == winners[0]
    assert stores[winners[0]].increment_controller_epoch() == (1, 0)


def test_epoch_increment(store_factory, zk_connect):
    store = store_factory()
    assert store.increment_controller_epoch() == (1, 0)
    assert store.increment_controller_epoch() == (2, 1)
    assert store.try_become_controller(5)
    assert store.increment_controller_epoch() == (3, 2)
    assert store.increment_controller_epoch() == (4, 3)
    assert raw(zk_connect, "/controller_epoch") == "4"


# topics -----------------------------------------------------------------------------------

def test_topic_ids_are_kafka_uuid_strings():
    topic_id = uuid.UUID(bytes=b"\xfb\xef\xff" * 5 + b"\xfb")
    assert encode_topic_id(topic_id) == "--__" * 5 + "-w"  # URL-safe alphabet, no padding
    assert decode_topic_id("--__" * 5 + "-w") == topic_id
    assert encode_topic_id(uuid.UUID(int=0)) == "A" * 22


def test_topic_create_read_and_assignment_change(store_factory, zk_connect):
    store, other = store_factory(), store_factory()
    names = Recorder()
    other.watch_topics(names)
    topic_id = uuid.uuid4()
    store.create_topic("orders", topic_id, {0: [1, 2], 1: [2, 3]}, {"retention.ms": "1000"})
    wait_for(lambda: names.last == ["orders"], "the topic in the watch")

    got = other.topic("orders")
    assert (got.name, got.topic_id, got.partitions) == ("orders", topic_id, {0: [1, 2], 1: [2, 3]})
    assert other.topic("missing") is None
    assert other.topics(["orders", "missing"]) == {"orders": got}
    assert other.topic_names() == ["orders"]
    assert other.topic_configs("orders") == {"retention.ms": "1000"}
    assert raw(zk_connect, "/brokers/topics/orders") == {
        "version": 3, "topic_id": encode_topic_id(topic_id),
        "partitions": {"0": [1, 2], "1": [2, 3]}, "adding_replicas": {},
        "removing_replicas": {}}
    assert raw(zk_connect, "/config/topics/orders") == {
        "version": 1, "config": {"retention.ms": "1000"}}

    with pytest.raises(TopicAlreadyExistsError):
        other.create_topic("orders", uuid.uuid4(), {0: [1]}, {})

    store.set_assignment("orders", topic_id, {0: [1, 2], 1: [2, 3], 2: [3, 1]})
    assert other.topic("orders").partitions == {0: [1, 2], 1: [2, 3], 2: [3, 1]}
    assert other.topic("orders").topic_id == topic_id


def test_watch_topic_sees_new_partitions_deletion_and_recreation(store_factory):
    admin, controller = store_factory(), store_factory()
    seen = Recorder()
    controller.watch_topic("grows", seen)
    assert seen.last is None
    first_id = uuid.uuid4()
    admin.create_topic("grows", first_id, {0: [1]}, {})
    wait_for(lambda: seen.last is not None, "the topic")
    assert seen.last.partitions == {0: [1]}
    admin.set_assignment("grows", first_id, {0: [1], 1: [2]})
    wait_for(lambda: seen.last.partitions == {0: [1], 1: [2]}, "the new partition")
    admin.delete_topic("grows")
    wait_for(lambda: seen.last is None, "the deletion")
    second_id = uuid.uuid4()
    admin.create_topic("grows", second_id, {0: [3]}, {})
    wait_for(lambda: seen.last is not None and seen.last.topic_id == second_id,
             "the topic created again")


def test_config_changes(store_factory, zk_connect):
    store, broker = store_factory(), store_factory()
    store.create_topic("a", uuid.uuid4(), {0: [1]}, {})
    store.create_topic("b", uuid.uuid4(), {0: [1]}, {})
    changes = Recorder()
    broker.watch_config_changes(changes)
    store.set_topic_configs("a", {"cleanup.policy": "compact"})
    wait_for(lambda: changes.last == ["a"], "a's change")
    assert broker.topic_configs("a") == {"cleanup.policy": "compact"}
    store.set_topic_configs("b", {"retention.ms": "5"})
    wait_for(lambda: changes.last == ["b"], "b's change (a's is not reported again)")
    assert changes.snapshot() == [["a"], ["b"]]
    with bare_client(zk_connect) as client:
        notes = sorted(client.get_children("/config/changes"))
        assert notes[0].startswith("config_change_")
        assert json.loads(client.get("/config/changes/" + notes[-1])[0]) == \
            {"version": 2, "entity_path": "topics/b"}


def test_broker_configs_and_their_watch(store_factory, zk_connect):
    store, broker = store_factory(), store_factory()
    seen = Recorder()
    broker.watch_broker_configs("<default>", seen)
    wait_for(lambda: seen.last == {}, "the watch's first call (no znode yet)")
    store.set_broker_configs("<default>", {"log.retention.ms": "60000"})
    wait_for(lambda: seen.last == {"log.retention.ms": "60000"}, "the default's change")
    store.set_broker_configs("1", {"message.max.bytes": "5000"})
    assert broker.broker_configs("1") == {"message.max.bytes": "5000"}
    assert broker.broker_configs("2") == {}
    store.set_broker_configs("<default>", {})
    wait_for(lambda: seen.last == {}, "the default emptied")
    with bare_client(zk_connect) as client:
        assert json.loads(client.get("/config/brokers/1")[0]) == \
            {"version": 1, "config": {"message.max.bytes": "5000"}}
        notes = sorted(client.get_children("/config/changes"))
        assert [json.loads(client.get("/config/changes/" + n)[0])["entity_path"]
                for n in notes] == ["brokers/<default>", "brokers/1", "brokers/<default>"]


def test_topic_deletion_requests(store_factory, zk_connect):
    admin, controller = store_factory(), store_factory()
    admin.create_topic("doomed", uuid.uuid4(), {0: [1]}, {"retention.ms": "1"})
    epoch, version = controller.increment_controller_epoch()
    controller.create_partition_state("doomed", 0, 1, 0, [1], epoch, version)
    pending = Recorder()
    controller.watch_topic_deletions(pending)
    assert pending.last == []
    admin.request_topic_deletion("doomed")
    admin.request_topic_deletion("doomed")  # twice is once
    wait_for(lambda: pending.last == ["doomed"], "the deletion request")
    assert exists(zk_connect, "/admin/delete_topics/doomed")

    controller.delete_topic("doomed")
    wait_for(lambda: pending.last == [], "the request consumed")
    assert admin.topic("doomed") is None
    assert admin.topic_names() == []
    assert admin.topic_configs("doomed") == {}
    assert admin.partition_states("doomed") == {}


# partition states ---------------------------------------------------------------------

def test_partition_state_create_and_conditional_set(store_factory, zk_connect):
    controller, leader = store_factory(), store_factory()
    assert controller.try_become_controller(1)
    epoch, version = controller.increment_controller_epoch()
    controller.create_topic("t", uuid.uuid4(), {0: [1, 2, 3], 1: [2, 3, 1]}, {})

    created = controller.create_partition_state("t", 0, 1, 0, [1, 2, 3], epoch, version)
    assert created == PartitionState(1, 0, [1, 2, 3], epoch, 0)
    assert raw(zk_connect, "/brokers/topics/t/partitions/0/state") == {
        "controller_epoch": epoch, "leader": 1, "version": 1, "leader_epoch": 0,
        "isr": [1, 2, 3]}
    with pytest.raises(BadVersionError):  # exists already
        controller.create_partition_state("t", 0, 2, 0, [2], epoch, version)
    controller.create_partition_state("t", 1, 2, 0, [2, 3, 1], epoch, version)

    # The leader shrinks the ISR (no epoch check), then writes from a stale version.
    shrunk = leader.set_partition_state("t", 0, 1, 0, [1, 2], epoch, created.zk_version, None)
    assert shrunk == PartitionState(1, 0, [1, 2], epoch, 1)
    with pytest.raises(BadVersionError):
        leader.set_partition_state("t", 0, 1, 0, [1], epoch, created.zk_version, None)
    assert controller.partition_state("t", 0) == shrunk
    assert controller.partition_states("t") == {
        0: shrunk, 1: PartitionState(2, 0, [2, 3, 1], epoch, 0)}
    assert controller.partition_state("t", 9) is None

    # The controller writes with the right state version.
    moved = controller.set_partition_state("t", 0, 2, 1, [2], epoch, shrunk.zk_version, version)
    assert moved == PartitionState(2, 1, [2], epoch, 2)
    with pytest.raises(BadVersionError):
        controller.set_partition_state("t", 0, 2, 2, [2], epoch, shrunk.zk_version, version)

    # Another controller is elected: the old one's writes fail on the epoch check.
    controller.stop()
    successor = store_factory()
    assert successor.try_become_controller(2)
    new_epoch, new_version = successor.increment_controller_epoch()
    assert new_epoch == epoch + 1
    with pytest.raises(ControllerMovedError):
        leader.set_partition_state("t", 0, 2, 2, [2, 3], epoch, moved.zk_version, version)
    with pytest.raises(ControllerMovedError):
        leader.create_partition_state("t", 5, 2, 0, [2], epoch, version)
    assert leader.partition_state("t", 0) == moved  # nothing written
    assert leader.partition_state("t", 5) is None
    final = successor.set_partition_state("t", 0, 3, 2, [3], new_epoch, moved.zk_version,
                                          new_version)
    assert final == PartitionState(3, 2, [3], new_epoch, 3)


# notifications ---------------------------------------------------------------------------

def test_isr_change_notifications_are_consumed_once(store_factory, zk_connect):
    leader = store_factory()
    readers = [store_factory(), store_factory()]
    recorders = [Recorder(), Recorder()]
    for reader, recorder in zip(readers, recorders, strict=True):
        reader.watch_isr_changes(recorder)
    expected = {("t", p) for p in range(20)}
    for p in range(0, 20, 2):
        leader.notify_isr_change([("t", p), ("t", p + 1)])

    def reported() -> list[tuple[str, int]]:
        return [item for r in recorders for call in r.snapshot() for item in call]

    wait_for(lambda: set(reported()) == expected, "every change reported")
    assert sorted(reported()) == sorted(expected)  # each once, by one of the readers
    assert all(call for r in recorders for call in r.snapshot())  # never an empty call
    with bare_client(zk_connect) as client:
        wait_for(lambda: client.get_children("/isr_change_notification") == [],
                 "the notifications deleted")


def test_isr_change_json(store_factory, zk_connect):
    store = store_factory()
    store.notify_isr_change([("a", 0), ("b", 3)])
    with bare_client(zk_connect) as client:
        [name] = client.get_children("/isr_change_notification")
        assert name.startswith("isr_change_")
        assert json.loads(client.get("/isr_change_notification/" + name)[0]) == {
            "version": 1, "partitions": [{"topic": "a", "partition": 0},
                                         {"topic": "b", "partition": 3}]}


def test_a_failing_callback_does_not_kill_the_watch(store_factory):
    watcher, admin = store_factory(), store_factory()
    calls = Recorder()

    def flaky(names: list[str]) -> None:
        calls(names)
        raise RuntimeError("callback bug")

    watcher.watch_topics(flaky)
    admin.create_topic("x", uuid.uuid4(), {0: [1]}, {})
    wait_for(lambda: calls.last == ["x"], "the first change")
    admin.create_topic("y", uuid.uuid4(), {0: [1]}, {})
    wait_for(lambda: calls.last == ["x", "y"], "the second change after a failed callback")


# session loss -----------------------------------------------------------------------------

class TcpProxy:
    """A loopback TCP relay in front of ZooKeeper that a test can cut (existing
    connections closed, new ones refused at once) and restore: a network partition
    between one client and a server that keeps running (and so expires the session)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.blocked = False
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                if self.blocked:
                    client.close()
                    continue
                server = socket.create_connection(self.upstream)
                self.conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        with self.lock:
            self.blocked = True
            for sock in self.conns:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self.conns.clear()

    def restore(self) -> None:
        with self.lock:
            self.blocked = False

    def close(self) -> None:
        self.cut()
        self.listener.close()


def test_session_loss_is_reported(zookeeper, zk_connect):
    chroot = zk_connect[len(zookeeper.connect):]
    proxy = TcpProxy((zookeeper.host, zookeeper.port))
    store = ClusterStore(f"127.0.0.1:{proxy.port}{chroot}", 1200, 30_000)
    store.start()
    try:
        states = Recorder()
        store.add_state_listener(states)
        brokers = Recorder()
        store.watch_brokers(brokers)
        epoch = store.register_broker(1, "127.0.0.1", 9092, "127.0.0.1:1")
        wait_for(lambda: 1 in brokers.last, "the registration")

        proxy.cut()
        wait_for(lambda: "SUSPENDED" in states.snapshot(), "SUSPENDED")
        # ZooKeeper itself runs on: it expires the session, and the registration goes.
        wait_for(lambda: not exists(zk_connect, "/brokers/ids/1"), "the session expired")
        proxy.restore()
        wait_for(lambda: "LOST" in states.snapshot(), "LOST")
        wait_for(lambda: states.last == "CONNECTED", "a new session")
        assert states.snapshot().index("SUSPENDED") < states.snapshot().index("LOST")
        # Registering again gives a new epoch, and the watch survived the new session.
        assert store.register_broker(1, "127.0.0.1", 9092, "127.0.0.1:1") > epoch
        wait_for(lambda: 1 in brokers.last, "the watch sees the new registration")
    finally:
        store.stop()
        proxy.close()


def test_a_conditional_write_through_a_connection_loss_lands_once(tmp_path):
    # The write is sent while the server is paused: the connection drops before the answer.
    # Whether the server then applied it (read back as ours) or not (written again), the
    # caller gets the one new version and no BadVersionError for its own write.
    with start_zookeeper(str(tmp_path / "zk")) as zk:
        # 6 s: the connection drops after 4 s without answers (kazoo's 2/3), the session
        # stays alive well past the resume even on a busy machine.
        store = ClusterStore(zk.connect + "/w", 6000, 30_000)
        store.start()
        try:
            states = Recorder()
            store.add_state_listener(states)
            epoch, version = store.increment_controller_epoch()
            store.create_topic("t", uuid.uuid4(), {0: [1, 2]}, {})
            created = store.create_partition_state("t", 0, 1, 0, [1, 2], epoch, version)
            outcome: list[Any] = []

            def write() -> None:
                try:
                    outcome.append(store.set_partition_state(
                        "t", 0, 1, 0, [1], epoch, created.zk_version, version))
                except Exception as exc:
                    outcome.append(exc)

            zk.pause()
            try:
                writer = threading.Thread(target=write)
                writer.start()
                wait_for(lambda: "SUSPENDED" in states.snapshot(), "the connection dropped")
            finally:
                zk.resume()
            writer.join(30)
            assert outcome == [PartitionState(1, 0, [1], epoch, created.zk_version + 1)]
            assert "LOST" not in states.snapshot()
            assert store.partition_state("t", 0) == outcome[0]
        finally:
            store.stop()


def test_reassignments_in_the_topic_znode_and_the_legacy_request(store_factory, zk_connect):
    store, other = store_factory(), store_factory()
    topic_id = uuid.uuid4()
    store.create_topic("moving", topic_id, {0: [1, 2], 1: [2, 3]}, {})
    topic, version = store.versioned_topic("moving")
    moving = topic._replace(partitions={0: [3, 1, 2], 1: [2, 3]}, adding={0: [3]},
                            removing={0: [2]})
    store.write_topic(moving, version)
    assert raw(zk_connect, "/brokers/topics/moving") == {
        "version": 3, "topic_id": encode_topic_id(topic_id),
        "partitions": {"0": [3, 1, 2], "1": [2, 3]}, "adding_replicas": {"0": [3]},
        "removing_replicas": {"0": [2]}}
    assert other.topic("moving") == moving
    with pytest.raises(BadVersionError):  # written on a stale read
        store.write_topic(topic, version)
    # new partitions keep the move under way
    store.set_assignment("moving", topic_id, {0: [3, 1, 2], 1: [2, 3], 2: [1, 2]})
    assert other.topic("moving") == moving._replace(partitions={0: [3, 1, 2], 1: [2, 3],
                                                                2: [1, 2]})

    seen = Recorder()
    other.watch_legacy_reassignment(seen)
    wait_for(lambda: seen.last == {}, "no legacy request")
    with bare_client(zk_connect) as client:
        client.create("/admin/reassign_partitions", json.dumps({"version": 1, "partitions": [
            {"topic": "moving", "partition": 1, "replicas": [1, 2]},
            {"topic": "moving", "partition": 2, "replicas": [3]},
            {"topic": "broken"}]}).encode(), makepath=True)
    wanted = {("moving", 1): [1, 2], ("moving", 2): [3]}
    wait_for(lambda: seen.last == wanted, "the legacy request")
    targets, version = store.legacy_reassignment()
    assert targets == wanted
    store.set_legacy_reassignment({("moving", 2): [3]}, version)
    assert raw(zk_connect, "/admin/reassign_partitions") == {"version": 1, "partitions": [
        {"topic": "moving", "partition": 2, "replicas": [3]}]}
    with pytest.raises(BadVersionError):
        store.set_legacy_reassignment({}, version)
    store.set_legacy_reassignment({}, version + 1)
    assert store.legacy_reassignment() is None
    wait_for(lambda: seen.last == {}, "the legacy request gone")

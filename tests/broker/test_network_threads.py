"""Large fetches and produces through the network threads (``num.network.threads``), and
connections that die while a thread is moving their bytes.

Real broker processes, real clients and real sockets. Each broker runs with the pool
(sendfile and splice) or without it (0: everything on the event loop thread). The last
tests drive one Connection in this process, to catch the moment a thread is inside a
transfer when the connection is closed: its fd must stay open (so its number cannot be
reused under the thread) until the thread is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from pybroker._native.records import encode_batch
from pybroker.file_region import FileRegion
from pybroker.net.connection import THREAD_MIN_BYTES, Connection, Limits
from pybroker.net.network_threads import NetworkThreads
from pybroker.net.protocol import codec
from pybroker.net.request_memory import RequestMemory
from tests.admin.clients import create_topic, unique
from tests.broker.wire_client import WireClient, fetch_body, produce_body
from tests.conftest import BrokerProcess

PRODUCE, FETCH = 0, 1
MIB = 1 << 20
TIMEOUT = 30.0
# (num.network.threads, PYBROKER_ZEROCOPY)
SETUPS = [(3, "sendfile"), (3, "splice"), (0, "sendfile")]


@contextlib.contextmanager
def broker_with_env(root: str, settings: dict[str, object],
                    env: dict[str, str]) -> Iterator[BrokerProcess]:
    """A broker of its own with ``env`` set (the native paths' overrides), stopped after."""
    base = tempfile.mkdtemp(dir=root)
    broker = BrokerProcess(os.path.join(base, "data"), settings,
                           os.path.join(base, "broker.log"), env=env).start()
    try:
        yield broker
    finally:
        assert broker.stop() == 0, broker.log_text()[-3000:]


@pytest.fixture(scope="module", params=SETUPS, ids=[f"threads{t}-{z}" for t, z in SETUPS])
def net_broker(request: pytest.FixtureRequest, _broker_root: str) -> Iterator[BrokerProcess]:
    threads, zerocopy = request.param
    with broker_with_env(_broker_root, {"num.network.threads": threads},
                         {"PYBROKER_ZEROCOPY": zerocopy}) as broker:
        assert f"network threads: {threads}" in broker.log_text(), \
            "the broker did not size its pool from num.network.threads"
        yield broker


def big_topic(broker: BrokerProcess, partitions: int = 1) -> str:
    topic = unique("net")
    create_topic(broker.bootstrap, topic, partitions, {"max.message.bytes": str(2 * MIB)})
    return topic


def peer_name(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"{host}:{port}"


def logged(broker: BrokerProcess, text: str) -> bool:
    return text in broker.log_text()


def fd_count(pid: int) -> int:
    """Sockets and pipes, what connections hold (the log's mmaps dup segment fds and
    remake them as a partition grows, so all fds would not be a stable count). Compared
    with <=: clients of earlier tests may still be disconnecting."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:  # closed meanwhile
            continue
        count += target.startswith(("socket:", "pipe:"))
    return count


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {TIMEOUT} s: {what}")
        time.sleep(0.02)


def fetch_frame(topic: str, max_bytes: int) -> bytes:
    return codec.encode_request(FETCH, 11, 1, fetch_body(
        topic, 0, 0, max_bytes=max_bytes, partition_max_bytes=max_bytes), "tests")


def one_mib_batch() -> bytes:
    return encode_batch([os.urandom(1000) for _ in range(MIB // 1024)])


def fill(broker: BrokerProcess, topic: str, mib: int) -> None:
    """``mib`` batches of about 1 MiB in partition 0, through raw produce requests."""
    batch = one_mib_batch()
    with WireClient(broker.bootstrap) as client:
        for _ in range(mib):
            response = client.request(PRODUCE, 8, produce_body(topic, 0, batch))
            assert response["responses"][0]["partition_responses"][0]["error_code"] == 0


def served(broker: BrokerProcess, topic: str) -> None:
    """Another client's large produce and fetch are answered, byte-exact."""
    batch = one_mib_batch()
    with WireClient(broker.bootstrap) as client:
        produced = client.request(PRODUCE, 8, produce_body(topic, 0, batch))
        part = produced["responses"][0]["partition_responses"][0]
        assert part["error_code"] == 0
        fetched = client.request(FETCH, 11, fetch_body(topic, 0, part["base_offset"]))
        records = fetched["responses"][0]["partitions"][0]["records"]
        assert bytes(records)[:len(batch)][61:] == batch[61:]  # header: offsets stamped


# -- real clients, several connections at once ---------------------------------------------

def test_large_batches_round_trip_byte_exact(net_broker: BrokerProcess) -> None:
    partitions, per_partition = 3, 40
    topic = big_topic(net_broker, partitions)
    values = {p: [os.urandom(64 * 1024) for _ in range(per_partition)]
              for p in range(partitions)}
    errors: list[object] = []

    def produce(p: int) -> None:  # ~1 MB produce requests (batch.size), one per connection
        producer = Producer({"bootstrap.servers": net_broker.bootstrap, "linger.ms": 50,
                             "batch.size": 1_000_000, "compression.type": "none"})
        for value in values[p]:
            producer.produce(topic, value, partition=p,
                             on_delivery=lambda err, msg: err and errors.append(err))
        if producer.flush(TIMEOUT):
            errors.append("unflushed")

    got: dict[int, list[bytes]] = {}

    def consume(p: int) -> None:  # each partition fetched over its own connection
        consumer = Consumer({"bootstrap.servers": net_broker.bootstrap,
                             "group.id": unique("g"), "enable.auto.commit": False,
                             "fetch.min.bytes": 512 * 1024, "fetch.wait.max.ms": 100})
        consumer.assign([TopicPartition(topic, p, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while len(out) < per_partition and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out.append(msg.value())
        consumer.close()
        got[p] = out

    for target in (produce, consume):
        threads = [threading.Thread(target=target, args=(p,)) for p in range(partitions)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    for p in range(partitions):
        assert len(got[p]) == per_partition, f"partition {p}: {len(got[p])} messages"
        assert got[p] == values[p], f"partition {p}: bytes differ"
    stats = net_broker.stats()
    assert stats["zero_copy_bytes"] >= partitions * per_partition * 64 * 1024


def test_fetch_of_64_mib_abandoned_mid_response(net_broker: BrokerProcess) -> None:
    topic = big_topic(net_broker)
    fill(net_broker, topic, 64)
    before = fd_count(net_broker.pid)
    peers = []
    for abort in (True, False):  # a reset (SO_LINGER 0), then a plain close
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.connect(("127.0.0.1", net_broker.port))
        peers.append(peer_name(sock))
        sock.sendall(fetch_frame(topic, 64 * MIB))
        received = 0
        while received < MIB:
            received += len(sock.recv(64 * 1024))
        served(net_broker, topic)  # while the 64 MiB response is stalled
        if abort:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    for peer in peers:  # "send failed" or "receive failed", whichever saw it first
        wait_for(functools.partial(logged, net_broker, f"connection {peer}: "),
                 f"a log line for the abandoned fetch of {peer}")
    wait_for(lambda: fd_count(net_broker.pid) <= before, "no fd left behind")
    served(net_broker, topic)


def test_produce_abandoned_mid_frame(net_broker: BrokerProcess) -> None:
    topic = big_topic(net_broker)
    before = fd_count(net_broker.pid)
    lines = []
    for abort in (True, False):
        sock = socket.create_connection(("127.0.0.1", net_broker.port))
        lines.append(f"connection {peer_name(sock)}: " +
                     ("receive failed" if abort else "peer closed"))
        sock.sendall(struct.pack(">i", 8 * MIB) + os.urandom(3 * MIB))
        served(net_broker, topic)  # while that frame is half received
        if abort:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    for line in lines:
        wait_for(functools.partial(logged, net_broker, line), f"a log line {line!r}")
    wait_for(lambda: fd_count(net_broker.pid) <= before, "no fd left behind")
    served(net_broker, topic)


# -- one Connection in this process: close while a thread is inside a transfer ----------

def _socket_target(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


async def _close_while_busy(conn: Connection, busy: Callable[[], bool]) -> None:
    """Close ``conn`` at a moment a network thread is using its fd; check the fd is kept
    open until the thread is back, then closed."""
    while not (busy() and conn._thread_users):
        await asyncio.sleep(0.001)
    fd, target = conn.fd, _socket_target(conn.fd)
    conn.close()  # on the loop thread, so the thread cannot have returned in between
    assert conn.closed
    assert conn.sock.fileno() == fd, "fd closed under a network thread"
    assert _socket_target(fd) == target
    deadline = time.monotonic() + TIMEOUT
    while conn._thread_users:
        assert time.monotonic() < deadline, "the network thread never came back"
        await asyncio.sleep(0.005)
    while conn.sock.fileno() != -1:  # closed by the server's closer right after
        assert time.monotonic() < deadline, "fd not closed once the thread was back"
        await asyncio.sleep(0.001)


def _connection(dispatch, threads: NetworkThreads) -> tuple[Connection, socket.socket]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    limits = Limits(64 * MIB, 64 * MIB, RequestMemory(1 << 30), threads=threads)
    conn = Connection(ours, "test", dispatch, limits, lambda c: None)
    return conn, theirs


def _slow_reader(sock: socket.socket, stop: threading.Event) -> None:
    try:
        while not stop.is_set() and sock.recv(4096):
            time.sleep(0.0005)
    except OSError:
        pass


def trickle_large_frame(sock: socket.socket, stop: threading.Event) -> None:
    """Send the start of an 8 MiB frame, then the rest a slice at a time until ``stop``."""
    try:
        sock.sendall(struct.pack(">i", 8 * MIB) + bytes(THREAD_MIN_BYTES))
        while not stop.is_set():
            sock.sendall(bytes(1024))
            time.sleep(0.001)
    except OSError:
        pass


def test_close_during_threaded_send_keeps_fd_until_thread_returns() -> None:
    threads = NetworkThreads(2)
    memfd = os.memfd_create("region")
    os.write(memfd, os.urandom(8 * MIB))

    async def main() -> None:
        sending = asyncio.Event()

        async def dispatch(conn, frame):
            sending.set()
            return [struct.pack(">i", 8 * MIB), FileRegion(memfd, 0, 8 * MIB)]

        conn, theirs = _connection(dispatch, threads)
        stop = threading.Event()
        reader = threading.Thread(target=_slow_reader, args=(theirs, stop))
        reader.start()
        theirs.sendall(struct.pack(">i", 4) + b"ping")
        await _close_while_busy(conn, sending.is_set)
        stop.set()
        theirs.close()
        reader.join()

    try:
        asyncio.run(main())
    finally:
        threads.close()
        os.close(memfd)


def test_close_during_threaded_receive_keeps_fd_until_thread_returns() -> None:
    threads = NetworkThreads(2)

    async def main() -> None:
        async def dispatch(conn, frame):
            raise AssertionError("the frame was never complete")

        conn, theirs = _connection(dispatch, threads)
        stop = threading.Event()
        writer = threading.Thread(target=trickle_large_frame, args=(theirs, stop))
        writer.start()
        await _close_while_busy(conn, lambda: conn._receiving)
        stop.set()
        writer.join()
        theirs.close()

    try:
        asyncio.run(main())
    finally:
        threads.close()


def test_stop_waits_for_the_threads_and_runs_their_callbacks() -> None:
    """Server.drain relies on it: a connection closed while a thread used its socket
    closes its fd in the thread's callback, which must run before the loop stops."""
    threads = NetworkThreads(2)
    returned: list[object] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        threads.submit(loop, lambda result, error: returned.append(result),
                       time.sleep, (0.05,))
        await threads.stop(timeout=5.0)
        assert not any(t.is_alive() for t in threads._threads)
        assert returned == [None]

    asyncio.run(main())

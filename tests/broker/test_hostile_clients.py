"""Hostile or careless clients cost the broker what they send and what the settings allow,
never what they declare, and never take the others' service.

Real broker processes, real sockets. Memory is read from /proc (VmRSS) and from the
broker's request-memory counters (its stats file); service to others is shown by order
(a bystander answered while the hostile client is still being dealt with), never by time.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import socket
import struct
import threading
import time

import pytest

from pybroker._native.records import encode_batch
from pybroker.net.protocol import codec
from tests.admin.clients import create_topic, unique
from tests.broker.wire_client import WireClient, fetch_body, produce_body

API_VERSIONS, METADATA, PRODUCE, FETCH, JOIN_GROUP, SYNC_GROUP = 18, 3, 0, 1, 11, 14
FIND_COORDINATOR = 10
MIB = 1024 * 1024
WAIT_S = 30.0  # a bound on waiting for something that happens at once, not a timing claim


@pytest.fixture(scope="module", autouse=True)
def _open_files() -> None:
    """This process opens a thousand sockets or more."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def broker_sockets(pid: int, port: int) -> list[tuple[str, int]]:
    """(TCP state in /proc's hex, bytes waiting unread) of each of the broker's sockets on
    ``port``; state "01" is established, "08" CLOSE_WAIT (the peer has closed)."""
    sockets = []
    for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if int(fields[1].rsplit(":", 1)[1], 16) == port:
                        sockets.append((fields[3], int(fields[4].split(":")[1], 16)))
        except FileNotFoundError:
            pass
    return sockets


def receive_queues(pid: int, port: int) -> list[int]:
    return [queued for state, queued in broker_sockets(pid, port) if state == "01"]


def close_wait_sockets(pid: int, port: int) -> int:
    return sum(state == "08" for state, _ in broker_sockets(pid, port))


def api_versions(client: WireClient) -> dict:
    return client.request(API_VERSIONS, 3, {"client_software_name": "t",
                                            "client_software_version": "1"})


def served(bootstrap: str) -> bool:
    with WireClient(bootstrap, timeout=WAIT_S) as c:
        return api_versions(c)["error_code"] == 0


def answered_clients(bootstrap: str, count: int) -> list[WireClient]:
    """``count`` open connections, each answered once (so each has been accepted)."""
    clients = [WireClient(bootstrap) for _ in range(count)]
    for c in clients:
        assert api_versions(c)["error_code"] == 0
    return clients


def served_now(bootstrap: str) -> bool:
    """``served``, False when the connection is refused or closed instead."""
    try:
        return served(bootstrap)
    except (OSError, ConnectionError):
        return False


def connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=WAIT_S)


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


# what a client declares -----------------------------------------------------------------


def test_size_prefixes_followed_by_nothing_cost_no_memory(broker):
    """50 connections each announce a 100 MB request and send nothing more (before: about
    115 MB each, held while open)."""
    assert served(broker.bootstrap)
    before = rss_kib(broker.pid)
    hostile = [connect(broker.bootstrap) for _ in range(50)]
    for sock in hostile:
        sock.sendall(struct.pack(">i", 100_000_000) + b"\x00" * 100)
    assert served(broker.bootstrap)  # every prefix has been read by now
    assert rss_kib(broker.pid) - before < 16 * 1024
    assert broker.stats()["request_bytes"] <= 50 * 1024  # only the bytes that arrived
    for sock in hostile:
        sock.close()


def test_idle_connections_cost_a_few_kib_each(broker):
    assert served(broker.bootstrap)
    before = rss_kib(broker.pid)
    idle = [connect(broker.bootstrap) for _ in range(1000)]
    wait_until(lambda: broker.stats()["connections"] >= 1000, "connections not accepted")
    per_connection = (rss_kib(broker.pid) - before) / 1000
    assert per_connection < 12, f"{per_connection:.1f} KiB per idle connection"
    for sock in idle:
        sock.close()


# clients that send more than they read ----------------------------------------------------


def _pipeline_without_reading(bootstrap: str, request: bytes, stop: threading.Event) -> None:
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.socket()
    # A small receive window: the broker's answers fill the path sooner, so the test is
    # about when reading stops, not about how much loopback buffers.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.settimeout(0.2)
    blob = request * 2000
    try:
        while not stop.is_set():
            try:
                sock.send(blob)
            except TimeoutError:
                pass
    except OSError:
        pass
    finally:
        sock.close()


def test_a_client_that_never_reads_stops_being_read(broker):
    """Pipelined requests whose answers are never read: the broker answers until the
    socket is full, then stops reading that client (before: ApiVersions or Metadata
    requests queued about 130 MB per connection). Fetches of 1 MB fill the socket fast,
    so their reading is seen to stop; the small requests show the memory bound."""
    topic = unique("unread")
    create_topic(broker.bootstrap, topic, 1)
    with WireClient(broker.bootstrap) as c:
        body = produce_body(topic, 0, encode_batch([os.urandom(1_000_000)]))
        assert c.request(PRODUCE, 9, body)["responses"][0]["partition_responses"][0][
            "error_code"] == 0
    before = rss_kib(broker.pid)
    requests = [
        codec.encode_request(FETCH, 12, 1, fetch_body(topic, 0, 0)),
        codec.encode_request(API_VERSIONS, 3, 1, {"client_software_name": "t",
                                                  "client_software_version": "1"}),
        codec.encode_request(METADATA, 12, 1, {"topics": None,
                                               "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": False})]
    stop = threading.Event()
    fetchers = [threading.Thread(target=_pipeline_without_reading,
                                 args=(broker.bootstrap, requests[0], stop)) for _ in range(2)]
    for thread in fetchers:
        thread.start()
    try:
        def settled() -> bool:
            first = broker.stats()["requests"]
            time.sleep(0.5)
            return broker.stats()["requests"] - first <= 2  # the stats signal's own
        wait_until(settled, "the broker kept reading clients that never read")
        # Their requests wait unread in the kernel, not in the broker.
        assert len([q for q in receive_queues(broker.pid, broker.port) if q > 0]) >= 2
        others = [threading.Thread(target=_pipeline_without_reading,
                                   args=(broker.bootstrap, requests[1 + i % 2], stop))
                  for i in range(4)]
        for thread in others:
            thread.start()
        for _ in range(20):  # others are served while the small requests are answered
            assert served(broker.bootstrap)
        time.sleep(2)
        assert rss_kib(broker.pid) - before < 16 * 1024
        # per connection: the read-ahead bound plus one read of tiny requests with overhead
        assert broker.stats()["request_bytes"] <= 6 * 512 * 1024
    finally:
        stop.set()
        for thread in fetchers + others:
            thread.join()


def _pipeline_and_count(bootstrap: str, total: int, received) -> None:
    """A separate process (so that counting does not wait for the test's GIL): sends
    ``total`` ApiVersions requests in one go and counts the answers as they come."""
    request = codec.encode_request(API_VERSIONS, 3, 7, {"client_software_name": "t",
                                                        "client_software_version": "1"})
    sock = connect(bootstrap)
    sender = threading.Thread(target=sock.sendall, args=(request * total,))
    sender.start()
    buf = b""
    while received.value < total:
        chunk = sock.recv(1 << 20)
        assert chunk
        buf += chunk
        while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
            buf = buf[4 + struct.unpack_from(">i", buf)[0]:]
            received.value += 1
    sender.join()
    sock.close()


def test_pipelined_requests_are_served_in_turns_with_other_clients(broker):
    """A client pipelining 50,000 cheap requests has them answered in short turns: another
    client's request is answered after a few of the pipeliner's, not after the pipeliner's
    whole receive buffer of them (about 1,600 before) or all of them."""
    context = multiprocessing.get_context("spawn")
    received = context.Value("l", 0, lock=False)
    total = 50_000
    pipeliner = context.Process(target=_pipeline_and_count,
                                args=(broker.bootstrap, total, received))
    pipeliner.start()
    try:
        wait_until(lambda: received.value > 1000, "the pipeliner got no answers")
        behind = []
        with WireClient(broker.bootstrap) as other:
            for _ in range(5):
                before = received.value
                assert api_versions(other)["error_code"] == 0
                behind.append(received.value - before)
        assert received.value < total, "the pipeline ended before the other client's turns"
        assert sorted(behind)[2] < 400, behind
    finally:
        # the rest of its answers are not looked at: it goes away with them pending
        pipeliner.kill()
        pipeliner.join(WAIT_S)


def test_request_memory_bound_pauses_reading_and_every_request_completes(broker_factory):
    """Eight producers send 900 KB batches at once against a 2 MiB bound on request
    memory: reading pauses instead of allocating, and every batch is still acknowledged
    (frames held partially by paused connections do not deadlock)."""
    broker = broker_factory(queued_max_request_bytes=2 * MIB,
                            socket_request_max_bytes=1 * MIB, message_max_bytes=1 * MIB)
    topic = unique("bound")
    create_topic(broker.bootstrap, topic, 8)
    value = os.urandom(900_000)
    results: list[int] = []

    def produce(partition: int) -> None:
        with WireClient(broker.bootstrap) as c:
            for _ in range(4):
                body = produce_body(topic, partition, encode_batch([value]))
                answer = c.request(PRODUCE, 9, body)
                results.append(answer["responses"][0]["partition_responses"][0]["error_code"])

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(8)]
    for thread in threads:
        thread.start()
    assert served(broker.bootstrap)
    for thread in threads:
        thread.join()
    assert results == [0] * 32
    stats = broker.stats()
    assert stats["request_bytes"] == 0
    # The bound, plus at most one read (1 MiB) per connection let through past it.
    assert 2 * MIB <= stats["request_bytes_peak"] <= 2 * MIB + 9 * MIB


# clients that go away ---------------------------------------------------------------------


def test_a_long_poll_fetch_ends_when_its_client_goes_away(broker):
    topic = unique("poll")
    create_topic(broker.bootstrap, topic, 1)
    assert served(broker.bootstrap)
    fds_before = len(os.listdir(f"/proc/{broker.pid}/fd"))
    pollers = []
    for _ in range(20):
        c = WireClient(broker.bootstrap)
        c.send(FETCH, 12, fetch_body(topic, 0, 0, max_wait_ms=120_000, min_bytes=1))
        pollers.append(c)
    assert served(broker.bootstrap)  # the fetches are parked by now
    for c in pollers:
        c.close()
    wait_until(lambda: close_wait_sockets(broker.pid, broker.port) == 0,
               "sockets of departed long polls still held")
    wait_until(lambda: len(os.listdir(f"/proc/{broker.pid}/fd")) <= fds_before + 1,
               "descriptors of departed long polls still held")
    assert served(broker.bootstrap)


def _join(client: WireClient, group: str, member_id: str) -> dict:
    return client.request(JOIN_GROUP, 5, _join_body(group, member_id))


def _join_body(group: str, member_id: str) -> dict:
    return {"group_id": group, "session_timeout_ms": 30_000, "rebalance_timeout_ms": 60_000,
            "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x01\x00\x00\x00\x00\x00\x00"}]}


def test_a_parked_join_ends_when_its_client_goes_away_and_the_group_goes_on(broker):
    group = unique("group")
    with WireClient(broker.bootstrap) as finder:
        assert finder.request(FIND_COORDINATOR, 3, {"key": group, "key_type": 0})[
            "error_code"] == 0
    first = WireClient(broker.bootstrap)
    a = _join(first, group, "")
    a = _join(first, group, a["member_id"])  # v4+: the id first, then the join
    assert a["error_code"] == 0
    assert first.request(SYNC_GROUP, 3, {
        "group_id": group, "generation_id": a["generation_id"], "member_id": a["member_id"],
        "group_instance_id": None, "assignments": []})["error_code"] == 0
    second = WireClient(broker.bootstrap)
    b = _join(second, group, "")
    second.send(JOIN_GROUP, 5, _join_body(group, b["member_id"]))  # parks: a must rejoin
    assert served(broker.bootstrap)
    second.close()
    wait_until(lambda: close_wait_sockets(broker.pid, broker.port) == 0,
               "the socket of a departed join is still held")
    # The member that left while joining still counts as joining (as in Kafka): the
    # rebalance completes with both, and b is dropped later for never syncing.
    rejoined = _join(first, group, a["member_id"])
    assert rejoined["error_code"] == 0
    assert {m["member_id"] for m in rejoined["members"]} == {a["member_id"], b["member_id"]}
    first.close()


def test_idle_connections_are_closed_after_connections_max_idle_ms(broker_factory):
    broker = broker_factory(connections_max_idle_ms=1000)
    with WireClient(broker.bootstrap) as c:
        assert api_versions(c)["error_code"] == 0
        wait_until(c.closed_by_peer, "an idle connection was not closed")
    assert "connections.max.idle.ms" in broker.log_text()


# connection limits and descriptors --------------------------------------------------------


def test_max_connections_per_ip_closes_the_connection_over_the_limit(broker_factory):
    broker = broker_factory(max_connections_per_ip=3)
    kept = answered_clients(broker.bootstrap, 3)
    with WireClient(broker.bootstrap) as over:
        assert over.closed_by_peer()
    kept.pop().close()
    wait_until(lambda: broker.stats()["connections"] == 2, "a close went unnoticed")
    assert served(broker.bootstrap)
    for c in kept:
        c.close()
    assert "max.connections.per.ip 3" in broker.log_text()


def test_max_connections_holds_new_connections_until_one_closes(broker_factory):
    broker = broker_factory(max_connections=3)
    kept = answered_clients(broker.bootstrap, 3)
    waiting = WireClient(broker.bootstrap, timeout=1.0)  # in the listen backlog
    waiting.send(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    with pytest.raises(TimeoutError):
        waiting.read_frame()  # not accepted while three are open
    kept.pop().close()
    waiting.sock.settimeout(WAIT_S)
    assert waiting.read_frame()  # accepted and answered once one closed
    waiting.close()
    for c in kept:
        c.close()


def test_descriptor_exhaustion_refuses_calmly_and_service_resumes(broker_factory):
    broker = broker_factory(nofile=256)
    bystander = WireClient(broker.bootstrap)
    assert api_versions(bystander)["error_code"] == 0
    flood = []
    for _ in range(400):
        try:
            flood.append(connect(broker.bootstrap))
        except OSError:
            break
    # Past what its descriptors allow the broker refuses, and keeps serving who it has.
    wait_until(lambda: broker.stats()["refused"] > 0, "nothing was refused")
    assert api_versions(bystander)["error_code"] == 0
    refusals = [line for line in broker.log_text().splitlines()
                if "refused a connection" in line or "accept failed" in line]
    assert 1 <= len(refusals) <= 5, refusals  # one line per interval, not one per attempt
    for sock in flood:
        sock.close()
    wait_until(lambda: served_now(broker.bootstrap), "service did not resume")
    bystander.close()

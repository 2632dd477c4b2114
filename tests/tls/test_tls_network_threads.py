"""Large frames on TLS connections, decrypted by network threads (``tlsread``).

One TlsConnection in this process over a socket pair, its client a Python TLS socket in a
thread, so each test can look at the moments a network thread holds the TLS session:
frames arrive byte-exact while responses wait for the session, a close keeps the fd
until the thread is back, and a record that does not decrypt closes the connection.
Without threads (``num.network.threads=0``) the event loop decrypts the same frames.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pybroker._native import tlsread
from pybroker.config import BrokerConfig
from pybroker.net.connection import THREAD_MIN_BYTES, Limits
from pybroker.net.listeners import SSL, Listener
from pybroker.net.network_threads import NetworkThreads
from pybroker.net.request_memory import RequestMemory
from pybroker.net.tls import ServerTls
from pybroker.net.tls_connection import TlsConnection
from tests.broker.test_network_threads import _close_while_busy, trickle_large_frame
from tests.tls.certs import Stores
from tests.tls.conftest import client_context

MIB = 1 << 20
TIMEOUT = 30.0
ANSWER = struct.pack(">i", 4) + b"done"

pytestmark = pytest.mark.skipif(not tlsread.AVAILABLE,
                                reason="this CPython's TLS sessions are not reachable")


@pytest.fixture(params=[2, 0], ids=["threads2", "threads0"])
def threads(request: pytest.FixtureRequest) -> Iterator[NetworkThreads | None]:
    pool = NetworkThreads(request.param) if request.param else None
    yield pool
    if pool is not None:
        pool.close()


def _tls_connection(stores: Stores, dispatch: Any, threads: NetworkThreads | None
                    ) -> tuple[TlsConnection, ssl.SSLSocket]:
    """The broker's side (handshake on the loop) and the client's, not yet shaken."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    tls = ServerTls(BrokerConfig({"ssl.keystore.location": stores.keystore,
                            "ssl.truststore.location": stores.ca}))
    sock = tls.context().wrap_socket(ours, server_side=True, do_handshake_on_connect=False)
    limits = Limits(64 * MIB, 64 * MIB, RequestMemory(1 << 30), threads=threads)
    conn = TlsConnection(sock, "test", dispatch, limits, lambda c: None,
                         Listener("SSL", SSL, "127.0.0.1", 0), tls)
    client = client_context(stores).wrap_socket(theirs, server_hostname="localhost",
                                                do_handshake_on_connect=False)
    return conn, client


def _in_thread(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


async def _joined(thread: threading.Thread) -> None:
    deadline = time.monotonic() + TIMEOUT
    while thread.is_alive():
        assert time.monotonic() < deadline, "the client thread did not finish"
        await asyncio.sleep(0.005)


def test_pipelined_large_frames_arrive_byte_exact(stores: Stores,
                                                  threads: NetworkThreads | None) -> None:
    """Frames of many sizes in one stream, so TLS records straddle frames (the next
    frame's start waits decrypted inside OpenSSL); each is answered by the worker while
    the next is received, so answers wait for the session a thread holds."""
    sizes = [300_000, MIB + 17, 20_000, 2 * MIB + 3, THREAD_MIN_BYTES, 700_001, 40]
    payloads = [os.urandom(size) for size in sizes]
    received: list[bytes] = []
    answers: list[bytes] = []

    async def dispatch(conn, frame):
        received.append(bytes(frame))
        await asyncio.sleep(0.002)  # answered by the worker, while the next frame arrives
        return [ANSWER]

    async def main() -> None:
        conn, client = _tls_connection(stores, dispatch, threads)
        send = conn.sock.send

        def send_alone(data: Any) -> int:  # OpenSSL: one thread at a time per session
            assert not conn._receiving, "a send while a network thread decrypts"
            return send(data)

        conn.sock.send = send_alone  # type: ignore[method-assign]

        def produce() -> None:
            client.do_handshake()
            client.sendall(b"".join(struct.pack(">i", len(p)) + p for p in payloads))
            for _ in payloads:
                answer = b""
                while len(answer) < len(ANSWER):
                    answer += client.recv(len(ANSWER) - len(answer))
                answers.append(answer)
            client.close()

        await _joined(_in_thread(produce))
        conn.close()

    asyncio.run(main())
    assert [len(r) for r in received] == sizes
    assert received == payloads
    assert answers == [ANSWER] * len(payloads)
    if threads is not None:
        assert threads.busy_seconds() > 0, "no network thread received a frame"


def test_close_during_threaded_tls_receive_keeps_fd_until_thread_returns(
        stores: Stores) -> None:
    threads = NetworkThreads(2)

    async def dispatch(conn, frame):
        raise AssertionError("the frame was never complete")

    async def main() -> None:
        conn, client = _tls_connection(stores, dispatch, threads)
        stop = threading.Event()

        def trickle() -> None:
            client.do_handshake()
            trickle_large_frame(client, stop)

        writer = _in_thread(trickle)
        await _close_while_busy(conn, lambda: conn._receiving)
        stop.set()
        await _joined(writer)
        client.close()

    try:
        asyncio.run(main())
    finally:
        threads.close()


def test_a_record_that_does_not_decrypt_mid_frame_closes_the_connection(
        stores: Stores, threads: NetworkThreads | None,
        caplog: pytest.LogCaptureFixture) -> None:
    async def dispatch(conn, frame):
        raise AssertionError("the frame was never complete")

    async def main() -> None:
        conn, client = _tls_connection(stores, dispatch, threads)

        def corrupt() -> None:
            client.do_handshake()
            client.sendall(struct.pack(">i", 2 * MIB) + os.urandom(MIB))
            raw = socket.socket(fileno=os.dup(client.fileno()))
            raw.sendall(b"\x17\x03\x03\x00\x20" + b"\x00" * 32)  # application data, bad MAC
            raw.close()

        writer = _in_thread(corrupt)
        deadline = time.monotonic() + TIMEOUT
        while not conn.closed:
            assert time.monotonic() < deadline, "the bad record did not close the connection"
            await asyncio.sleep(0.005)
        await _joined(writer)
        client.close()

    with caplog.at_level(logging.INFO, logger="pybroker.net"):
        asyncio.run(main())
    assert "connection test: receive failed" in caplog.text

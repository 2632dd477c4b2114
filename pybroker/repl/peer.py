"""A connection from this broker to another, over the Kafka protocol: what the replica
fetcher (fetcher.py), the transaction marker writer (pybroker/txn/markers.py), the
produce path's KIP-890 question (pybroker/txn/verification.py) and the group lag's
ListOffsets (pybroker/broker/leader_offsets.py) use; ``Peers`` keeps one per peer broker
for the marker writer and the verification, and another for the lag.

``PeerClient`` is one broker's address, client id and connection: ``request(api_key,
version, body, timeout_s)`` encodes a request with the codec, sends it, and decodes the
answer; it connects on first use and again after a failure, and sends one request at a
time (its callers wait their turn on a lock), so an answer is always the last request's.
Any failure, timeout or cancellation closes the connection: a late response must never be
read as the answer to the next request.

The connections go to the peers' inter-broker listener; when that is an SSL listener
they speak TLS with the context the broker gives ``use_tls`` at start (its truststore
verifies the peer, its keystore is this broker's client certificate); when it is a SASL
listener each connection first authenticates (SaslHandshake, SaslAuthenticate) with the
mechanism and user the broker gives ``use_sasl`` at start.

Wire: Kafka's framing, a 4-byte big-endian size, then the frame. Responses are received
into a buffer of the frame's size (``BufferedProtocol``: the kernel copies into it,
nothing else does), large ones a ``FrameBuffer`` from the process's frame pool, which the
caller hands back (``recycle``) once nothing holds a view of it.

Not thread-safe: everything runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import cast

from pybroker._native.framebuffer import FrameBuffer
from pybroker.net import frame_pool
from pybroker.net.connection import LARGE_FRAME
from pybroker.net.protocol import codec
from pybroker.security.sasl import SaslClientSettings, SaslRefused, client_requests

log = logging.getLogger("pybroker.peer")

# Kafka's replica.socket.timeout.ms default: a peer that neither answers nor closes
# (paused, cut off) costs at most this much before the connection is made again.
REQUEST_TIMEOUT_S = 30.0
MAX_RESPONSE_BYTES = 1 << 30  # a size prefix above this is garbage, not a response

# a response frame without its size prefix: large ones come from the frame pool
Frame = bytearray | FrameBuffer

# Every peer connection of the process goes to the other brokers' inter-broker listener:
# with TLS when that listener is an SSL one (``use_tls``, once at start).
_tls: ssl.SSLContext | None = None


def use_tls(context: ssl.SSLContext | None) -> None:
    """The context of connections to peers (None: plaintext)."""
    global _tls
    _tls = context


_sasl: SaslClientSettings | None = None


def use_sasl(settings: SaslClientSettings | None) -> None:
    """How connections to peers authenticate (None: they do not)."""
    global _sasl
    _sasl = settings


class PeerConnection(asyncio.BufferedProtocol):
    """One connection to a peer, one request at a time. A response's size prefix is
    received into 4 bytes, then the frame into a buffer of exactly its size."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._size = bytearray(4)
        self._frame: Frame | None = None
        self._target: memoryview = memoryview(self._size)  # what is being filled
        self._filled = 0
        self._waiter: asyncio.Future[Frame] | None = None
        self.error: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a TCP connection's

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._target[self._filled:]

    def buffer_updated(self, nbytes: int) -> None:
        self._filled += nbytes
        if self._filled < len(self._target):
            return
        self._filled = 0
        frame = self._frame
        if frame is None:
            size = int.from_bytes(self._size, "big", signed=True)
            if not 0 < size <= MAX_RESPONSE_BYTES:
                self._fail(ConnectionError(f"bad response size {size}"))
                return
            if size > LARGE_FRAME:
                frame = frame_pool.frames.take(size)
                frame.ensure(size)  # a peer broker's answer: its size is trusted
            else:
                frame = bytearray(size)
            self._frame, self._target = frame, memoryview(frame)
            return
        self._frame, self._target = None, memoryview(self._size)
        waiter, self._waiter = self._waiter, None
        if waiter is None:
            self._fail(ConnectionError("a response nobody asked for"))
        elif not waiter.done():
            waiter.set_result(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionError("connection closed by the peer"))

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    async def request(self, data: bytes, timeout_s: float) -> Frame:
        """Send one request frame, return the response frame (without its size). Any
        failure, timeout or cancellation closes the connection."""
        if self.error is not None:
            raise ConnectionError(f"connection failed: {self.error}")
        waiter: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        try:
            assert self.transport is not None
            self.transport.write(data)
            # asyncio.wait, not wait_for: before Python 3.12, wait_for returns the result
            # when the task is cancelled in the loop iteration that the answer arrives in
            # (CPython gh-86296), so a stop() landing on a busy follower's answer was lost,
            # the fetcher ran on and stop() awaited it forever. Nor asyncio.timeout, which
            # needs a task: a handler's first step may run outside one (the produce path
            # asks a transaction coordinator from there).
            await asyncio.wait((waiter,), timeout=timeout_s)
            if not waiter.done():
                raise TimeoutError(f"no answer in {timeout_s} s")
            return waiter.result()
        except BaseException:
            self._waiter = None
            self.close()
            raise


class PeerClient:
    """Requests to one peer broker over one connection (module doc)."""

    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.connects = 0
        self._conn: PeerConnection | None = None
        self._correlation = 0
        self._turn = asyncio.Lock()

    def __repr__(self) -> str:
        return f"PeerClient({self.host}:{self.port})"

    @property
    def connected(self) -> bool:
        return self._conn is not None and self._conn.error is None

    async def request(self, api_key: int, version: int, body: dict, timeout_s: float
                      ) -> tuple[dict, Frame]:
        """The decoded answer to one request, and the frame it was read from (its
        ``records`` are views of it). Raises OSError, TimeoutError or a codec error, and
        then the connection is closed."""
        async with self._turn:
            conn = self._conn
            if conn is None or conn.error is not None:
                conn = await self._connect()
            return await self._exchange(conn, api_key, version, body, timeout_s)

    async def _exchange(self, conn: PeerConnection, api_key: int, version: int, body: dict,
                        timeout_s: float) -> tuple[dict, Frame]:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        frame = await conn.request(codec.encode_request(
            api_key, version, self._correlation, body, self.client_id), timeout_s)
        correlation, offset = codec.read_response_header(api_key, version, frame)
        if correlation != self._correlation:
            self.close()
            raise ConnectionError(f"correlation id {correlation}, "
                                  f"expected {self._correlation}")
        return codec.decode_response(api_key, version, frame, offset), frame

    async def _authenticate(self, conn: PeerConnection, settings: SaslClientSettings) -> None:
        """SaslHandshake and SaslAuthenticate until the mechanism is done; a refusal
        raises ConnectionError (the connection is closed, the next request tries again)."""
        steps = client_requests(settings)
        try:
            request = next(steps)
            while True:
                answer, _ = await self._exchange(conn, *request, REQUEST_TIMEOUT_S)
                request = steps.send(answer)
        except StopIteration:
            return
        except SaslRefused as exc:
            raise ConnectionError(f"{self!r}: {exc}") from None

    async def _connect(self) -> PeerConnection:
        self.close()
        loop = asyncio.get_running_loop()
        connecting = loop.create_task(loop.create_connection(
            PeerConnection, self.host, self.port, ssl=_tls,
            server_hostname=self.host if _tls is not None else None))
        try:
            await asyncio.wait((connecting,), timeout=REQUEST_TIMEOUT_S)  # (as in request)
            if not connecting.done():
                raise TimeoutError(f"{self!r}: no connection in {REQUEST_TIMEOUT_S} s")
        except BaseException:
            _abandon(connecting)
            raise
        _, conn = connecting.result()
        if _sasl is not None:
            try:
                await self._authenticate(conn, _sasl)
            except BaseException:
                conn.close()
                raise
        self._conn = conn
        self.connects += 1
        log.info("%r: connected", self)
        return conn

    def move_to(self, host: str, port: int) -> None:
        """The peer registered again at another address: connect there."""
        if (host, port) != (self.host, self.port):
            self.host, self.port = host, port
            self.close()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class Peers:
    """A ``PeerClient`` per peer broker, made on first use and kept open: the broker's own
    requests to the others (transaction markers, KIP-890's question to a transaction
    coordinator) go through them."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self._clients: dict[int, PeerClient] = {}

    def client(self, broker_id: int, host: str, port: int) -> PeerClient:
        """The client of broker ``broker_id``, now at ``host:port``."""
        client = self._clients.get(broker_id)
        if client is None:
            client = self._clients[broker_id] = PeerClient(host, port, self.client_id)
        else:
            client.move_to(host, port)
        return client

    def close(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            client.close()


def _abandon(connecting: asyncio.Task[tuple[asyncio.BaseTransport, PeerConnection]]) -> None:
    """A connection attempt nobody waits for any more: stopped, or closed if it was made."""
    if not connecting.done():
        connecting.cancel()
    elif not connecting.cancelled() and connecting.exception() is None:
        connecting.result()[0].close()


def recycle(frame: Frame) -> None:
    """Hand a large response frame back to the pool once nothing holds a view of it."""
    if isinstance(frame, FrameBuffer):
        frame_pool.frames.give(frame)

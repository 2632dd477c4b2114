"""The control channel: the controller's requests to brokers, over pyzmq.

Wire: one zmq message per request or response, holding a Kafka frame without its 4-byte
size prefix (zmq frames messages itself):

    request   := request header (v2: api_key, api_version, correlation_id, client_id,
                 tagged fields) + body        LeaderAndIsr v5, UpdateMetadata v7, StopReplica v3
                                              (the controller's), ElectLeaders v2 and
                                              ControlledShutdown v3 (a broker's to the
                                              controller, ``cluster.admin.ask_controller``)
    response  := response header (correlation_id [+ tagged fields]) + body

Sockets: each broker binds one ROUTER (:class:`ControlServer`); the controller connects
one DEALER per broker (:class:`ControlClient`), and a broker handing an election to the
controller (or asking for its controlled shutdown) one for that request. A DEALER sends bare messages and the ROUTER sees them
prefixed with the peer's routing id, which the answer goes back to.

Order: a server answers one peer's requests in the order they came (LeaderAndIsr before
the UpdateMetadata that names the new leaders), peers independently of each other. A
client may have several requests in flight; answers are matched by correlation id, and
one that comes after its request timed out is dropped. Beyond the contract's TimeoutError,
``request`` raises ConnectionError once the client is closed (its waiters too), so a
sender loop that retries on timeouts ends when the controller lets go of a broker.

Both sockets have linger 0: closing never waits for unsent messages (a controller that
lets go of a dead broker must not hang on its queue).

Not thread-safe: each object is used from the event loop that created it.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import Awaitable, Callable

import zmq
import zmq.asyncio

from pybroker.config import parse_address
from pybroker.errors import ErrorCode
from pybroker.net.protocol import codec

log = logging.getLogger("pybroker.cluster.channel")

Handler = Callable[[int, int, dict], Awaitable[dict]]
SIZE_PREFIX = 4  # codec frames start with an int32 size, which zmq does not need
CLIENT_ID = "pybroker-controller"


def _context() -> zmq.asyncio.Context:
    return zmq.asyncio.Context.instance()


def _failure(api_key: int, api_version: int) -> dict:
    body = codec.response_defaults(api_key, api_version)
    body["error_code"] = ErrorCode.UNKNOWN_SERVER_ERROR
    return body


class ControlServer:
    """A broker's control endpoint: decodes requests, awaits ``handler``, answers."""

    def __init__(self, host: str, port: int, handler: Handler) -> None:
        self.host = host
        self.port = port
        self.handler = handler
        self._socket: zmq.asyncio.Socket | None = None
        self._receiver: asyncio.Task | None = None
        self._tails: dict[bytes, asyncio.Task] = {}  # each peer's last request being served

    def start(self) -> tuple[str, int]:
        """Bind (port 0: any free port) and start serving; returns the bound address."""
        sock = _context().socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            if self.port:
                sock.bind(f"tcp://{self.host}:{self.port}")
            else:
                self.port = sock.bind_to_random_port(f"tcp://{self.host}")
        except zmq.ZMQError:
            sock.close(0)
            raise
        self._socket = sock
        self._receiver = asyncio.get_running_loop().create_task(self._receive())
        return self.host, self.port

    async def close(self) -> None:
        tasks = list(self._tails.values())
        if self._receiver is not None:
            tasks.append(self._receiver)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._receiver = None
        self._tails.clear()
        if self._socket is not None:
            self._socket.close(0)
            self._socket = None

    async def _receive(self) -> None:
        assert self._socket is not None
        loop = asyncio.get_running_loop()
        while True:
            parts = await self._socket.recv_multipart(copy=True)
            if len(parts) != 2:
                log.warning("control channel: dropped a message of %d parts", len(parts))
                continue
            peer, frame = parts
            previous = self._tails.get(peer)
            task = loop.create_task(self._serve(peer, frame, previous))
            self._tails[peer] = task
            task.add_done_callback(functools.partial(self._forget, peer))

    def _forget(self, peer: bytes, task: asyncio.Task) -> None:
        if self._tails.get(peer) is task:
            del self._tails[peer]

    async def _serve(self, peer: bytes, frame: bytes, previous: asyncio.Task | None) -> None:
        if previous is not None:
            await asyncio.wait([previous])  # one peer's requests in order; its outcome is its own
        try:
            header = codec.read_request_header(frame)
            body = codec.decode_request(header.api_key, header.api_version, frame,
                                        header.header_size)
        except Exception as e:
            log.warning("control channel: dropped an undecodable request (%d bytes): %s",
                        len(frame), e)
            return
        key, version = header.api_key, header.api_version
        try:
            answer = await self.handler(key, version, body)
        except Exception:
            log.exception("control channel: %s v%d failed", codec.api_name(key), version)
            answer = _failure(key, version)
        try:
            out = codec.encode_response(key, version, header.correlation_id, answer)
        except Exception:
            log.exception("control channel: cannot encode the %s v%d answer %r",
                          codec.api_name(key), version, answer)
            out = codec.encode_response(key, version, header.correlation_id,
                                        _failure(key, version))
        if self._socket is not None and isinstance(out, bytes):  # no file regions here
            await self._socket.send_multipart([peer, memoryview(out)[SIZE_PREFIX:]])


class ControlClient:
    """The controller's end of one broker's channel (``address`` "host:port")."""

    def __init__(self, broker_id: int, address: str) -> None:
        self.broker_id = broker_id
        self.address = address
        host, port = parse_address(address)
        self._socket = _context().socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.connect(f"tcp://{host}:{port}")
        self._correlation = itertools.count(1)
        self._pending: dict[int, tuple[int, int, asyncio.Future]] = {}
        self._receiver: asyncio.Task | None = None
        self._closed = False

    async def request(self, api_key: int, api_version: int, body: dict,
                      timeout_s: float) -> dict:
        """Send one request and wait for its answer; TimeoutError after ``timeout_s``."""
        if self._closed:
            raise ConnectionError(f"control channel to broker {self.broker_id} is closed")
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        frame = codec.encode_request(api_key, api_version, correlation_id, body, CLIENT_ID)
        future = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (api_key, api_version, future)
        if self._receiver is None:
            self._receiver = asyncio.get_running_loop().create_task(self._receive())
        try:
            await self._socket.send(memoryview(frame)[SIZE_PREFIX:])
            async with asyncio.timeout(timeout_s):  # not wait_for: it can lose a cancel
                return await future
        finally:
            self._pending.pop(correlation_id, None)

    def close(self) -> None:
        self._closed = True
        if self._receiver is not None:
            self._receiver.cancel()
            self._receiver = None
        for _key, _version, future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError(
                    f"control channel to broker {self.broker_id} closed"))
        self._pending.clear()
        self._socket.close(0)

    async def _receive(self) -> None:
        while True:
            frame = await self._socket.recv()
            try:
                correlation_id = int.from_bytes(frame[:4], "big", signed=True)
                pending = self._pending.get(correlation_id)
                if pending is None:
                    log.debug("control channel: broker %d answered %d late, dropped",
                              self.broker_id, correlation_id)
                    continue
                key, version, future = pending
                _, offset = codec.read_response_header(key, version, frame)
                answer = codec.decode_response(key, version, frame, offset)
            except Exception as e:
                log.warning("control channel: dropped an undecodable answer from broker %d: %s",
                            self.broker_id, e)
                continue
            if not future.done():
                future.set_result(answer)

    def __repr__(self) -> str:
        return f"ControlClient(broker {self.broker_id} at {self.address})"

"""One blocking, pipelined connection to a Kafka-protocol broker.

The bulk producer keeps several requests in flight on one socket (Kafka answers a
connection's requests in order), so a connection is a send queue of correlation ids and
a receive loop that matches each response to the oldest outstanding request. Request
payloads go out with ``sendmsg`` straight from the caller's buffers: a produce request's
record batches are never copied into a request buffer.

A connection to a TLS or SASL listener (``security``, :mod:`pybroker.client.security`)
speaks TLS from the start and authenticates before its first request; over TLS the
request parts are joined before sending (an SSL socket has no ``sendmsg``), and a caller
that polls ``fileno`` must not (data may wait decrypted in the TLS layer): the bulk
producer connects to PLAINTEXT listeners only.

Thread safety: none; a connection belongs to one thread (one Spark task, one producer).
"""

from __future__ import annotations

import collections
import socket
import struct
from typing import TYPE_CHECKING

from pybroker.net.protocol import codec

if TYPE_CHECKING:
    from pybroker.client.security import ClientSecurity

_I32 = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">ihhi")  # size, api key, api version, correlation id


class ConnectionClosed(OSError):
    """The broker closed the connection or it broke mid-response."""


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str = "pybroker-client",
                 timeout: float = 30.0, security: ClientSecurity | None = None) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self._client_id_bytes = client_id.encode()
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._tls = security is not None and security.tls is not None
        try:
            if security is not None and security.tls is not None:
                sock = security.tls.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._next_correlation_id = 0
        # (correlation id, api key, api version) of requests sent and not yet answered.
        self._in_flight: collections.deque[tuple[int, int, int]] = collections.deque()
        self._header = bytearray(4)
        if security is not None and security.sasl is not None:
            try:
                self._authenticate(security)
            except BaseException:
                self.close()
                raise

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def close(self) -> None:
        self._sock.close()

    def fileno(self) -> int:
        """The socket's descriptor, for a poll on responses (the bulk producer's sender)."""
        return self._sock.fileno()

    def __enter__(self) -> BrokerConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _correlation_id(self) -> int:
        cid = self._next_correlation_id
        self._next_correlation_id = (cid + 1) & 0x7FFFFFFF
        return cid

    def send(self, api_key: int, api_version: int, body: dict,
             expect_response: bool = True) -> int:
        """Send a request encoded by the generic codec; returns its correlation id."""
        cid = self._correlation_id()
        frame = codec.encode_request(api_key, api_version, cid, body, self.client_id)
        self._sock.sendall(frame)
        if expect_response:
            self._in_flight.append((cid, api_key, api_version))
        return cid

    def send_parts(self, api_key: int, api_version: int, parts: list,
                   expect_response: bool = True) -> int:
        """Send a request whose body (after a header v1) is ``parts``, without copying them.

        Only for non-flexible request versions (header v1: client id as an int16 string).
        """
        cid = self._correlation_id()
        body_size = sum(memoryview(p).nbytes for p in parts)
        header = _REQUEST_HEADER.pack(8 + 2 + len(self._client_id_bytes) + body_size,
                                      api_key, api_version, cid)
        header += struct.pack(">h", len(self._client_id_bytes)) + self._client_id_bytes
        self._sendmsg_all([header, *parts])
        if expect_response:
            self._in_flight.append((cid, api_key, api_version))
        return cid

    def _authenticate(self, security: ClientSecurity) -> None:
        """SASL before anything else; a refusal raises ``SaslRefused`` (an OSError)."""
        from pybroker.security.sasl import client_requests

        assert security.sasl is not None
        steps = client_requests(security.sasl)
        try:
            request = next(steps)
            while True:
                request = steps.send(self.request(*request))
        except StopIteration:
            return

    def _sendmsg_all(self, parts: list) -> None:
        views = [memoryview(p).cast("B") for p in parts]
        if self._tls:
            self._sock.sendall(b"".join(views))
            return
        while views:
            sent = self._sock.sendmsg(views)
            while sent and views:
                n = views[0].nbytes
                if sent >= n:
                    sent -= n
                    views.pop(0)
                else:
                    views[0] = views[0][sent:]
                    sent = 0

    def _recv_exact(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:], n - got)
            if k == 0:
                raise ConnectionClosed(f"{self.host}:{self.port} closed the connection")
            got += k
        return buf

    def receive(self) -> tuple[int, dict]:
        """The next response, decoded: (correlation id, body)."""
        cid, api_key, api_version, frame, offset = self.receive_raw()
        return cid, codec.decode_response(api_key, api_version, frame, offset)

    def receive_raw(self) -> tuple[int, int, int, bytearray, int]:
        """The next response undecoded: (cid, api key, version, frame, body offset)."""
        if not self._in_flight:
            raise RuntimeError("no request in flight")
        size = _I32.unpack(self._recv_exact(4))[0]
        frame = self._recv_exact(size)
        expected, api_key, api_version = self._in_flight.popleft()
        cid, header_size = codec.read_response_header(api_key, api_version, frame)
        if cid != expected:
            raise ConnectionClosed(f"correlation id {cid} answered, expected {expected}")
        return cid, api_key, api_version, frame, header_size

    def request(self, api_key: int, api_version: int, body: dict) -> dict:
        """Send one request and wait for its response (no other request in flight)."""
        self.send(api_key, api_version, body)
        return self.receive()[1]

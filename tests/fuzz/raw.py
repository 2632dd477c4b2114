"""A bare socket client for the bad-input tests: sends any bytes, decodes what comes back
with the project's codec, and tells an answer from a closed connection."""

from __future__ import annotations

import socket
import struct
from typing import Any

from pybroker.net.protocol import codec

TIMEOUT = 10.0


class Closed(Exception):
    """The broker closed the connection instead of answering."""


class RawClient:
    def __init__(self, bootstrap: str, timeout: float = TIMEOUT) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        """One response frame without its size prefix; raises Closed on EOF or reset."""
        size = struct.unpack(">i", self._read_exactly(4))[0]
        return self._read_exactly(size)

    def _read_exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out))
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise Closed()
            out += chunk
        return bytes(out)

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.correlation_id += 1
        self.send(codec.encode_request(api_key, version, self.correlation_id, body))
        return self.response(api_key, version)

    def response(self, api_key: int, version: int) -> dict[str, Any]:
        frame = self.read_frame()
        correlation_id, offset = codec.read_response_header(api_key, version, frame)
        assert correlation_id == self.correlation_id
        return codec.decode_response(api_key, version, frame, offset)

    def is_closed(self) -> bool:
        """Whether the broker closes the connection (within the socket timeout)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

"""A blocking Kafka-protocol client over one socket, for exact requests in tests.

Encodes with the project's codec and decodes the answers; ``raw`` sends arbitrary bytes,
so tests can send what no real client would (garbage, oversize prefixes, bad batches).
"""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any

from pybroker.net.protocol import codec

TIMEOUT = 30.0


class WireClient:
    def __init__(self, bootstrap: str, timeout: float = TIMEOUT,
                 tls: ssl.SSLContext | None = None) -> None:
        """``tls``: speak TLS with this context (an SSL listener)."""
        host, port = bootstrap.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock = tls.wrap_socket(sock, server_hostname=host) if tls is not None else sock
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def send(self, api_key: int, version: int, body: dict) -> int:
        self._correlation += 1
        # Tests name the fields they are about; the rest take the spec's defaults.
        body = codec.with_defaults(api_key, version, body)
        self.sock.sendall(codec.encode_request(api_key, version, self._correlation, body,
                                               client_id="tests"))
        return self._correlation

    def receive(self, api_key: int, version: int) -> dict:
        frame = self.read_frame()
        correlation, offset = codec.read_response_header(api_key, version, frame)
        assert correlation == self._correlation
        return codec.decode_response(api_key, version, frame, offset)

    def request(self, api_key: int, version: int, body: dict) -> dict:
        self.send(api_key, version, body)
        return self.receive(api_key, version)

    def raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._read_exactly(4))[0]
        return self._read_exactly(size)

    def _read_exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def closed_by_peer(self) -> bool:
        """True when the broker closed this connection (reads EOF or a reset)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


def produce_body(topic: str, partition: int, batch: bytes | None, acks: int = 1) -> dict:
    return {"transactional_id": None, "acks": acks, "timeout_ms": 30000,
            "topic_data": [{"name": topic,
                            "partition_data": [{"index": partition, "records": batch}]}]}


def fetch_body(topic: str, partition: int, offset: int, *, max_wait_ms: int = 0,
               min_bytes: int = 1, max_bytes: int = 50 * 1024 * 1024,
               partition_max_bytes: int = 50 * 1024 * 1024, isolation_level: int = 0) -> dict:
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": max_bytes, "isolation_level": isolation_level, "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [
                {"partition": partition, "fetch_offset": offset,
                 "partition_max_bytes": partition_max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def decode_all(records: Any) -> list[Any]:
    """Every record of a fetched records field (several batches back to back)."""
    from pybroker._native.records import decode_records, read_batch_header

    data = bytes(records or b"")
    out = []
    position = 0
    while position < len(data):
        size = read_batch_header(data, position).size
        out += decode_records(data[position:position + size])
        position += size
    return out

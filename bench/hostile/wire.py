"""Exact Kafka requests over one blocking socket, with a deadline on every answer.

Requests are encoded with the project's codec (Kafka's generated message specs), so they
mean the same to any Kafka-protocol broker. The versions below are ones both Apache Kafka
4.1 (which dropped the oldest versions, KIP-896) and pybroker accept; all are answered by
one broker, the one at the bootstrap address (no leader routing: a single-node broker).
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from pybroker.errors import ErrorCode
from pybroker.net.protocol import codec

PRODUCE, FETCH, METADATA = 0, 1, 3
FIND_COORDINATOR, JOIN_GROUP, LEAVE_GROUP = 10, 11, 13
API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS = 18, 19, 20
VERSION = {PRODUCE: 8, FETCH: 11, METADATA: 9, FIND_COORDINATOR: 2, JOIN_GROUP: 5,
           LEAVE_GROUP: 3, API_VERSIONS: 3, CREATE_TOPICS: 4, DELETE_TOPICS: 4}
# JoinGroup v3 is the newest that does not answer a new member MEMBER_ID_REQUIRED first,
# so a join parks at once (used where a request must wait in the broker).
JOIN_GROUP_PARKING_VERSION = 3

CLIENT_ID = "bench-hostile"
# A consumer's JoinGroup protocol metadata (ConsumerProtocolSubscription v0): version 0,
# no topics, null user data. Kafka parses it, and logs a stack trace when it cannot.
EMPTY_SUBSCRIPTION = b"\x00\x00" + b"\x00\x00\x00\x00" + b"\xff\xff\xff\xff"


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"ERROR_{code}"


def frame(api_key: int, body: dict, correlation: int = 1, client_id: str | None = CLIENT_ID,
          version: int | None = None) -> bytes:
    """One whole request (size prefix included), for sockets that never read the answer.
    Fields ``body`` leaves out take the spec's defaults: patterns name what they are about."""
    version = VERSION[api_key] if version is None else version
    return codec.encode_request(api_key, version, correlation,
                                codec.with_defaults(api_key, version, body), client_id)


class Connection:
    """A blocking connection; ``request`` raises ``TimeoutError`` past its deadline."""

    def __init__(self, bootstrap: str, timeout: float = 30.0,
                 client_id: str | None = CLIENT_ID) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.client_id = client_id
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def send(self, api_key: int, body: dict, version: int | None = None) -> int:
        self._correlation += 1
        self.sock.sendall(frame(api_key, body, self._correlation, self.client_id, version))
        return self._correlation

    def receive(self, api_key: int, correlation: int, version: int | None = None,
                deadline: float | None = None) -> dict:
        version = VERSION[api_key] if version is None else version
        deadline = time.monotonic() + self.timeout if deadline is None else deadline
        size = struct.unpack(">i", self._read_exactly(4, deadline))[0]
        data = self._read_exactly(size, deadline)
        got, offset = codec.read_response_header(api_key, version, data)
        if got != correlation:
            raise ConnectionError(f"answer to request {got} where {correlation} was due")
        return codec.decode_response(api_key, version, data, offset)

    def request(self, api_key: int, body: dict, version: int | None = None,
                deadline: float | None = None) -> dict:
        return self.receive(api_key, self.send(api_key, body, version), version, deadline)

    def _read_exactly(self, n: int, deadline: float) -> bytes:
        chunks = []
        while n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no answer before the deadline")
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)


# -- request bodies -------------------------------------------------------------------------

def produce_body(partitions: dict[tuple[str, int], bytes], acks: int = 1,
                 timeout_ms: int = 30000) -> dict:
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), batch in partitions.items():
        by_topic.setdefault(topic, []).append({"index": partition, "records": batch})
    return {"transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": t, "partition_data": p} for t, p in by_topic.items()]}


def fetch_body(topic: str, partition: int, offset: int, max_wait_ms: int = 500,
               min_bytes: int = 1, max_bytes: int = 1 << 20) -> dict:
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": max_bytes, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [
                {"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                 "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def metadata_body(topics: list[str] | None, auto_create: bool = False) -> dict:
    return {"topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": auto_create,
            "include_topic_authorized_operations": False}


def create_topics_body(names: list[str], partitions: int = 1,
                       timeout_ms: int = 120000) -> dict:
    return {"topics": [{"name": n, "num_partitions": partitions, "replication_factor": 1,
                        "assignments": [], "configs": []} for n in names],
            "timeout_ms": timeout_ms, "validate_only": False}


def delete_topics_body(names: list[str], timeout_ms: int = 120000) -> dict:
    return {"topic_names": names, "timeout_ms": timeout_ms}


def join_group_body(group: str, member_id: str = "", session_timeout_ms: int = 30000,
                    rebalance_timeout_ms: int = 60000) -> dict:
    return {"group_id": group, "session_timeout_ms": session_timeout_ms,
            "rebalance_timeout_ms": rebalance_timeout_ms, "member_id": member_id,
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": EMPTY_SUBSCRIPTION}]}


def api_versions_body() -> dict:
    return {"client_software_name": "bench-hostile", "client_software_version": "1"}


# -- answers --------------------------------------------------------------------------------

def topic_errors(response: dict) -> dict[str, int]:
    """Error code per topic of a CreateTopics or DeleteTopics answer."""
    key = "topics" if "topics" in response else "responses"
    return {t["name"]: t["error_code"] for t in response[key]}


def count_errors(codes: list[int]) -> dict[str, int]:
    """How many of each error code (by name), NONE included."""
    out: dict[str, int] = {}
    for code in codes:
        out[error_name(code)] = out.get(error_name(code), 0) + 1
    return out


def produce_errors(response: dict) -> list[int]:
    return [p["error_code"] for t in response["responses"] for p in t["partition_responses"]]

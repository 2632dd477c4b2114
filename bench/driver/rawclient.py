"""A Kafka-protocol client over one plain socket, cheap enough per byte to load a broker.

The driver's librdkafka consumers (confluent-kafka) decode every record into a Python
object and top out near 200k records/s per process, far below what a broker serves from
the page cache. These readers cost the client little per byte instead:

- ``Connection`` sends requests encoded with pybroker's codec and receives each response
  with ``recv_into`` a large buffer reused for the life of the connection.
- ``read_topic`` fetches every partition of a topic from offset 0 to given end offsets
  (Fetch v12: topic names, which Kafka 4.1 and pybroker both serve). The codec decodes the
  response's partition headers and leaves each records field a view of the buffer;
  ``walk_batches`` steps over the record-batch headers only (61 bytes each) to count
  records and find the next offset. Records are never decoded. A trailing partial batch
  (Kafka cuts a response at the byte limit, mid-batch) is not counted: the next fetch
  starts at its base offset.
- ``preload`` fills a topic with identical uncompressed batches of fixed-size values
  (encode_batch, once), several Produce requests in flight, acks=1.

One broker is assumed to lead every partition (a single node, as the side-by-side runs
use); a partition error stops the run with the broker's error code.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

from pybroker._native.records import encode_batch, read_batch_header
from pybroker.net.protocol import codec

PRODUCE, FETCH = 0, 1
PRODUCE_VERSION, FETCH_VERSION = 8, 12
BATCH_HEADER = 61            # bytes of a v2 record batch header
RECORD_OVERHEAD = 10         # bytes around a short unkeyed record's value in a v2 batch
_SIZE = struct.Struct(">i")
NOT_READY = {3, 5, 6}  # UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER


class BrokerError(RuntimeError):
    """The broker answered with an error code for a partition this client reads or fills."""


class Connection:
    def __init__(self, bootstrap: str, buffer_bytes: int = 64 << 20, timeout: float = 60.0):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray(buffer_bytes)
        self.view = memoryview(self.buffer)
        self.correlation = 0

    def close(self) -> None:
        self.view.release()
        self.sock.close()

    def send(self, api_key: int, version: int, body: dict[str, Any]) -> None:
        self.correlation += 1
        body = codec.with_defaults(api_key, version, body)
        self.sock.sendall(codec.encode_request(api_key, version, self.correlation, body,
                                               "pybroker-bench"))

    def receive(self, api_key: int, version: int) -> dict[str, Any]:
        """The next response, decoded; its records fields are views of the reused buffer,
        valid until the next receive."""
        size = self._receive_frame()
        frame = self.view[:size]
        _, offset = codec.read_response_header(api_key, version, frame)
        return codec.decode_response(api_key, version, frame, offset)

    def _receive_frame(self) -> int:
        """Reads one size-prefixed frame to the start of the buffer; returns its size.
        Usually one recv_into for the prefix and a few for the body."""
        self._receive_exactly(0, 4)
        size = _SIZE.unpack_from(self.buffer)[0]
        if size > len(self.buffer):
            self.view.release()
            self.buffer = bytearray(size)
            self.view = memoryview(self.buffer)
        self._receive_exactly(0, size)
        return size

    def _receive_exactly(self, start: int, n: int) -> None:
        got, recv_into, view = 0, self.sock.recv_into, self.view
        while got < n:
            k = recv_into(view[start + got:start + n])
            if k == 0:
                raise ConnectionError("the broker closed the connection")
            got += k


def walk_batches(records: Any, fetch_offset: int) -> tuple[int, int, int]:
    """(records, bytes, next offset) of the complete batches in a fetched records field.

    A batch that ends past the field (a partial trailing batch) is left for the next
    fetch. Batches wholly below ``fetch_offset`` (a broker may return the batch holding
    the offset asked for) are stepped over; their records are not counted again.
    """
    count = size = 0
    position, end, next_offset = 0, len(records), fetch_offset
    while position + BATCH_HEADER <= end:
        batch = read_batch_header(records, position)
        batch_end = position + batch.size
        if batch_end > end:
            break
        if batch.last_offset >= next_offset:
            count += batch.records_count if batch.base_offset >= next_offset \
                else batch.last_offset + 1 - next_offset
            size += batch.size
            next_offset = batch.last_offset + 1
        position = batch_end
    return count, size, next_offset


@dataclass
class ReadResult:
    records: int
    bytes: int           # complete record batches received (headers included)
    fetches: int
    started: float       # CLOCK_MONOTONIC seconds
    finished: float

    def as_dict(self) -> dict[str, Any]:
        return {"records": self.records, "bytes": self.bytes, "fetches": self.fetches,
                "started": self.started, "finished": self.finished}


def read_topic(bootstrap: str, topic: str, end_offsets: list[int],
               fetch_max_bytes: int = 52428800, partition_max_bytes: int = 1048576,
               max_wait_ms: int = 500, connection: Connection | None = None) -> ReadResult:
    """Fetch partitions 0..len(end_offsets)-1 of ``topic`` from offset 0 until each
    reaches its end offset; every partition in every request until it is done."""
    conn = connection or Connection(bootstrap)
    offsets = [0] * len(end_offsets)
    records = size = fetches = 0
    started = time.monotonic()
    try:
        while True:
            wanted = [p for p, end in enumerate(end_offsets) if offsets[p] < end]
            if not wanted:
                break
            conn.send(FETCH, FETCH_VERSION, {
                "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1,
                "max_bytes": fetch_max_bytes, "isolation_level": 0,
                "topics": [{"topic": topic, "partitions": [
                    {"partition": p, "fetch_offset": offsets[p],
                     "partition_max_bytes": partition_max_bytes} for p in wanted]}]})
            response = conn.receive(FETCH, FETCH_VERSION)
            fetches += 1
            if response["error_code"]:
                raise BrokerError(f"fetch {topic}: error code {response['error_code']}")
            for answer in response["responses"]:
                for part in answer["partitions"]:
                    p = part["partition_index"]
                    if part["error_code"]:
                        raise BrokerError(f"fetch {topic}-{p} at {offsets[p]}: "
                                          f"error code {part['error_code']}")
                    n, b, offsets[p] = walk_batches(part["records"] or b"", offsets[p])
                    records += n
                    size += b
        return ReadResult(records, size, fetches, started, time.monotonic())
    finally:
        if connection is None:
            conn.close()


def records_per_batch(message_size: int, batch_bytes: int) -> int:
    return max(1, (batch_bytes - BATCH_HEADER) // (message_size + RECORD_OVERHEAD))


def preload(bootstrap: str, topic: str, partitions: int, total_bytes: int,
            message_size: int, batch_bytes: int, in_flight: int = 8,
            ready_timeout: float = 30.0) -> dict[str, Any]:
    """Fill ``topic`` with ``total_bytes`` of values (``message_size`` each) spread evenly
    over its partitions; returns {"end_offsets", "records", "batch_bytes"} where
    batch_bytes is what was written (record batches, headers included)."""
    per_batch = records_per_batch(message_size, batch_bytes)
    per_partition = -(-total_bytes // message_size // partitions)
    values: list[bytes | None] = [os.urandom(message_size) for _ in range(per_batch)]
    full = encode_batch(values)
    batches: list[bytes] = []   # one partition's batches, the same for every partition
    left = per_partition
    while left:
        n = min(left, per_batch)
        batches.append(full if n == per_batch else encode_batch(values[:n]))
        left -= n
    conn = Connection(bootstrap, buffer_bytes=1 << 20)

    def send(batch: bytes, to: Any = range(partitions)) -> None:
        conn.send(PRODUCE, PRODUCE_VERSION, {
            "transactional_id": None, "acks": 1, "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": p, "records": batch} for p in to]}]})
    try:
        # A new topic's partitions may not take writes yet although the metadata names
        # their leader (Kafka answers NOT_LEADER_OR_FOLLOWER for a moment): the first
        # batch goes alone to each partition until accepted, the rest pipelined.
        deadline = time.monotonic() + ready_timeout
        waiting = set(range(partitions))
        while waiting:
            send(batches[0], sorted(waiting))
            for answer in conn.receive(PRODUCE, PRODUCE_VERSION)["responses"]:
                for part in answer["partition_responses"]:
                    code = part["error_code"]
                    if code == 0:
                        waiting.discard(part["index"])
                    elif code not in NOT_READY or time.monotonic() > deadline:
                        raise BrokerError(f"produce {topic}-{part['index']}: "
                                          f"error code {code}")
            if waiting:
                time.sleep(0.2)
        pending = 0
        for batch in batches[1:]:
            send(batch)
            pending += 1
            if pending >= in_flight:
                _check_produced(conn.receive(PRODUCE, PRODUCE_VERSION), topic)
                pending -= 1
        for _ in range(pending):  # the last in_flight - 1 answers
            _check_produced(conn.receive(PRODUCE, PRODUCE_VERSION), topic)
    finally:
        conn.close()
    return {"end_offsets": [per_partition] * partitions,
            "records": per_partition * partitions,
            "batch_bytes": sum(len(b) for b in batches) * partitions}


def _check_produced(response: dict[str, Any], topic: str) -> None:
    for answer in response["responses"]:
        for part in answer["partition_responses"]:
            if part["error_code"]:
                raise BrokerError(f"produce {topic}-{part['index']}: "
                                  f"error code {part['error_code']}")

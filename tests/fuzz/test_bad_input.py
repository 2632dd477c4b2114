"""Each kind of bad input gets the Kafka error code the Java broker gives, or a closed
connection with a log line; the broker keeps serving every other client throughout."""

from __future__ import annotations

import struct

import pytest

from pybroker._native.records import encode_batch
from pybroker.errors import ErrorCode
from pybroker.net.protocol import codec
from tests.admin.clients import consume, create_topic, produce, unique
from tests.fuzz.raw import RawClient

PRODUCE, FETCH, METADATA, API_VERSIONS, CREATE_TOPICS, DELETE_RECORDS = 0, 1, 3, 18, 19, 21


@pytest.fixture(scope="module")
def strict_broker(module_broker_factory):
    """No auto-creation, small requests: unknown topics and oversize frames are visible."""
    return module_broker_factory(auto_create_topics_enable=False,
                                 socket_request_max_bytes=1024 * 1024)


@pytest.fixture
def bystander(strict_broker):
    """A client connected before the bad input that must still be served after it."""
    client = RawClient(strict_broker.bootstrap)
    yield client
    assert client.request(API_VERSIONS, 3, {"client_software_name": "t",
                                            "client_software_version": "1"})["error_code"] == 0
    client.close()
    assert strict_broker.alive()


def _produce_body(topic: str, records: bytes, acks: int = -1, partition: int = 0) -> dict:
    return {"transactional_id": None, "acks": acks, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": partition, "records": records}]}]}


def _produce_error(bootstrap: str, topic: str, records: bytes, **kw: int) -> int:
    with RawClient(bootstrap) as client:
        response = client.request(PRODUCE, 9, _produce_body(topic, records, **kw))
    return response["responses"][0]["partition_responses"][0]["error_code"]


def _closes(bootstrap: str, data: bytes) -> bool:
    with RawClient(bootstrap) as client:
        client.send(data)
        return client.is_closed()


def _frame(api_key: int, version: int, payload: bytes = b"") -> bytes:
    body = struct.pack(">hhih", api_key, version, 1, -1) + payload
    return struct.pack(">i", len(body)) + body


# framing and headers -----------------------------------------------------------------------


def test_unknown_api_key_closes_the_connection(strict_broker, bystander):
    assert _closes(strict_broker.bootstrap, _frame(999, 0))
    assert "unknown API key 999" in strict_broker.log_text()


def test_unsupported_version_closes_the_connection(strict_broker, bystander):
    assert _closes(strict_broker.bootstrap, _frame(METADATA, 99))


def test_api_versions_of_an_unknown_version_is_answered_in_v0(strict_broker, bystander):
    with RawClient(strict_broker.bootstrap) as client:
        client.send(_frame(API_VERSIONS, 99))
        frame = client.read_frame()
    _, offset = codec.read_response_header(API_VERSIONS, 0, frame)
    body = codec.decode_response(API_VERSIONS, 0, frame, offset)
    assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert {k["api_key"] for k in body["api_keys"]} >= {PRODUCE, FETCH, METADATA}


@pytest.mark.parametrize("size", [-5, 1024 * 1024 + 1, 2**31 - 1])
def test_oversize_or_negative_frames_close_the_connection(strict_broker, bystander, size):
    assert _closes(strict_broker.bootstrap, struct.pack(">i", size) + b"\0" * 64)
    assert f"request size {size}" in strict_broker.log_text()


def test_truncated_and_garbage_bodies_close_the_connection(strict_broker, bystander):
    valid = codec.encode_request(METADATA, 12, 1, {"topics": [{"name": "x", "topic_id": codec.ZERO_UUID}],
                                                   "allow_auto_topic_creation": False})
    body = valid[4:]
    cut = body[:-3]
    assert _closes(strict_broker.bootstrap, struct.pack(">i", len(cut)) + cut)
    garbage = body[:10] + b"\xff" * 40
    assert _closes(strict_broker.bootstrap, struct.pack(">i", len(garbage)) + garbage)
    assert _closes(strict_broker.bootstrap, struct.pack(">i", 3) + b"\0\0\0")  # no header


def test_a_half_sent_frame_does_not_block_others(strict_broker, bystander):
    with RawClient(strict_broker.bootstrap) as stalled:
        stalled.send(struct.pack(">i", 1000) + b"\0" * 10)
        name = unique("stall")
        create_topic(strict_broker.bootstrap, name)
        produce(strict_broker.bootstrap, name, [b"still served"])
        assert [m.value() for m in consume(strict_broker.bootstrap, name)] == [b"still served"]


# request contents ---------------------------------------------------------------------------


def test_corrupt_batch_is_corrupt_message(strict_broker, bystander):
    name = unique("crc")
    create_topic(strict_broker.bootstrap, name)
    batch = bytearray(encode_batch([b"hello", b"world"]))
    batch[-1] ^= 0xFF  # inside the CRC-covered records
    assert _produce_error(strict_broker.bootstrap, name, bytes(batch)) == \
        ErrorCode.CORRUPT_MESSAGE
    torn = encode_batch([b"hello"])[:-4]
    assert _produce_error(strict_broker.bootstrap, name, torn) == ErrorCode.CORRUPT_MESSAGE
    assert consume(strict_broker.bootstrap, name) == []


def test_produce_errors_per_partition(strict_broker, bystander):
    batch = encode_batch([b"v"])
    name = unique("p")
    create_topic(strict_broker.bootstrap, name)
    bootstrap = strict_broker.bootstrap
    assert _produce_error(bootstrap, unique("missing"), batch) == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert _produce_error(bootstrap, name, batch, partition=7) == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert _produce_error(bootstrap, "bad topic!", batch) in (
        ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert _produce_error(bootstrap, name, batch, acks=5) == ErrorCode.INVALID_REQUIRED_ACKS
    too_big = encode_batch([b"x" * 1_100_000])
    with RawClient(bootstrap) as client:
        client.correlation_id += 1
        client.send(codec.encode_request(PRODUCE, 9, client.correlation_id,
                                         _produce_body(name, too_big)))
        assert client.is_closed()  # over socket.request.max.bytes (1 MiB here)


def test_unknown_and_invalid_topics(strict_broker, bystander):
    with RawClient(strict_broker.bootstrap) as client:
        meta = client.request(METADATA, 12, {"topics": [
            {"name": unique("nope"), "topic_id": codec.ZERO_UUID}, {"name": "bad name!", "topic_id": codec.ZERO_UUID}],
            "allow_auto_topic_creation": True})
        assert [t["error_code"] for t in meta["topics"]] == [
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC_EXCEPTION]

        created = client.request(CREATE_TOPICS, 7, {"topics": [
            {"name": n, "num_partitions": 1, "replication_factor": 1, "assignments": [],
             "configs": []} for n in ("bad name!", "a" * 250, "..")],
            "timeout_ms": 1000, "validate_only": False})
        assert {t["error_code"] for t in created["topics"]} == {ErrorCode.INVALID_TOPIC_EXCEPTION}

        fetched = client.request(FETCH, 12, {
            "max_wait_ms": 0, "min_bytes": 1, "topics": [{"topic": unique("gone"), "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}]}],
            "forgotten_topics_data": []})
        assert fetched["responses"][0]["partitions"][0]["error_code"] == \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

        deleted = client.request(DELETE_RECORDS, 2, {"topics": [{"name": unique("gone"),
                                 "partitions": [{"partition_index": 0, "offset": 1}]}],
                                 "timeout_ms": 1000})
        assert deleted["topics"][0]["partitions"][0]["error_code"] == \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

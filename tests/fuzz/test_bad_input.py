"""Bad input beyond what tests/broker/test_protocol.py covers: the admin APIs' answers to
malformed requests (Kafka's codes, per resource), torn batches, stalled half-sent frames,
and a real request over ``socket.request.max.bytes``. A bystander connection made before
each test must still be served after it."""

from __future__ import annotations

import struct
import uuid

import pytest

from pybroker._native.records import encode_batch
from pybroker.errors import ErrorCode
from pybroker.net.protocol import codec
from tests.admin.clients import consume, create_topic, produce, unique
from tests.broker.wire_client import WireClient, produce_body

PRODUCE, API_VERSIONS = 0, 18
DELETE_TOPICS, DELETE_RECORDS, DESCRIBE_CONFIGS, ALTER_CONFIGS = 20, 21, 32, 33
CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS = 37, 44
TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32


@pytest.fixture(scope="module")
def server(module_broker_factory):
    return module_broker_factory(socket_request_max_bytes=1024 * 1024)


@pytest.fixture
def client(server):
    """The connection the test uses, and afterwards proof that the broker still serves."""
    with WireClient(server.bootstrap) as c:
        yield c
    with WireClient(server.bootstrap) as other:
        assert other.request(API_VERSIONS, 3, {"client_software_name": "t",
                                               "client_software_version": "1"})["error_code"] == 0
    assert server.alive()


def _topic(server) -> str:
    name = unique("bad")
    create_topic(server.bootstrap, name, 2)
    return name


def _codes(items: list[dict]) -> list[int]:
    return [item["error_code"] for item in items]


# DeleteTopics, CreatePartitions ----------------------------------------------------------


def test_delete_topics_by_id_and_malformed_entries(server, client):
    name = _topic(server)
    unknown = uuid.uuid4()
    response = client.request(DELETE_TOPICS, 6, {"topics": [
        {"name": None, "topic_id": unknown},
        {"name": None, "topic_id": codec.ZERO_UUID},  # neither name nor id
        {"name": name, "topic_id": unknown},  # both
        {"name": "dup", "topic_id": codec.ZERO_UUID},
        {"name": "dup", "topic_id": codec.ZERO_UUID},
    ], "timeout_ms": 1000})
    assert _codes(response["responses"]) == [ErrorCode.UNKNOWN_TOPIC_ID] + \
        [ErrorCode.INVALID_REQUEST] * 4
    assert all(r["error_message"] for r in response["responses"])

    meta = client.request(3, 12, {"topics": [{"name": name, "topic_id": codec.ZERO_UUID}],
                                  "allow_auto_topic_creation": False})
    topic_id = meta["topics"][0]["topic_id"]
    response = client.request(DELETE_TOPICS, 6, {"topics": [{"name": None,
                                                             "topic_id": topic_id}],
                                                 "timeout_ms": 1000})
    assert response["responses"] == [{"name": name, "topic_id": topic_id, "error_code": 0,
                                      "error_message": None}]
    old = client.request(DELETE_TOPICS, 3, {"topic_names": [name, name], "timeout_ms": 1000})
    assert _codes(old["responses"]) == [ErrorCode.INVALID_REQUEST] * 2


def test_create_partitions_bad_requests(server, client):
    name = _topic(server)

    def grow(*items: dict, validate_only: bool = False) -> list[int]:
        response = client.request(CREATE_PARTITIONS, 3, {"topics": list(items),
                                                         "timeout_ms": 1000,
                                                         "validate_only": validate_only})
        return _codes(response["results"])

    assert grow({"name": name, "count": 1, "assignments": None}) == [ErrorCode.INVALID_PARTITIONS]
    assert grow({"name": name, "count": -7, "assignments": None}) == [ErrorCode.INVALID_PARTITIONS]
    assert grow({"name": name, "count": 2**31 - 1, "assignments": [{"broker_ids": [0]}]}) == \
        [ErrorCode.INVALID_REPLICA_ASSIGNMENT]
    assert grow({"name": name, "count": 3, "assignments": [{"broker_ids": [0, 0]}]}) == \
        [ErrorCode.INVALID_REPLICA_ASSIGNMENT]
    assert grow({"name": name, "count": 3, "assignments": None},
                {"name": name, "count": 4, "assignments": None}) == \
        [ErrorCode.INVALID_REQUEST] * 2
    assert grow({"name": "no/such", "count": 3, "assignments": None}) == \
        [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert grow({"name": name, "count": 3, "assignments": [{"broker_ids": [0]}]}) == [0]


# configs -----------------------------------------------------------------------------------


def test_describe_configs_bad_resources(server, client):
    name = _topic(server)
    resources = [(TOPIC, "no-such-topic"), (TOPIC, "bad name!"), (BROKER, "17"),
                 (BROKER, "zero"), (GROUP + 90, "x"), (BROKER_LOGGER, "0"), (TOPIC, name)]
    response = client.request(DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": kind, "resource_name": rname, "configuration_keys": None}
        for kind, rname in resources], "include_synonyms": True,
        "include_documentation": True})
    results = response["results"]
    assert _codes(results) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.INVALID_REQUEST,
                               ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST, 0, 0]
    loggers = {c["name"]: c for c in results[5]["configs"]}
    assert loggers["pybroker.broker"]["config_source"] == 6  # DYNAMIC_BROKER_LOGGER_CONFIG
    topic = {c["name"]: c for c in results[6]["configs"]}
    assert topic["retention.ms"]["documentation"]
    assert topic["segment.bytes"]["config_type"] == 3  # INT
    # only the keys asked for; unknown keys are left out, not an error
    only = client.request(DESCRIBE_CONFIGS, 1, {"resources": [
        {"resource_type": TOPIC, "resource_name": name,
         "configuration_keys": ["retention.ms", "no.such"]}], "include_synonyms": False})
    assert [c["name"] for c in only["results"][0]["configs"]] == ["retention.ms"]
    v0 = client.request(DESCRIBE_CONFIGS, 0, {"resources": [
        {"resource_type": TOPIC, "resource_name": name, "configuration_keys": ["retention.ms"]}]})
    assert v0["results"][0]["configs"][0]["is_default"] is True


def test_alter_configs_bad_requests(server, client):
    name = _topic(server)

    def alter(api: int, version: int, *resources: tuple[int, str, list[dict]]) -> list[dict]:
        response = client.request(api, version, {"resources": [
            {"resource_type": k, "resource_name": n, "configs": c} for k, n, c in resources],
            "validate_only": False})
        return response["responses"]

    def op(key: str, value: str | None, operation: int = 0) -> dict:
        return {"name": key, "value": value, "config_operation": operation}

    results = alter(INCREMENTAL_ALTER_CONFIGS, 1,
                    (TOPIC, name, [op("retention.ms", "1"), op("retention.ms", "2")]))
    assert _codes(results) == [ErrorCode.INVALID_REQUEST]
    for bad, code in [(op("retention.ms", "1", 9), ErrorCode.INVALID_REQUEST),
                      (op("retention.ms", None, 0), ErrorCode.INVALID_REQUEST),
                      (op("segment.bytes", "5", 3), ErrorCode.INVALID_CONFIG),
                      (op("cleanup.policy", "compact,delete", 3), ErrorCode.INVALID_CONFIG),
                      (op("cleanup.policy", "purge", 2), ErrorCode.INVALID_CONFIG),
                      (op("segment.bytes", str(2**40)), ErrorCode.INVALID_CONFIG),
                      (op("max.message.bytes", "-1"), ErrorCode.INVALID_CONFIG)]:
        (result,) = alter(INCREMENTAL_ALTER_CONFIGS, 1, (TOPIC, name, [bad]))
        assert result["error_code"] == code, bad
        assert result["error_message"], bad

    twice = alter(INCREMENTAL_ALTER_CONFIGS, 0, (TOPIC, name, []), (TOPIC, name, []))
    assert _codes(twice) == [ErrorCode.INVALID_REQUEST] * 2
    assert _codes(alter(ALTER_CONFIGS, 2, (TOPIC, name, [{"name": "retention.ms",
                                                          "value": None}]))) == \
        [ErrorCode.INVALID_REQUEST]
    assert _codes(alter(ALTER_CONFIGS, 0, (TOPIC, "gone", []), (BROKER, "0", [
        {"name": "num.partitions", "value": "4"}]), (BROKER, "0x", []))) == \
        [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_REQUEST,  # static broker config
         ErrorCode.INVALID_REQUEST]
    loggers = alter(INCREMENTAL_ALTER_CONFIGS, 1,
                    (BROKER_LOGGER, "0", [op("pybroker.broker", "LOUD")]))
    assert _codes(loggers) == [ErrorCode.INVALID_CONFIG]
    assert _codes(alter(INCREMENTAL_ALTER_CONFIGS, 1, (BROKER_LOGGER, "0", [
        op("pybroker.fuzz", "DEBUG"), op("pybroker.fuzz.child", None, 1)]))) == [0]


# records -----------------------------------------------------------------------------------


def test_delete_records_bad_offsets(server, client):
    name = _topic(server)
    produce(server.bootstrap, name, [b"a", b"b", b"c"])

    def delete(*partitions: tuple[int, int]) -> list[tuple[int, int]]:
        response = client.request(DELETE_RECORDS, 2, {"topics": [{"name": name, "partitions": [
            {"partition_index": p, "offset": o} for p, o in partitions]}], "timeout_ms": 1000})
        return [(p["error_code"], p["low_watermark"]) for p in response["topics"][0]["partitions"]]

    assert delete((0, -2), (0, 4), (9, 0), (-1, 0)) == [
        (ErrorCode.OFFSET_OUT_OF_RANGE, -1), (ErrorCode.OFFSET_OUT_OF_RANGE, -1),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1), (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)]
    assert delete((0, 3), (1, 0)) == [(0, 3), (0, 0)]


def test_torn_batch_is_corrupt_message(server, client):
    name = _topic(server)
    torn = encode_batch([b"hello", b"world"])[:-4]
    response = client.request(PRODUCE, 9, produce_body(name, 0, torn))
    assert response["responses"][0]["partition_responses"][0]["error_code"] == \
        ErrorCode.CORRUPT_MESSAGE
    assert consume(server.bootstrap, name) == []


def test_request_over_socket_request_max_bytes_closes_only_that_connection(server, client):
    name = _topic(server)
    with WireClient(server.bootstrap) as big:
        try:
            big.send(PRODUCE, 9, produce_body(name, 0, encode_batch([b"x" * 1_100_000])))
        except (ConnectionResetError, BrokenPipeError):
            # The broker closes as soon as it reads the size prefix; the rest of the
            # frame may still be in flight, so the close can surface while sending.
            pass
        assert big.closed_by_peer()
    assert "socket.request.max.bytes" in server.log_text()


def test_half_sent_frames_do_not_block_others(server, client):
    stalled = [WireClient(server.bootstrap) for _ in range(20)]
    try:
        for i, conn in enumerate(stalled):
            conn.raw(struct.pack(">i", 100 + 1000 * i) + b"\0" * (i % 7))
        name = _topic(server)
        produce(server.bootstrap, name, [b"still served"])
        assert [m.value() for m in consume(server.bootstrap, name)] == [b"still served"]
    finally:
        for conn in stalled:
            conn.close()


# found by the fuzz test ---------------------------------------------------------------------


def test_metadata_with_an_empty_topic_name_is_answered(server, client):
    """A name of "" is a (bad) name, not a request by topic id: Kafka answers it with an
    error for that topic. Before v10 there are no ids at all."""
    for version in (1, 9, 11, 12):
        response = client.request(3, version, {"topics": [{"name": "", "topic_id":
                                                           codec.ZERO_UUID}],
                                               "allow_auto_topic_creation": True})
        (topic,) = response["topics"]
        assert topic["error_code"] in (ErrorCode.INVALID_TOPIC_EXCEPTION,
                                       ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), version

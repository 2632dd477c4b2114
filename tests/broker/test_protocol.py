"""The broker's answers at the wire level: exact requests, exact error codes, bad input.

One broker serves the whole module; every test uses its own topics.
"""

from __future__ import annotations

import struct
import time
import uuid

import pytest

from pybroker._native.records import encode_batch
from pybroker.errors import ErrorCode
from tests.admin.clients import unique
from tests.broker.wire_client import WireClient, decode_all, fetch_body, produce_body

API_VERSIONS, METADATA, PRODUCE, FETCH, LIST_OFFSETS = 18, 3, 0, 1, 2
CREATE_TOPICS, INIT_PRODUCER_ID, DESCRIBE_CLUSTER = 19, 22, 60


@pytest.fixture(scope="module")
def server(module_broker_factory):
    # small max.message.bytes default so MESSAGE_TOO_LARGE is cheap to reach
    return module_broker_factory(message_max_bytes=256 * 1024)


@pytest.fixture
def client(server):
    with WireClient(server.bootstrap) as c:
        yield c


def create(client: WireClient, name: str, partitions: int = 1, configs: dict | None = None,
           replication_factor: int = 1, validate_only: bool = False, version: int = 7) -> dict:
    body = {"topics": [{"name": name, "num_partitions": partitions,
                        "replication_factor": replication_factor, "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            "timeout_ms": 10000, "validate_only": validate_only}
    return client.request(CREATE_TOPICS, version, body)["topics"][0]


def produce(client: WireClient, topic: str, batch: bytes | None, partition: int = 0,
            version: int = 9) -> dict:
    response = client.request(PRODUCE, version, produce_body(topic, partition, batch))
    return response["responses"][0]["partition_responses"][0]


def still_serving(server) -> None:
    with WireClient(server.bootstrap) as other:
        assert other.request(API_VERSIONS, 3, {"client_software_name": "t",
                                               "client_software_version": "1"})["error_code"] == 0


# ApiVersions ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions(client, version):
    body = {"client_software_name": "tests", "client_software_version": "1.0"}
    response = client.request(API_VERSIONS, version, body)
    assert response["error_code"] == 0
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in response["api_keys"]}
    assert ranges[PRODUCE] == (3, 11)
    assert ranges[FETCH] == (4, 17)
    assert ranges[METADATA] == (0, 12)
    assert ranges[API_VERSIONS] == (0, 4)
    assert ranges[LIST_OFFSETS][1] >= 7
    for key in (CREATE_TOPICS, INIT_PRODUCER_ID, DESCRIBE_CLUSTER):
        assert key in ranges


def test_api_versions_of_unknown_version_answers_v0_with_the_list(client):
    client_id = b"tests"
    header = struct.pack(">hhih", API_VERSIONS, 99, 7, len(client_id)) + client_id
    client.raw(struct.pack(">i", len(header) + 1) + header + b"\x00")
    frame = client.read_frame()
    correlation, error, count = struct.unpack_from(">ihi", frame)
    assert correlation == 7
    assert error == ErrorCode.UNSUPPORTED_VERSION
    keys = {struct.unpack_from(">h", frame, 10 + 6 * i)[0] for i in range(count)}
    assert {PRODUCE, FETCH, METADATA, API_VERSIONS} <= keys


# Bad input never takes the broker down -------------------------------------------------


@pytest.mark.parametrize("payload", [
    pytest.param(struct.pack(">i", 5) + b"hello", id="garbage"),
    pytest.param(struct.pack(">i", 2) + b"\x00\x12", id="truncated-header"),
    pytest.param(struct.pack(">ihhih", 10, 9999, 0, 1, -1), id="unknown-api-key"),
    pytest.param(struct.pack(">ihhih", 10, PRODUCE, 1, 1, -1), id="unsupported-version"),
    pytest.param(struct.pack(">ihhih", 14, METADATA, 1, 1, -1) + b"\x7f\xff\xff\xff",
                 id="malformed-body"),
])
def test_bad_frames_close_that_connection_only(server, payload):
    with WireClient(server.bootstrap) as bystander, WireClient(server.bootstrap) as bad:
        bystander.request(API_VERSIONS, 0, {})  # connected and served before
        bad.raw(payload)
        assert bad.closed_by_peer()
        assert bystander.request(API_VERSIONS, 0, {})["error_code"] == 0
    still_serving(server)


def test_refused_requests_are_logged_once_per_client_and_api(server):
    client_id = unique("refused-client")
    name = client_id.encode()

    def frame(api_key: int, version: int, body: bytes = b"") -> bytes:
        header = struct.pack(">hhih", api_key, version, 1, len(name)) + name
        return struct.pack(">i", len(header) + len(body)) + header + body

    refusals = {"unknown API key 9999": frame(9999, 0),
                "unsupported version 1": frame(PRODUCE, 1),
                "malformed v1": frame(METADATA, 1, b"\x7f\xff\xff\xff")}
    for _ in range(3):  # each on a new connection, as a retrying client would
        for payload in refusals.values():
            with WireClient(server.bootstrap) as bad:
                bad.raw(payload)
                assert bad.closed_by_peer()
        with WireClient(server.bootstrap) as probe:  # answered, and refused all the same
            probe.raw(frame(API_VERSIONS, 99, b"\x00"))
            assert struct.unpack_from(">ih", probe.read_frame()) == (
                1, ErrorCode.UNSUPPORTED_VERSION)
    still_serving(server)
    lines = [line for line in server.log_text().splitlines() if client_id in line]
    assert all(" INFO " in line and "refused" in line for line in lines), lines
    for reason in [*refusals, "unsupported version 99 (served: 0-"]:
        assert len([line for line in lines if reason in line]) == 1, (reason, lines)
    assert len(lines) == 4, "\n".join(lines)


def test_oversize_size_prefix_is_refused_with_a_log_line(server):
    with WireClient(server.bootstrap) as bad:
        bad.raw(struct.pack(">i", 200 * 1024 * 1024) + b"\x00" * 16)
        assert bad.closed_by_peer()
    assert "socket.request.max.bytes" in server.log_text()
    still_serving(server)


def test_negative_size_prefix_is_refused(server):
    with WireClient(server.bootstrap) as bad:
        bad.raw(struct.pack(">i", -1))
        assert bad.closed_by_peer()
    still_serving(server)


def test_pipelined_requests_are_answered_in_order(client):
    for _ in range(50):
        client.send(API_VERSIONS, 0, {})
    # WireClient checks each correlation id against the last sent: read them all raw
    seen = [struct.unpack_from(">i", client.read_frame())[0] for _ in range(50)]
    assert seen == list(range(1, 51))


# Metadata, topics ---------------------------------------------------------------------------


def test_metadata_auto_creates_and_reports_ids(client, server):
    name = unique("auto")
    response = client.request(METADATA, 12, {"topics": [{"name": name}],
                                             "allow_auto_topic_creation": True})
    topic = response["topics"][0]
    assert topic["error_code"] == 0 and len(topic["partitions"]) == 1
    assert topic["topic_id"] != uuid.UUID(int=0)
    assert response["brokers"][0]["port"] == server.port
    assert response["cluster_id"]
    by_id = client.request(METADATA, 12, {"topics": [{"name": None,
                                                      "topic_id": topic["topic_id"]}]})
    assert by_id["topics"][0]["name"] == name


def test_metadata_without_auto_create_and_bad_names(client):
    name = unique("absent")
    no = client.request(METADATA, 9, {"topics": [{"name": name}],
                                      "allow_auto_topic_creation": False})
    assert no["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    bad = client.request(METADATA, 9, {"topics": [{"name": "bad/name"}],
                                       "allow_auto_topic_creation": True})
    assert bad["topics"][0]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    unknown_id = client.request(METADATA, 12, {"topics": [{"name": None,
                                                           "topic_id": uuid.uuid4()}]})
    assert unknown_id["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID


def test_create_topics_answers(client):
    name = unique("created")
    ok = create(client, name, 3, {"retention.ms": "60000", "cleanup.policy": "delete"})
    assert ok["error_code"] == 0 and ok["num_partitions"] == 3
    assert ok["topic_id"] != uuid.UUID(int=0)
    configs = {c["name"]: c for c in ok["configs"]}
    assert configs["retention.ms"]["value"] == "60000"
    assert configs["retention.ms"]["config_source"] == 1
    assert create(client, name)["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
    assert create(client, unique("rf"), replication_factor=3)["error_code"] == \
        ErrorCode.INVALID_REPLICATION_FACTOR
    assert create(client, unique("p"), partitions=0)["error_code"] == ErrorCode.INVALID_PARTITIONS
    assert create(client, unique("c"), configs={"no.such": "1"})["error_code"] == \
        ErrorCode.INVALID_CONFIG
    assert create(client, unique("c"), configs={"segment.bytes": "1"})["error_code"] == \
        ErrorCode.INVALID_CONFIG
    assert create(client, "bad name")["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    dry = unique("dry")
    assert create(client, dry, validate_only=True)["error_code"] == 0
    listed = client.request(METADATA, 9, {"topics": [{"name": dry}],
                                          "allow_auto_topic_creation": False})
    assert listed["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    defaults = create(client, unique("defaults"), partitions=-1, replication_factor=-1)
    assert defaults["error_code"] == 0 and defaults["num_partitions"] == 1


def test_describe_cluster(client, server):
    response = client.request(DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations":
                                                    False, "endpoint_type": 1})
    assert response["error_code"] == 0
    assert response["brokers"] == [{"broker_id": 0, "host": "127.0.0.1", "port": server.port,
                                    "rack": None}]
    assert response["controller_id"] == 0


def test_broker_rack_is_reported(broker_factory):
    """One node reports its own ``broker.rack`` in Metadata and DescribeCluster."""
    racked = broker_factory(broker_rack="r1")
    with WireClient(racked.bootstrap) as c:
        listed = c.request(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False})
        described = c.request(DESCRIBE_CLUSTER, 1, {
            "include_cluster_authorized_operations": False, "endpoint_type": 1})
    assert [(b["node_id"], b["rack"]) for b in listed["brokers"]] == [(0, "r1")]
    assert [(b["broker_id"], b["rack"]) for b in described["brokers"]] == [(0, "r1")]


# Produce ------------------------------------------------------------------------------------


def test_produce_error_codes(client):
    name = unique("errors")
    create(client, name, configs={"max.message.bytes": "2000"})
    good = encode_batch([b"a" * 100])
    assert produce(client, unique("nope"), good)["error_code"] == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(client, "bad*name", good)["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert produce(client, name, good, partition=5)["error_code"] == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF  # record bytes no longer match the CRC
    assert produce(client, name, bytes(corrupt))["error_code"] == ErrorCode.CORRUPT_MESSAGE
    assert produce(client, name, good + good)["error_code"] == ErrorCode.CORRUPT_MESSAGE
    assert produce(client, name, b"")["error_code"] == ErrorCode.INVALID_RECORD
    assert produce(client, name, encode_batch([b"x" * 3000]))["error_code"] == \
        ErrorCode.MESSAGE_TOO_LARGE
    ok = produce(client, name, good)
    assert ok["error_code"] == 0 and ok["base_offset"] == 0


def test_produce_acks_zero_gets_no_answer_and_bad_acks_is_refused(client):
    name = unique("acks")
    create(client, name)
    client.send(PRODUCE, 9, produce_body(name, 0, encode_batch([b"silent"]), acks=0))
    bad = client.request(PRODUCE, 9, produce_body(name, 0, encode_batch([b"x"]), acks=2))
    assert bad["responses"][0]["partition_responses"][0]["error_code"] == \
        ErrorCode.INVALID_REQUIRED_ACKS
    # the acks=0 batch was appended before the next request was read
    fetched = client.request(FETCH, 12, fetch_body(name, 0, 0))
    records = fetched["responses"][0]["partitions"][0]["records"]
    assert [r.value for r in decode_all(records)] == [b"silent"]


def test_log_append_time_topic_stamps_the_broker_clock(client):
    name = unique("lat")
    create(client, name, configs={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    result = produce(client, name, encode_batch([b"v"], timestamps=[1000]))
    assert result["error_code"] == 0
    assert result["log_append_time_ms"] >= before
    fetched = client.request(FETCH, 12, fetch_body(name, 0, 0))
    records = decode_all(fetched["responses"][0]["partitions"][0]["records"])
    assert records[0].timestamp == result["log_append_time_ms"]


# Idempotent producers -----------------------------------------------------------------------


def _init_pid(client: WireClient) -> tuple[int, int]:
    response = client.request(INIT_PRODUCER_ID, 4, {"transactional_id": None,
                                                    "transaction_timeout_ms": 60000,
                                                    "producer_id": -1, "producer_epoch": -1})
    assert response["error_code"] == 0
    return response["producer_id"], response["producer_epoch"]


@pytest.mark.parametrize("timeout_ms", [900_001, 2**31 - 1, 0, -1])
def test_init_producer_id_refuses_a_transaction_timeout_out_of_bounds(client, timeout_ms):
    body = {"transactional_id": unique("txn"), "transaction_timeout_ms": timeout_ms,
            "producer_id": -1, "producer_epoch": -1}
    response = client.request(INIT_PRODUCER_ID, 4, body)
    assert (response["error_code"], response["producer_id"], response["producer_epoch"]) == (
        ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1)
    body["transaction_timeout_ms"] = 900_000  # transaction.max.timeout.ms itself is fine
    response = client.request(INIT_PRODUCER_ID, 4, body)
    assert response["error_code"] == ErrorCode.NONE and response["producer_id"] >= 0


def test_idempotent_duplicates_and_sequence_errors(client):
    name = unique("idem")
    create(client, name)
    pid, epoch = _init_pid(client)
    assert _init_pid(client)[0] != pid

    def batch(seq: int, n: int, producer_epoch: int = epoch) -> bytes:
        return encode_batch([b"r%d" % (seq + i) for i in range(n)], producer_id=pid,
                            producer_epoch=producer_epoch, base_sequence=seq)

    assert produce(client, name, batch(0, 3))["base_offset"] == 0
    assert produce(client, name, batch(3, 2))["base_offset"] == 3
    retried = produce(client, name, batch(0, 3))  # a retry of the first batch
    assert retried["error_code"] == 0 and retried["base_offset"] == 0
    assert produce(client, name, batch(9, 1))["error_code"] == \
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(client, name, batch(5, 1))["base_offset"] == 5
    # a new epoch restarts at 0; the old epoch is fenced from then on
    assert produce(client, name, batch(0, 1, epoch + 1))["base_offset"] == 6
    assert produce(client, name, batch(6, 1))["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH
    assert produce(client, name, batch(3, 1, epoch + 2))["error_code"] == \
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    fetched = client.request(FETCH, 12, fetch_body(name, 0, 0))
    part = fetched["responses"][0]["partitions"][0]
    assert part["high_watermark"] == 7
    values = [r.value for r in decode_all(part["records"])]
    assert values == [b"r0", b"r1", b"r2", b"r3", b"r4", b"r5", b"r0"]


# Fetch --------------------------------------------------------------------------------------


def test_fetch_long_poll_is_woken_by_an_append(server, client):
    name = unique("poll")
    create(client, name)
    client.send(FETCH, 12, fetch_body(name, 0, 0, max_wait_ms=30000, min_bytes=1))
    with WireClient(server.bootstrap) as producer:
        assert produce(producer, name, encode_batch([b"wake"]))["error_code"] == 0
    part = client.receive(FETCH, 12)["responses"][0]["partitions"][0]
    assert [r.value for r in decode_all(part["records"])] == [b"wake"]


def test_fetch_limits_and_errors(client):
    name = unique("limits")
    create(client, name)
    for i in range(5):
        produce(client, name, encode_batch([bytes([i]) * 10000]))
    # partition_max_bytes below one batch still returns the first batch whole (KIP-74)
    one = client.request(FETCH, 12, fetch_body(name, 0, 0, partition_max_bytes=1))
    assert len(decode_all(one["responses"][0]["partitions"][0]["records"])) == 1
    two = client.request(FETCH, 12, fetch_body(name, 0, 0, max_bytes=25000))
    assert len(decode_all(two["responses"][0]["partitions"][0]["records"])) == 2
    from_middle = client.request(FETCH, 12, fetch_body(name, 0, 3))
    values = decode_all(from_middle["responses"][0]["partitions"][0]["records"])
    assert [r.offset for r in values] == [3, 4]
    out = client.request(FETCH, 12, fetch_body(name, 0, 99))
    assert out["responses"][0]["partitions"][0]["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
    unknown = client.request(FETCH, 12, fetch_body(unique("none"), 0, 0))
    assert unknown["responses"][0]["partitions"][0]["error_code"] == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    committed = client.request(FETCH, 12, fetch_body(name, 0, 0, isolation_level=1))
    part = committed["responses"][0]["partitions"][0]
    assert part["last_stable_offset"] == part["high_watermark"] == 5
    assert part["aborted_transactions"] == []


def test_fetch_with_a_session_id_gets_session_not_found(client):
    body = fetch_body(unique("s"), 0, 0)
    body["session_id"] = 12345
    assert client.request(FETCH, 12, body)["error_code"] == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_fetch_by_topic_id(client):
    name = unique("byid")
    topic_id = create(client, name)["topic_id"]
    produce(client, name, encode_batch([b"id"]))
    body = fetch_body(name, 0, 0)
    body["topics"][0]["topic_id"] = topic_id
    part = client.request(FETCH, 13, body)["responses"][0]
    assert part["topic_id"] == topic_id
    assert [r.value for r in decode_all(part["partitions"][0]["records"])] == [b"id"]
    body["topics"][0]["topic_id"] = uuid.uuid4()
    missing = client.request(FETCH, 13, body)["responses"][0]["partitions"][0]
    assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_ID


# ListOffsets --------------------------------------------------------------------------------


def test_list_offsets_by_time(client):
    name = unique("times")
    create(client, name)
    for i, ts in enumerate([1000, 5000, 3000, 9000]):
        produce(client, name, encode_batch([b"%d" % i], timestamps=[ts]))

    def lookup(timestamp: int, version: int = 7) -> tuple[int, int, int]:
        body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": name, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}]}
        p = client.request(LIST_OFFSETS, version, body)["topics"][0]["partitions"][0]
        return p["error_code"], p["offset"], p["timestamp"]

    assert lookup(-2) == (0, 0, -1)
    assert lookup(-1) == (0, 4, -1)
    assert lookup(-3) == (0, 3, 9000)
    assert lookup(2000) == (0, 1, 5000)
    assert lookup(5000) == (0, 1, 5000)
    assert lookup(9001) == (0, -1, -1)
    assert lookup(-3, version=6)[0] == ErrorCode.UNSUPPORTED_VERSION


def test_list_offsets_max_timestamp_is_the_record_carrying_it(client):
    # Answers of Apache Kafka 4.1 for these batches (KAFKA-16310): the first record with
    # the largest timestamp, inside its batch, in the first batch that holds it.
    name = unique("maxts")
    create(client, name)
    body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": name, "partitions": [
        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -3}]}]}

    def largest() -> tuple[int, int, int]:
        p = client.request(LIST_OFFSETS, 7, body)["topics"][0]["partitions"][0]
        return p["error_code"], p["offset"], p["timestamp"]

    assert largest() == (0, -1, -1)
    expected = [([1000, 9000, 3000], (0, 1, 9000)), ([9000, 2000], (0, 1, 9000)),
                ([500], (0, 1, 9000)), ([9500, 9500, 100], (0, 6, 9500))]
    for timestamps, answer in expected:
        batch = encode_batch([b"v"] * len(timestamps), timestamps=timestamps)
        assert produce(client, name, batch)["error_code"] == 0
        assert largest() == answer


def test_list_offsets_latest_tiered_and_leader_epochs_as_kafka(client):
    # Apache Kafka 4.1's answers for a topic without remote storage: -5 (latest tiered,
    # v9+) is offset -1 with no leader epoch; v10 only adds a timeout; a special timestamp
    # newer than the version is UNSUPPORTED_VERSION; a lookup that finds nothing has no
    # leader epoch, one that finds a record has its batch's.
    name = unique("tiered")
    create(client, name)
    produce(client, name, encode_batch([b"a"], timestamps=[1000]))

    def lookup(timestamp: int, version: int) -> tuple[int, int, int, int]:
        body = {"replica_id": -1, "isolation_level": 0, "timeout_ms": 1000,
                "topics": [{"name": name, "partitions": [
                    {"partition_index": 0, "current_leader_epoch": -1,
                     "timestamp": timestamp}]}]}
        p = client.request(LIST_OFFSETS, version, body)["topics"][0]["partitions"][0]
        return p["error_code"], p["offset"], p["timestamp"], p["leader_epoch"]

    for version in (9, 10):
        assert lookup(-5, version) == (0, -1, -1, -1)
        assert lookup(-1, version) == (0, 1, -1, 0)
        assert lookup(-2, version) == (0, 0, -1, 0)
        assert lookup(-3, version) == (0, 0, 1000, 0)
        assert lookup(999, version) == (0, 0, 1000, 0)
        assert lookup(5000, version) == (0, -1, -1, -1)
        assert lookup(-6, version)[0] == ErrorCode.UNSUPPORTED_VERSION
    assert lookup(-5, 8)[0] == ErrorCode.UNSUPPORTED_VERSION


def test_batch_at_max_message_bytes_is_taken_one_past_is_refused(client):
    name = unique("edge")
    limit = 50_000
    create(client, name, configs={"max.message.bytes": str(limit)})

    def batch_of(size: int) -> bytes:
        n = size - 100
        while len(encode_batch([b"m" * n])) < size:
            n += 1
        return encode_batch([b"m" * n])

    at_limit, past = batch_of(limit), batch_of(limit + 1)
    assert (len(at_limit), len(past)) == (limit, limit + 1)
    assert produce(client, name, at_limit)["error_code"] == 0
    assert produce(client, name, past)["error_code"] == ErrorCode.MESSAGE_TOO_LARGE


def test_plain_fetch_is_zero_copy(server, client):
    name = unique("zerocopy")
    create(client, name, configs={"max.message.bytes": str(2 * 1024 * 1024)})
    value = bytes(range(256)) * 4096  # 1 MiB
    for _ in range(16):
        assert produce(client, name, encode_batch([value]))["error_code"] == 0
    before = server.stats()
    fetched = client.request(FETCH, 12, fetch_body(name, 0, 0, max_bytes=64 * 1024 * 1024))
    after = server.stats()
    assert len(decode_all(fetched["responses"][0]["partitions"][0]["records"])) == 16
    zero = after["zero_copy_bytes"] - before["zero_copy_bytes"]
    copied = after["copied_bytes"] - before["copied_bytes"]
    assert zero >= 16 * len(value)
    assert zero / (zero + copied) >= 0.99, (zero, copied)


def test_acks_all_needs_min_insync_replicas_of_one(client):
    name = unique("isr")
    create(client, name, configs={"min.insync.replicas": "2"})
    batch = encode_batch([b"v"])
    body = produce_body(name, 0, batch, acks=-1)
    refused = client.request(PRODUCE, 9, body)["responses"][0]["partition_responses"][0]
    assert refused["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
    assert produce(client, name, batch)["error_code"] == 0  # acks=1 does not wait for ISR


def test_frames_split_anywhere_and_glued_together(client):
    import random

    from pybroker.net.protocol import codec

    name = unique("split")
    create(client, name, configs={"max.message.bytes": "300000"})
    big = encode_batch([bytes(range(256)) * 800])  # ~200 KiB: the large-frame path
    frames = b"".join([
        codec.encode_request(API_VERSIONS, 0, 101, {}),
        codec.encode_request(PRODUCE, 9, 102, produce_body(name, 0, big)),
        codec.encode_request(PRODUCE, 9, 103, produce_body(name, 0, encode_batch([b"s"]))),
        codec.encode_request(API_VERSIONS, 0, 104, {}),
    ])
    rnd = random.Random(7)
    position = 0
    client.sock.setsockopt(6, 1, 1)  # TCP_NODELAY: every chunk its own segment
    while position < len(frames):
        step = rnd.choice([1, 3, 17, 4096, 70000])
        client.raw(frames[position:position + step])
        position += step
    seen = [struct.unpack_from(">i", client.read_frame())[0] for _ in range(4)]
    assert seen == [101, 102, 103, 104]
    fetched = client.request(FETCH, 12, fetch_body(name, 0, 0))
    values = [r.value for r in decode_all(fetched["responses"][0]["partitions"][0]["records"])]
    assert values == [bytes(range(256)) * 800, b"s"]


def test_acks_zero_requests_sent_just_before_close_are_kept(server, client):
    from pybroker.net.protocol import codec

    name = unique("closing")
    create(client, name)
    frames = b"".join(codec.encode_request(PRODUCE, 9, i, produce_body(
        name, 0, encode_batch([b"%d" % i, b"x" * 2000]), acks=0)) for i in range(300))
    with WireClient(server.bootstrap) as producer:
        producer.raw(frames)  # one burst, then close: most are still queued at the EOF
    deadline = time.monotonic() + 30
    count = 0
    while count < 600 and time.monotonic() < deadline:
        fetched = client.request(FETCH, 12, fetch_body(name, 0, 0, max_wait_ms=200))
        count = fetched["responses"][0]["partitions"][0]["high_watermark"]
    assert count == 600

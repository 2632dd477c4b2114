"""Transaction markers written by WriteTxnMarkers (api key 27), as a transaction
coordinator sends them, over real sockets: read_committed consumers see the committed
transaction and skip the aborted one, and the partition refuses a marker of an older
producer epoch or of an older transaction coordinator epoch, as Kafka's does.

The tests play the transaction coordinator's part: the data batches are produced as a
transactional producer's (its id, epoch, sequences, the transactional attribute) with
hand-written requests, on a broker that does not ask the coordinator whether the
partition is in a transaction (KIP-890's check off), and the markers are sent by hand."""

from __future__ import annotations

import uuid

import pytest

from pybroker._native.records import encode_batch
from pybroker.errors import ErrorCode
from pybroker.net.protocol import codec
from tests.broker.test_restart import consume_all
from tests.broker.wire_client import WireClient, decode_all, fetch_body, produce_body

PRODUCE, FETCH, METADATA, INIT_PRODUCER_ID, WRITE_TXN_MARKERS = 0, 1, 3, 22, 27


@pytest.fixture(scope="module")
def unverified(module_broker_factory):
    return module_broker_factory(transaction_partition_verification_enable=False)


def new_topic(client: WireClient, partitions: int = 1) -> str:
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    client.request(19, 4, {"topics": [{"name": topic, "num_partitions": partitions,
                                       "replication_factor": 1, "assignments": [],
                                       "configs": []}], "timeout_ms": 10000,
                           "validate_only": False})
    return topic


def producer_id(client: WireClient) -> int:
    response = client.request(INIT_PRODUCER_ID, 4, {"transactional_id": None,
                                                    "transaction_timeout_ms": 60000,
                                                    "producer_id": -1, "producer_epoch": -1})
    assert response["error_code"] == 0
    return response["producer_id"]


def produce(client: WireClient, topic: str, values: list[bytes], pid: int = -1,
            epoch: int = 0, sequence: int = -1, transactional: bool = False,
            partition: int = 0) -> int:
    """The error code of a produce of one batch."""
    batch = encode_batch(values, producer_id=pid, producer_epoch=epoch,
                         base_sequence=sequence, transactional=transactional)
    response = client.request(PRODUCE, 9, produce_body(topic, partition, batch, acks=-1))
    return response["responses"][0]["partition_responses"][0]["error_code"]


def write_markers(client: WireClient, *markers: tuple[int, int, bool, int, str, list[int]],
                  version: int = 1) -> list[dict[tuple[str, int], int]]:
    """WriteTxnMarkers of ``(producer id, epoch, commit, coordinator epoch, topic,
    partitions)``: each marker's error code per partition."""
    body = codec.with_defaults(WRITE_TXN_MARKERS, version, {"markers": [
        {"producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
         "coordinator_epoch": coordinator_epoch,
         "topics": [{"name": topic, "partition_indexes": partitions}]}
        for pid, epoch, commit, coordinator_epoch, topic, partitions in markers]})
    response = client.request(WRITE_TXN_MARKERS, version, body)
    assert [m["producer_id"] for m in response["markers"]] == [m[0] for m in markers]
    return [{(t["name"], p["partition_index"]): p["error_code"]
             for t in m["topics"] for p in t["partitions"]} for m in response["markers"]]


def test_read_committed_sees_the_committed_transaction_and_skips_the_aborted(unverified):
    with WireClient(unverified.bootstrap) as client:
        topic = new_topic(client)
        aborting, committing = producer_id(client), producer_id(client)
        assert produce(client, topic, [b"plain-0"]) == 0
        assert produce(client, topic, [b"aborted-0", b"aborted-1"], aborting, 0, 0, True) == 0
        assert produce(client, topic, [b"committed-0"], committing, 0, 0, True) == 0
        assert produce(client, topic, [b"aborted-2"], aborting, 0, 2, True) == 0
        assert produce(client, topic, [b"committed-1"], committing, 0, 1, True) == 0

        def stable() -> dict:
            response = client.request(FETCH, 11, fetch_body(topic, 0, 0, isolation_level=1))
            return response["responses"][0]["partitions"][0]

        assert stable()["last_stable_offset"] == 1  # both transactions open
        assert write_markers(client, (aborting, 0, False, 0, topic, [0]),
                             (committing, 0, True, 0, topic, [0]), version=0) == [
            {(topic, 0): ErrorCode.NONE}, {(topic, 0): ErrorCode.NONE}]
        assert produce(client, topic, [b"plain-1"]) == 0
        after = stable()
        assert after["last_stable_offset"] == after["high_watermark"] == 9  # 7 + 2 markers
        assert after["aborted_transactions"] == [{"producer_id": aborting, "first_offset": 1}]
        assert [r.value for r in decode_all(after["records"])][-1] == b"plain-1"
    assert consume_all(unverified.bootstrap, topic, 4, 1, "read_committed") == [
        b"plain-0", b"committed-0", b"committed-1", b"plain-1"]
    assert len(consume_all(unverified.bootstrap, topic, 6, 1)) == 6


def test_markers_of_an_older_producer_or_coordinator_epoch_are_refused(unverified):
    """Kafka's partition checks: a producer epoch below the producer's is
    INVALID_PRODUCER_EPOCH, a coordinator epoch below the last marker's
    TRANSACTION_COORDINATOR_FENCED; a marker of a newer epoch fences the producer's older
    epoch from the partition, whose batches then start again at sequence 0. A topic that
    does not exist is UNKNOWN_TOPIC_OR_PARTITION, which the coordinator takes as done."""
    with WireClient(unverified.bootstrap) as client:
        topic = new_topic(client, partitions=2)
        pid = producer_id(client)
        assert produce(client, topic, [b"a"], pid, 0, 0, True) == 0
        assert write_markers(client, (pid, 0, True, 5, topic, [0, 1])) == [
            {(topic, 0): ErrorCode.NONE, (topic, 1): ErrorCode.NONE}]
        assert write_markers(client, (pid, 0, True, 4, topic, [0])) == [
            {(topic, 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED}]
        assert write_markers(client, (pid, 1, False, 5, topic, [0])) == [
            {(topic, 0): ErrorCode.NONE}]  # the coordinator bumped the epoch: abort
        assert write_markers(client, (pid, 0, False, 6, topic, [0])) == [
            {(topic, 0): ErrorCode.INVALID_PRODUCER_EPOCH}]
        assert produce(client, topic, [b"b"], pid, 0, 1, True) == \
            ErrorCode.INVALID_PRODUCER_EPOCH
        assert produce(client, topic, [b"b"], pid, 1, 3, True) == \
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(client, topic, [b"b"], pid, 1, 0, True) == 0
        assert write_markers(client, (pid, 1, True, 6, topic, [0]),
                             (pid, 1, True, 6, "no-such-topic", [0]),
                             (pid, 1, True, 6, topic, [7])) == [
            {(topic, 0): ErrorCode.NONE},
            {("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION},
            {(topic, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}]
    assert consume_all(unverified.bootstrap, topic, 2, 1, "read_committed") == [b"a", b"b"]

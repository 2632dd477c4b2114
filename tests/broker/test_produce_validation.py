"""Produce validation that the event loop does not wait for (issue 19).

Compressed batches and large uncompressed ones are validated in the broker's validation
threads and a request's handling gives the loop back between slices, so: decompression
bombs get an answer per batch (INVALID_RECORD, as Kafka gives, for bad records and for
pybroker's cap; bombs of well-formed records up to the cap are accepted as Kafka accepts
them); another client's request sent while a request of bombs is being validated is
answered first; and requests of many partitions, mixing every path, are answered and
appended exactly as before. Real broker processes, wire-level requests.
"""

from __future__ import annotations

import select
import struct
import time

import pytest
import zstandard

from bench.produce_bombs import bomb_section, compressed_batch
from pybroker._native import compression
from pybroker._native.records import encode_batch
from pybroker.errors import ErrorCode
from tests.admin.clients import create_topic, unique
from tests.broker.wire_client import WireClient, decode_all, fetch_body

PRODUCE, FETCH = 0, 1
ZSTD = compression.ZSTD


def produce_body(topic: str, batches: list[bytes], acks: int = 1) -> dict:
    return {"transactional_id": None, "acks": acks, "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": p, "records": batch} for p, batch in enumerate(batches)]}]}


def partition_answers(answer: dict) -> list[dict]:
    return answer["responses"][0]["partition_responses"]


def zeros_bomb() -> bytes:
    """Zeros past the cap: no record at all, refused at the first one."""
    return zstandard.ZstdCompressor(write_content_size=False).compress(bytes(80 << 20))


def test_bombs_get_an_answer_per_batch(module_broker):
    topic = unique("bombs")
    create_topic(module_broker.bootstrap, topic, partitions=6)
    batches = [compressed_batch(bomb_section("over"), ZSTD),   # well formed, past the cap
               compressed_batch(bomb_section("cap"), ZSTD),    # well formed, to the cap
               compressed_batch(zeros_bomb(), ZSTD),            # not records
               encode_batch([b"plain"]),
               compressed_batch(bomb_section("over"), ZSTD),
               encode_batch([b"zstd"] * 3, compression=ZSTD)]
    with WireClient(module_broker.bootstrap) as client:
        parts = partition_answers(client.request(PRODUCE, 9, produce_body(topic, batches)))
        assert [p["index"] for p in parts] == list(range(6))
        assert [p["error_code"] for p in parts] == [
            ErrorCode.INVALID_RECORD, ErrorCode.NONE, ErrorCode.INVALID_RECORD,
            ErrorCode.NONE, ErrorCode.INVALID_RECORD, ErrorCode.NONE]
        assert "exceed 67108864 bytes" in parts[0]["error_message"]
        assert "record length" in parts[2]["error_message"]
        # what was accepted is stored as sent and reads back
        fetched = client.request(FETCH, 12, fetch_body(topic, 5, 0))
        assert [r.value for r in decode_all(
            fetched["responses"][0]["partitions"][0]["records"])] == [b"zstd"] * 3


def _response_correlation(sock) -> int:
    header = b""
    while len(header) < 8:
        chunk = sock.recv(8 - len(header))
        assert chunk, "broker closed the connection"
        header += chunk
    size, correlation = struct.unpack(">ii", header)
    left = size - 4
    while left:
        left -= len(sock.recv(min(left, 1 << 20)))
    return correlation


def test_others_are_answered_while_bombs_are_validated(module_broker):
    topic, other = unique("bombs"), unique("bystander")
    create_topic(module_broker.bootstrap, topic, partitions=100)
    create_topic(module_broker.bootstrap, other, partitions=1)
    bomb = compressed_batch(bomb_section("cap"), ZSTD)  # ~10 ms of work each, accepted
    with WireClient(module_broker.bootstrap) as bomber, \
            WireClient(module_broker.bootstrap) as bystander:
        bomber.send(PRODUCE, 9, produce_body(topic, [bomb] * 100))
        # The bystander's requests go out after the bomb request is on the wire: one
        # one-record produce and one fetch, each answered while the bombs are still being
        # validated (before the fix the loop validated them and answered nobody meanwhile).
        for i in range(3):
            bystander.send(PRODUCE, 9, produce_body(other, [encode_batch([b"x%d" % i])]))
            assert partition_answers(bystander.receive(PRODUCE, 9))[0]["error_code"] == 0
            readable, _, _ = select.select([bomber.sock], [], [], 0)
            assert not readable, "the bomb request was answered first"
        fetched = bystander.request(FETCH, 12, fetch_body(other, 0, 0))
        assert len(decode_all(fetched["responses"][0]["partitions"][0]["records"])) == 3
        assert not select.select([bomber.sock], [], [], 0)[0]
        parts = partition_answers(bomber.receive(PRODUCE, 9))
        assert [p["error_code"] for p in parts] == [ErrorCode.NONE] * 100


@pytest.mark.parametrize("acks", [1, -1])
def test_many_partitions_every_path(module_broker, acks):
    many_partitions(module_broker, acks)


def test_many_partitions_without_validation_threads(broker_factory):
    """num.io.threads=0: everything validated on the loop, still in slices."""
    many_partitions(broker_factory(num_io_threads=0), 1)


def many_partitions(broker, acks: int) -> None:
    """Hundreds of partitions in one request, spanning many slices of the handler:
    small uncompressed batches (inline), large ones past the request's inline budget and
    compressed ones (the validation threads), bad ones of each kind, an unknown partition.
    Every partition gets its answer, the appends land, a second round continues the
    offsets, and an idempotent retry of the whole request is answered with the first
    offsets."""
    partitions = 300
    topic = unique("many")
    create_topic(broker.bootstrap, topic, partitions=partitions)
    value = b"v" * 200_000  # 300 partitions: ~25 MiB uncompressed, past the inline budget

    def batch(p: int, seq: int) -> bytes:
        kind = p % 6
        ids = {"producer_id": 7_000 + acks, "producer_epoch": 0, "base_sequence": seq}
        if kind == 0:
            return encode_batch([b"p%d" % p], **ids)
        if kind == 1:
            return encode_batch([value, b"p%d" % p], **ids)  # large: past the budget
        if kind == 2:
            return encode_batch([b"p%d" % p] * 2, compression=1 + p % 4, **ids)
        if kind == 3:
            bad = bytearray(encode_batch([b"p%d" % p], **ids))
            bad[-1] ^= 0xFF  # CRC mismatch
            return bytes(bad)
        if kind == 4:
            return compressed_batch(zstandard.ZstdCompressor().compress(b"\x00" * 50), ZSTD)
        return encode_batch([value] * 6, compression=ZSTD, **ids)  # big, compressed

    expected_ok = {p for p in range(partitions) if p % 6 not in (3, 4)}
    with WireClient(broker.bootstrap) as client:
        for round_ in range(2):
            batches = [batch(p, round_ * _count(p)) for p in range(partitions)]
            body = produce_body(topic, batches, acks)
            body["topic_data"][0]["partition_data"].append(
                {"index": partitions, "records": encode_batch([b"nowhere"])})
            parts = partition_answers(client.request(PRODUCE, 9, body))
            assert [p["index"] for p in parts] == list(range(partitions + 1))
            assert parts[-1]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            for p, answer in enumerate(parts[:-1]):
                if p in expected_ok:
                    assert answer["error_code"] == ErrorCode.NONE, (p, answer)
                    assert answer["base_offset"] == round_ * _count(p), (p, answer)
                elif p % 6 == 3:
                    assert answer["error_code"] == ErrorCode.CORRUPT_MESSAGE, (p, answer)
                else:
                    assert answer["error_code"] == ErrorCode.INVALID_RECORD, (p, answer)
            if round_ == 1:  # the same request again: every batch a duplicate
                again = partition_answers(client.request(PRODUCE, 9, body))
                assert [a["base_offset"] for a in again[:-1]] == \
                    [a["base_offset"] for a in parts[:-1]]
        for p in (0, 1, 2, 5, 296, 299):
            fetched = client.request(FETCH, 12, fetch_body(topic, p, 0))
            got = decode_all(fetched["responses"][0]["partitions"][0]["records"])
            assert len(got) == 2 * _count(p), p


def _count(p: int) -> int:
    """Records in partition p's batch of test_many_partitions_every_path."""
    return {0: 1, 1: 2, 2: 2, 3: 1, 4: 1, 5: 6}[p % 6]


def test_acks0_bad_compressed_batch_closes_the_connection(module_broker):
    topic = unique("acks0")
    create_topic(module_broker.bootstrap, topic, partitions=2)
    with WireClient(module_broker.bootstrap) as client:
        good = encode_batch([b"ok"], compression=ZSTD)
        bad = compressed_batch(bomb_section("over"), ZSTD)
        client.send(PRODUCE, 9, produce_body(topic, [good, bad], acks=0))
        assert client.closed_by_peer()
    with WireClient(module_broker.bootstrap) as client:  # the good one was appended
        deadline = time.monotonic() + 10
        while True:
            fetched = client.request(FETCH, 12, fetch_body(topic, 0, 0))
            records = fetched["responses"][0]["partitions"][0]["records"]
            if records or time.monotonic() > deadline:
                break
        assert [r.value for r in decode_all(records)] == [b"ok"]

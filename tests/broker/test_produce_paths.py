"""One Produce request mixing the handler's two paths: small batches appended right in the
handler, large ones (>= ASYNC_MIN_BYTES) through an awaited io_uring write; every
partition answered with the offsets it got, and the partitions after a waiting one in
request order. A real broker process, wire-level requests."""

from __future__ import annotations

from pybroker._native.appender import ASYNC_MIN_BYTES
from pybroker._native.records import encode_batch
from pybroker.errors import ErrorCode
from tests.admin.clients import create_topic, unique
from tests.broker.wire_client import WireClient, decode_all, fetch_body

PRODUCE, FETCH = 0, 1


def small(tag: str, count: int = 2) -> bytes:
    return encode_batch([f"{tag}-{i}".encode() for i in range(count)])


def large(tag: str) -> bytes:
    return encode_batch([tag.encode() * (ASYNC_MIN_BYTES // len(tag) + 1)])


def test_small_and_large_batches_in_one_request(module_broker):
    topic = unique("paths")
    create_topic(module_broker.bootstrap, topic, partitions=4)
    # p0 small (synchronous), p1 large (awaited), p2 and p3 small after it (their turn)
    plan = [small("a"), large("b"), small("c", 3), small("d")]
    with WireClient(module_broker.bootstrap) as client:
        for round_ in range(3):
            body = {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
                    "topic_data": [{"name": topic, "partition_data": [
                        {"index": p, "records": batch} for p, batch in enumerate(plan)]}]}
            answer = client.request(PRODUCE, 9, body)
            parts = answer["responses"][0]["partition_responses"]
            assert [p["index"] for p in parts] == [0, 1, 2, 3]
            assert [p["error_code"] for p in parts] == [ErrorCode.NONE] * 4
            assert [p["base_offset"] for p in parts] == \
                [2 * round_, round_, 3 * round_, 2 * round_]
        fetched = client.request(FETCH, 12, fetch_body(topic, 2, 0, max_bytes=1 << 20))
        records = fetched["responses"][0]["partitions"][0]["records"]
        values = [r.value for r in decode_all(records)]
        assert values == [f"c-{i}".encode() for i in range(3)] * 3

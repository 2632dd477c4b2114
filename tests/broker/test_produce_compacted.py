"""Produce to a compacted topic (``cleanup.policy`` containing ``compact``): every record
needs a key, the one thing compaction keeps a value by. A batch with records without one
is refused whole with INVALID_RECORD and, from Produce v8, a KIP-467 record error per
such record, in Kafka 4.1's words (checked against it), compressed batches (validated in
the validation threads, streaming) as uncompressed ones.
"""

from __future__ import annotations

from confluent_kafka import KafkaError as ClientError
from confluent_kafka import Producer

from pybroker._native import compression
from pybroker._native.records import encode_batch
from pybroker.errors import ErrorCode
from tests.admin.clients import create_topic, unique
from tests.broker.wire_client import WireClient, decode_all, fetch_body

PRODUCE, FETCH = 0, 1


def _refusal(topic: str, index: int, batch_indices: list[int]) -> tuple[list, str]:
    """Kafka's record_errors and error_message for these keyless records."""
    why = f"Compacted topic cannot accept message without key in topic partition {topic}-{index}"
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{why}')" for i in batch_indices[:3])
    return ([{"batch_index": i, "batch_index_error_message": why} for i in batch_indices],
            f"One or more records have been rejected due to {len(batch_indices)} record "
            f"errors in total, and only showing the first three errors at most: [{shown}]")


def test_keyless_records_get_a_record_error_each(module_broker):
    topic = unique("compacted")
    create_topic(module_broker.bootstrap, topic, partitions=3,
                 config={"cleanup.policy": "compact,delete"})
    batches = [
        encode_batch([b"a", b"b", b"c", b"d", b"e"], keys=[None, b"k", None, None, None]),
        encode_batch([b"z"] * 2, keys=[b"k", None], compression=compression.ZSTD),
        encode_batch([b"kept"], keys=[b"k"], compression=compression.LZ4),
    ]
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": p, "records": batch} for p, batch in enumerate(batches)]}]}
    with WireClient(module_broker.bootstrap) as client:
        for version in (8, 11):
            parts = client.request(PRODUCE, version, body)["responses"][0]["partition_responses"]
            assert [p["error_code"] for p in parts] == [
                ErrorCode.INVALID_RECORD, ErrorCode.INVALID_RECORD, ErrorCode.NONE]
            for part, keyless in ((parts[0], [0, 2, 3, 4]), (parts[1], [1])):
                record_errors, message = _refusal(topic, part["index"], keyless)
                assert part["record_errors"] == record_errors
                assert part["error_message"] == message
                assert part["base_offset"] == -1
            assert parts[2]["record_errors"] == []
        # nothing of a refused batch was appended; the keyed one was, twice
        for index, values in ((0, []), (1, []), (2, [b"kept", b"kept"])):
            fetched = client.request(FETCH, 12, fetch_body(topic, index, 0))
            part = fetched["responses"][0]["partitions"][0]
            assert part["high_watermark"] == len(values)
            assert [r.value for r in decode_all(part["records"])] == values


def test_a_real_client_is_refused_a_keyless_record(module_broker):
    topic = unique("compacted")
    create_topic(module_broker.bootstrap, topic, config={"cleanup.policy": "compact"})
    outcomes: list[tuple[bytes | None, ClientError | None]] = []
    producer = Producer({"bootstrap.servers": module_broker.bootstrap, "linger.ms": 0,
                         "message.timeout.ms": 20000})
    for key in (None, b"k"):
        producer.produce(topic, b"v", key=key,
                         on_delivery=lambda err, msg: outcomes.append((msg.key(), err)))
        producer.flush(30)
    assert [key for key, _ in outcomes] == [None, b"k"]
    refused, delivered = outcomes[0][1], outcomes[1][1]
    assert refused is not None and refused.code() == ClientError.INVALID_RECORD
    assert not refused.retriable()
    assert delivered is None

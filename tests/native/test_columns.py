"""Fetched batches decoded into Arrow columns, checked against kafka-python's codec."""

import gc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from pybroker._native.columns import RecordColumns, fetched_end
from pybroker.errors import CorruptRecordError

record = st.tuples(
    st.one_of(st.none(), st.binary(max_size=16)),                       # key
    st.one_of(st.none(), st.binary(max_size=64)),                       # value
    st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))),
             max_size=3),                                                # headers
)


def build_batch(records, base_offset=0, codec=0, base_ts=1_700_000_000_000):
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 30)
    for i, (key, value, headers) in enumerate(records):
        builder.append(i, timestamp=base_ts + i, key=key, value=value, headers=headers)
    batch = bytearray(builder.build())
    batch[0:8] = base_offset.to_bytes(8, "big")  # baseOffset is outside the CRC
    return bytes(batch)


def expected_rows(batches):
    rows = []
    for base_offset, records in batches:
        for i, (key, value, headers) in enumerate(records):
            rows.append((base_offset + i, key, value, [(k, v) for k, v in headers]))
    return rows


def decoded_rows(arrays):
    return list(zip(arrays["offset"].to_pylist(), arrays["key"].to_pylist(),
                    arrays["value"].to_pylist(),
                    [[(h["key"], h["value"]) for h in hs] for hs in arrays["headers"].to_pylist()],
                    strict=True))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(record, min_size=1, max_size=20), min_size=1, max_size=4),
       st.sampled_from([0, 1, 2, 3, 4]))
def test_batches_decode_like_kafka_python(batch_records, codec):
    batches, offset = [], 0
    for records in batch_records:
        batches.append((offset, records))
        offset += len(records)
    blob = b"".join(build_batch(r, base, codec) for base, r in batches)
    columns = RecordColumns()
    assert columns.add_batches(blob) == offset
    arrays = columns.to_arrow()
    assert decoded_rows(arrays) == expected_rows(batches)
    assert arrays["timestamp"].to_pylist()[:1] == [1_700_000_000_000]
    # The arrays took the buffers over: the columns start again from nothing.
    assert len(columns) == 0
    assert all(len(array) == 0 for array in columns.to_arrow().values())


def test_arrays_outlive_their_columns():
    records = [(b"k%d" % i, b"v" * i, [("h", b"%d" % i)]) for i in range(1000)]
    columns = RecordColumns()
    columns.add_batches(build_batch(records, base_offset=7))
    arrays = columns.to_arrow()
    del columns
    gc.collect()
    assert decoded_rows(arrays) == expected_rows([(7, records)])
    # and a slice keeps them alive after the arrays themselves are gone
    values = arrays["value"].slice(990)
    del arrays
    gc.collect()
    assert values.to_pylist() == [b"v" * i for i in range(990, 1000)]


def test_fetched_end_reads_only_the_headers():
    first = build_batch([(b"k", b"v", [])] * 10, base_offset=100)
    second = build_batch([(b"k", b"w", [])] * 5, base_offset=110)
    assert fetched_end(first + second) == 115
    assert fetched_end(first + second[:-1]) == 110  # a partial tail is not counted
    assert fetched_end(second[:30]) == -1
    assert fetched_end(b"") == -1


def test_offset_window_and_partial_tail():
    first = build_batch([(b"k", b"v%d" % i, []) for i in range(10)], base_offset=100)
    second = build_batch([(None, b"w", [])] * 5, base_offset=110)
    columns = RecordColumns()
    # A fetch answers from the batch holding the requested offset and may end mid-batch.
    assert columns.add_batches(first + second[:-7], min_offset=104) == 110
    assert columns.to_arrow()["offset"].to_pylist() == list(range(104, 110))
    assert columns.add_batches(second, max_offset=113) == 115
    assert columns.to_arrow()["offset"].to_pylist() == list(range(110, 113))  # since the last


def test_corruption_is_reported_and_keeps_nothing_of_that_batch():
    good = build_batch([(b"a", b"b", [])])
    bad = bytearray(build_batch([(b"c", b"d", [])], base_offset=1))
    bad[-1] ^= 0xFF
    columns = RecordColumns()
    with pytest.raises(CorruptRecordError):
        columns.add_batches(good + bytes(bad))
    assert len(columns) == 1


def test_aborted_transactions_are_dropped_per_batch_as_kafkas_consumer_does():
    from pybroker._native.records import (
        CONTROL_ABORT,
        CONTROL_COMMIT,
        encode_batch,
        encode_control_batch,
    )

    def txn(values, offset, producer, sequence):
        return encode_batch(values, base_offset=offset, producer_id=producer,
                            producer_epoch=0, base_sequence=sequence, transactional=True)

    # Producer 7 aborts its first transaction and commits its second; producer 8's
    # transaction, interleaved, commits; producer 9 is not transactional.
    log = (txn([b"7-aborted-a", b"7-aborted-b"], 0, 7, 0) + txn([b"8-committed"], 2, 8, 0)
           + encode_batch([b"9-plain"], base_offset=3, producer_id=9, producer_epoch=0,
                          base_sequence=0)
           + encode_control_batch(7, 0, CONTROL_ABORT, 0, base_offset=4)
           + txn([b"7-committed"], 5, 7, 2)
           + encode_control_batch(8, 0, CONTROL_COMMIT, 0, base_offset=6)
           + encode_control_batch(7, 0, CONTROL_COMMIT, 0, base_offset=7))
    committed = RecordColumns()
    assert committed.add_batches(log, 0, None, [(7, 0)]) == 8
    arrays = committed.to_arrow()
    assert arrays["value"].to_pylist() == [b"8-committed", b"9-plain", b"7-committed"]
    assert arrays["offset"].to_pylist() == [2, 3, 5]
    # read_uncommitted (no aborted list): every data record, never a marker's.
    everything = RecordColumns()
    assert everything.add_batches(log) == 8
    assert len(everything) == 5

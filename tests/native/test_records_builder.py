"""records.BatchBuilder: one batch filled from columns over several ``append`` calls.

Oracles: ``encode_batch_columns`` over the same rows in one call (byte for byte, the
bytes that call produced before the builder existed), and kafka-python's pure-Python
record codec (which nobody here wrote) for what a batch the builder fills to its limit
holds. Bad rows are rejected with nothing appended.
"""

from __future__ import annotations

import array
import importlib

import kafka.record.default_records as kdr
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record._crc32c import crc as pure_crc32c

from pybroker.client.producer import _binary_column, _headers_column, _timestamps_buffer

records = importlib.import_module("pybroker._native.records")

HEADER_TYPE = pa.list_(pa.struct([("key", pa.binary()), ("value", pa.binary())]))
maybe_bytes = st.one_of(st.none(), st.binary(max_size=40))
PRODUCER = {"producer_id": 7, "producer_epoch": 1, "base_sequence": 3}


@st.composite
def tables(draw):
    """Columns (a slice of longer arrays), a row order over them (or None: rows 0..n-1)
    and the cut points of the appends."""
    n = draw(st.integers(1, 40))
    values = draw(st.lists(maybe_bytes, min_size=n, max_size=n))
    keys = draw(st.one_of(st.none(), st.lists(maybe_bytes, min_size=n, max_size=n)))
    timestamps = draw(st.lists(st.integers(0, 2**41), min_size=n, max_size=n))
    # UTF-8 header keys: kafka-python decodes them as strings.
    header = st.tuples(st.text(min_size=1, max_size=8).map(str.encode), maybe_bytes)
    headers = draw(st.one_of(st.none(), st.lists(st.lists(header, max_size=3),
                                                 min_size=n, max_size=n)))
    lead = draw(st.integers(0, 9))
    rows = draw(st.one_of(st.none(), st.lists(st.integers(0, n - 1), min_size=1,
                                              max_size=50)))
    count = n if rows is None else len(rows)
    cuts = sorted(set(draw(st.lists(st.integers(1, count), max_size=4))) | {count})
    arrays = [pa.array([None] * lead + values, pa.binary()).slice(lead),
              None if keys is None else pa.array([None] * lead + keys, pa.binary()).slice(lead),
              pa.array([0] * lead + timestamps, pa.int64()).slice(lead),
              None if headers is None else pa.array(
                  [None] * lead + [[{"key": k, "value": v} for k, v in h] for h in headers],
                  HEADER_TYPE).slice(lead)]
    return arrays, rows, cuts


def _columns(values, keys, timestamps, headers):
    return (_binary_column(values), None if keys is None else _binary_column(keys),
            _timestamps_buffer(timestamps),
            None if headers is None else _headers_column(headers))


def _order(rows, count):
    return array.array("i", range(count) if rows is None else rows)


@settings(max_examples=300, deadline=None)
@given(tables(), st.sampled_from([0, 3]))
def test_appends_equal_one_encode(table, codec):
    arrays, rows, cuts = table
    columns = _columns(*arrays)
    order = _order(rows, cuts[-1])
    expected = records.encode_batch_columns(len(order), *columns, rows=order,
                                            compression=codec, **PRODUCER)
    builder = records.BatchBuilder(bytearray(), 1 << 20)
    start = 0
    for cut in cuts:
        if rows is None and start == 0:  # without a row order: rows 0 .. cut-1
            assert builder.append(cut, *columns) == cut
        else:
            assert builder.append(cut - start, *columns, rows=order[start:cut]) == cut - start
        start = cut
    assert builder.count == len(order)
    got = bytes(builder.finish(compression=codec, **PRODUCER))
    if codec:
        assert records.decode_records(got) == records.decode_records(expected)
    else:
        assert got == expected


@settings(max_examples=100, deadline=None)
@given(tables(), st.integers(70, 400))
def test_batches_filled_to_the_limit(table, limit):
    """Rows cut into batches of at most ``limit`` bytes (a record alone may pass it): each
    batch is what encode_batch_columns makes of its rows, and kafka-python reads them."""
    arrays, rows, cuts = table
    columns = _columns(*arrays)
    order = _order(rows, cuts[-1])
    batches, taken = [], []
    builder = records.BatchBuilder(bytearray(limit), limit)
    start = 0
    while start < len(order):
        n = builder.append(len(order) - start, *columns, rows=order[start:])
        if n == 0 or builder.size == limit:
            assert builder.count  # the builder never returns empty-handed
        taken.append(order[start:start + n])
        start += n
        if start < len(order):
            batches.append(bytes(builder.finish(**PRODUCER)))
            builder = records.BatchBuilder(bytearray(limit), limit)
    batches.append(bytes(builder.finish(**PRODUCER)))
    assert len(batches) == len(taken)
    for batch, part in zip(batches, taken, strict=True):
        assert len(part) == 1 or len(batch) <= limit
        assert batch == records.encode_batch_columns(len(part), *columns, rows=part,
                                                     **PRODUCER)
        theirs = kdr.DefaultRecordBatch(batch)
        assert theirs.validate_crc()
        ours = records.decode_records(batch)
        assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs] == \
            [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in ours]


@pytest.fixture(autouse=True)
def pure_python_kafka(monkeypatch):
    monkeypatch.setattr(kdr, "calc_crc32c", lambda data: pure_crc32c(bytes(data)))


def test_buffer_reuse_growth_and_misuse():
    column = (array.array("i", [0, 1, 2, 3]), b"abc")
    ts = array.array("q", [1, 2, 3])
    buffer = bytearray(4096)
    builder = records.BatchBuilder(buffer, 4096)
    assert builder.append(3, column, None, ts) == 3
    out = builder.finish()
    assert out.obj is buffer  # written in place, no copy
    assert [r.value for r in records.decode_records(out)] == [b"a", b"b", b"c"]
    with pytest.raises(ValueError, match="finished"):
        builder.append(1, column, None, ts)
    with pytest.raises(ValueError, match="finished"):
        builder.finish()
    with pytest.raises(ValueError, match="at least one"):
        records.BatchBuilder(bytearray(), 4096).finish()
    # A first record larger than the limit gets a batch of its own, grown to fit.
    big = (array.array("i", [0, 10_000, 10_001]), b"x" * 10_001)
    builder = records.BatchBuilder(bytearray(), 4096)
    assert builder.append(2, big, None, ts) == 1
    assert builder.size > 10_000
    assert [len(r.value) for r in records.decode_records(builder.finish())] == [10_000]


def test_a_bad_row_appends_nothing():
    column = (array.array("i", [0, 1, 2, 3]), b"abc")
    ts = array.array("q", [1, 2, 3])
    builder = records.BatchBuilder(bytearray(), 4096)
    assert builder.append(1, column, None, ts, rows=array.array("i", [2])) == 1
    size = builder.size
    for bad in ([0, 3], [1, -1]):
        with pytest.raises(ValueError, match="outside|offsets"):
            builder.append(2, column, None, ts, rows=array.array("i", bad))
        assert (builder.count, builder.size) == (1, size)
    broken = (array.array("i", [0, 1, 9, 3]), b"abc")
    with pytest.raises(ValueError, match="offsets"):
        builder.append(2, broken, None, ts, rows=array.array("i", [0, 1]))
    with pytest.raises(ValueError, match="header"):
        builder.append(1, column, None, ts, rows=array.array("i", [1]),
                       headers=(array.array("i", [0, 0, 2, 2]),
                                (array.array("i", [0, 1]), b"k"), None))
    assert builder.append(1, column, None, ts, rows=array.array("i", [0])) == 1
    assert [r.value for r in records.decode_records(builder.finish())] == [b"c", b"a"]

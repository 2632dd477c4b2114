"""encode_batch_columns with a row order (``rows``): record i is row rows[i] of the columns.

The oracle is the same encoder without rows over columns gathered with pyarrow's
``take``: the bytes must be identical, for any columns (nulls, slices, headers) and any
row numbers (permutations, subsets, repeats). Rows outside the columns and corrupt
offsets at a row that is read are rejected, never read.
"""

from __future__ import annotations

import array
import importlib

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.client.producer import _binary_column, _headers_column, _timestamps_buffer

records = importlib.import_module("pybroker._native.records")

HEADER_TYPE = pa.list_(pa.struct([("key", pa.binary()), ("value", pa.binary())]))
maybe_bytes = st.one_of(st.none(), st.binary(max_size=40))


@st.composite
def tables(draw):
    n = draw(st.integers(1, 40))
    values = draw(st.lists(maybe_bytes, min_size=n, max_size=n))
    keys = draw(st.one_of(st.none(), st.lists(maybe_bytes, min_size=n, max_size=n)))
    timestamps = draw(st.lists(st.integers(0, 2**41), min_size=n, max_size=n))
    header = st.tuples(st.binary(min_size=1, max_size=8), maybe_bytes)
    headers = draw(st.one_of(st.none(), st.lists(st.lists(header, max_size=3),
                                                 min_size=n, max_size=n)))
    # A slice of a longer array (Arrow offsets and validity offsets not at zero).
    lead = draw(st.integers(0, 9))
    count = draw(st.integers(1, 50))
    rows = draw(st.lists(st.integers(0, n - 1), min_size=count, max_size=count))
    return n, values, keys, timestamps, headers, lead, rows, draw(st.sampled_from([0, 3]))


def _sliced(items, arrow_type, lead):
    return pa.array([None] * lead + items, arrow_type).slice(lead)


def _columns(values, keys, timestamps, headers):
    return (_binary_column(values), None if keys is None else _binary_column(keys),
            _timestamps_buffer(timestamps),
            None if headers is None else _headers_column(headers))


@settings(max_examples=300, deadline=None)
@given(tables())
def test_rows_equal_taken_columns(table):
    n, values, keys, timestamps, headers, lead, rows, codec = table
    arrays = [_sliced(values, pa.binary(), lead),
              None if keys is None else _sliced(keys, pa.binary(), lead),
              _sliced(timestamps, pa.int64(), lead),
              None if headers is None else _sliced(
                  [[{"key": k, "value": v} for k, v in h] for h in headers], HEADER_TYPE, lead)]
    order = pa.array(rows, pa.int32())
    taken = [None if a is None else a.take(order) for a in arrays]
    expected = records.encode_batch_columns(
        len(rows), *_columns(*taken), producer_id=7, producer_epoch=1, base_sequence=3,
        compression=codec)
    got = records.encode_batch_columns(
        len(rows), *_columns(*arrays), rows=array.array("i", rows), producer_id=7,
        producer_epoch=1, base_sequence=3, compression=codec)
    if codec:  # compressed bytes may differ only if the codec were not deterministic
        assert records.decode_records(got) == records.decode_records(expected)
    else:
        assert got == expected


def test_rows_are_checked_against_the_columns():
    offsets = array.array("i", [0, 1, 2, 3])
    column = (offsets, b"abc")
    ts = array.array("q", [1, 2, 3])
    assert [r.value for r in records.decode_records(records.encode_batch_columns(
        2, column, None, ts, rows=array.array("i", [2, 0])))] == [b"c", b"a"]
    for bad in ([3], [-1], [0, 5]):
        with pytest.raises(ValueError, match="outside|offsets"):
            records.encode_batch_columns(len(bad), column, None, ts,
                                         rows=array.array("i", bad))
    # A timestamps buffer shorter than the rows read.
    with pytest.raises(ValueError, match="outside"):
        records.encode_batch_columns(1, column, None, ts[:2], rows=array.array("i", [2]))
    with pytest.raises(ValueError, match="rows buffer"):
        records.encode_batch_columns(2, column, rows=array.array("i", [0]))
    # Corrupt offsets only matter at a row that is read.
    broken = (array.array("i", [0, 1, 9, 3]), b"abc")
    records.encode_batch_columns(1, broken, rows=array.array("i", [0]))
    with pytest.raises(ValueError, match="offsets"):
        records.encode_batch_columns(1, broken, rows=array.array("i", [1]))
    with pytest.raises(ValueError, match="header"):
        records.encode_batch_columns(
            1, column, rows=array.array("i", [1]),
            headers=(array.array("i", [0, 0, 2, 2]), (array.array("i", [0, 1]), b"k"),
                     None))

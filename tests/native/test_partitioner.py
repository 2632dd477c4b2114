"""The native key partitioner against Java's vectors and kafka-python's murmur2."""

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from pybroker._native.partitioner import murmur2, partition_for_key, partition_rows

# Vectors from the Java client's own unit test of Utils.murmur2 (signed int results).
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_java_vectors():
    for key, expected in JAVA_VECTORS.items():
        assert murmur2(key) == expected, key


@given(st.binary(max_size=64))
def test_matches_kafka_python(key):
    assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key) & 0xFFFFFFFF


@given(st.binary(min_size=1, max_size=32), st.integers(1, 200))
def test_partition_for_key_is_java_default(key, num_partitions):
    expected = (kafka_python_murmur2(key) & 0x7FFFFFFF) % num_partitions
    assert partition_for_key(key, num_partitions) == expected


def _buffers(array: pa.BinaryArray):
    validity, offsets, data = array.buffers()
    # A sliced array keeps the parent's buffers; step the offsets buffer to the slice.
    offsets = memoryview(offsets)[4 * array.offset:]
    if validity is not None and array.offset and len(array):
        # Bitmaps cannot be moved by a bit offset: rebuild one for the slice.
        validity = pa.array([v is not None for v in array.to_pylist()]).buffers()[1]
    elif validity is not None and array.offset:
        validity = None  # empty slice: nothing to look up
    return offsets, data, validity


@given(st.lists(st.one_of(st.none(), st.binary(max_size=20)), max_size=300),
       st.integers(1, 12), st.integers(0, 5))
def test_partition_rows_groups_like_the_oracle(keys, num_partitions, slice_start):
    array = pa.array(keys, type=pa.binary()).slice(min(slice_start, len(keys)))
    keys = array.to_pylist()
    null_partition = num_partitions - 1
    offsets, data, validity = _buffers(array)
    row_order, starts = partition_rows(offsets, data if data is not None else b"", validity,
                                       len(keys), num_partitions, null_partition)
    order = memoryview(row_order).cast("i").tolist()
    assert starts[0] == 0 and starts[-1] == len(keys)
    for p in range(num_partitions):
        rows = order[starts[p]:starts[p + 1]]
        assert rows == sorted(rows)
        for row in rows:
            key = keys[row]
            want = null_partition if key is None else \
                (kafka_python_murmur2(key) & 0x7FFFFFFF) % num_partitions
            assert want == p
    assert sorted(order) == list(range(len(keys)))


def test_malformed_offsets_are_refused():
    import struct

    import pytest
    offsets = struct.pack("<3i", 0, 4, 99)  # second key runs past the data
    with pytest.raises(ValueError):
        partition_rows(offsets, b"abcdefgh", None, 2, 3)
    with pytest.raises(ValueError):
        partition_rows(struct.pack("<i", 0), b"", None, 2, 3)  # offsets too short

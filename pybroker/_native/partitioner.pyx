# distutils: sources = csrc/pb_partitioner.c
"""Kafka's default key partitioner (Java ``Utils.murmur2``) over Arrow key columns.

The bulk producer and the Spark writer place keyed rows exactly where the Java client's
default partitioner would, so every Kafka client reading the topic finds each key in the
same partition. Keys come in Arrow's binary layout (int32 offsets, data, validity bitmap)
and never become Python objects: one call partitions and groups a whole Arrow batch.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t

from pybroker._native.partitioner cimport pb_group_rows, pb_murmur2, pb_partition_keys

# Below this many rows the partitioning loop is shorter than a GIL hand-off.
cdef Py_ssize_t _NOGIL_MIN_ROWS = 4096


cdef int _partition_and_group(Py_buffer *offsets, Py_buffer *data, const uint8_t *validity,
                              Py_ssize_t n_rows, int32_t num_partitions,
                              int32_t null_key_partition, int32_t *partition_of,
                              int32_t *row_order, int64_t *starts) noexcept nogil:
    cdef int rc = pb_partition_keys(
        <const int32_t *>offsets.buf, <const uint8_t *>data.buf, <size_t>data.len, validity,
        <size_t>n_rows, num_partitions, null_key_partition, partition_of)
    if rc == 0:
        pb_group_rows(partition_of, <size_t>n_rows, num_partitions, row_order, starts)
    return rc


def murmur2(key) -> int:
    """Java's ``Utils.murmur2`` of ``key``, as a signed 32-bit int."""
    cdef Py_buffer view
    PyObject_GetBuffer(key, &view, PyBUF_SIMPLE)
    try:
        return pb_murmur2(<const uint8_t *>view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)


def partition_for_key(key, int32_t num_partitions) -> int:
    """The partition the Java default partitioner picks for a non-null ``key``."""
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    cdef Py_buffer view
    cdef uint32_t hash
    PyObject_GetBuffer(key, &view, PyBUF_SIMPLE)
    try:
        hash = <uint32_t>pb_murmur2(<const uint8_t *>view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return (hash & 0x7fffffffu) % <uint32_t>num_partitions


def partition_rows(offsets, data, validity, Py_ssize_t n_rows, int32_t num_partitions,
                   int32_t null_key_partition=0):
    """Partition ``n_rows`` Arrow binary keys and group the rows by partition.

    ``offsets`` holds ``n_rows + 1`` int32 values, ``validity`` is an Arrow bitmap or None
    (all keys present); rows with a null key go to ``null_key_partition`` (the caller's
    sticky choice). Returns ``(row_order, starts)``: ``row_order`` a bytearray of int32 row
    numbers grouped by partition, ascending within each, and ``starts`` a list of
    ``num_partitions + 1`` indexes into it, so partition p owns
    ``row_order[starts[p]:starts[p + 1]]``.
    """
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    if not 0 <= null_key_partition < num_partitions:
        raise ValueError("null_key_partition out of range")
    if n_rows < 0:
        raise ValueError("n_rows must be non-negative")
    cdef Py_buffer off_view, data_view, valid_view
    cdef bint have_validity = validity is not None
    cdef const uint8_t *valid_ptr = NULL
    cdef int rc
    cdef bytearray partition_of = bytearray(4 * n_rows)
    cdef bytearray row_order = bytearray(4 * n_rows)
    cdef bytearray starts = bytearray(8 * (num_partitions + 1))
    cdef int32_t *partition_ptr = <int32_t *><char *>partition_of
    cdef int32_t *order_ptr = <int32_t *><char *>row_order
    cdef int64_t *starts_ptr = <int64_t *><char *>starts
    PyObject_GetBuffer(offsets, &off_view, PyBUF_SIMPLE)
    try:
        PyObject_GetBuffer(data, &data_view, PyBUF_SIMPLE)
        try:
            if have_validity:
                PyObject_GetBuffer(validity, &valid_view, PyBUF_SIMPLE)
            try:
                if off_view.len < 4 * (n_rows + 1):
                    raise ValueError("offsets buffer shorter than n_rows + 1 entries")
                if have_validity:
                    if valid_view.len < (n_rows + 7) // 8:
                        raise ValueError("validity bitmap shorter than n_rows bits")
                    valid_ptr = <const uint8_t *>valid_view.buf
                if n_rows >= _NOGIL_MIN_ROWS:
                    with nogil:
                        rc = _partition_and_group(&off_view, &data_view, valid_ptr, n_rows,
                                                  num_partitions, null_key_partition,
                                                  partition_ptr, order_ptr, starts_ptr)
                else:
                    rc = _partition_and_group(&off_view, &data_view, valid_ptr, n_rows,
                                              num_partitions, null_key_partition,
                                              partition_ptr, order_ptr, starts_ptr)
                if rc != 0:
                    raise ValueError("key offsets run outside the key data buffer")
            finally:
                if have_validity:
                    PyBuffer_Release(&valid_view)
        finally:
            PyBuffer_Release(&data_view)
    finally:
        PyBuffer_Release(&off_view)
    return row_order, [starts_ptr[p] for p in range(num_partitions + 1)]

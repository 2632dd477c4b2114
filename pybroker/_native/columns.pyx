# distutils: sources = csrc/pb_columns.c csrc/pb_records.c csrc/pb_crc32c.c
"""Decode fetched record batches into Arrow columns without a Python object per record.

The client's fetcher and the Spark reader hand every fetched ``records`` blob to
:meth:`RecordColumns.add_batches`; the C decoder appends each record to Arrow-layout
buffers, and :meth:`RecordColumns.to_arrow` hands those buffers to pyarrow arrays
without a copy (``pa.foreign_buffer``; the arrays own them from then on). Compressed
batches cost one decompression call per batch (the codec libraries), nothing per record.

A ``read_committed`` fetch answers with the aborted transactions of its range, each a
producer id and the offset its transaction began at; ``add_batches`` drops their batches
as Kafka's consumer does (``CompletedFetch``), deciding per batch from its header: a
transactional batch is dropped while its producer has an aborted transaction begun at or
before the batch's last offset and not yet closed by that producer's abort marker.

Thread safety: an instance belongs to one thread; separate instances share nothing.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport INT64_MAX, int64_t, uint8_t
from libc.string cimport memset

from pybroker._native.columns cimport (
    pb_binary_builder,
    pb_columns_add_records,
    pb_columns_free,
    pb_columns_init,
    pb_record_columns,
)
from pybroker._native.records cimport (
    DEFAULT_MAX_DECOMPRESSED,
    PB_ATTR_COMPRESSION_MASK,
    PB_ATTR_CONTROL,
    PB_ATTR_TRANSACTIONAL,
    PB_BATCH_HEADER_SIZE,
    PB_LOG_OVERHEAD,
    PB_OK,
    pb_batch_header,
    pb_check_batch,
    pb_err_message,
    pb_read_header,
    pb_record,
    pb_record_parse,
)

from pybroker.errors import CorruptRecordError


cdef class _TakenColumns:
    """Owns the buffers of columns that ``RecordColumns.to_arrow`` handed over: the arrays
    made from them (``pa.foreign_buffer``, no copy) keep it alive, and the last one gone
    frees them."""
    cdef pb_record_columns cols

    def __dealloc__(self):
        pb_columns_free(&self.cols)


cdef object _wrap(pa, const void *p, Py_ssize_t n, _TakenColumns owner):
    if n <= 0:
        return pa.py_buffer(b"")
    return pa.foreign_buffer(<size_t>p, n, owner)


cdef object _binary_array(pa, pb_binary_builder *b, object arrow_type, _TakenColumns owner):
    cdef Py_ssize_t n = b.length
    offsets = _wrap(pa, b.offsets, 4 * (n + 1), owner)
    data = _wrap(pa, b.data, <Py_ssize_t>b.data_len, owner)
    validity = _wrap(pa, b.validity, (n + 7) // 8, owner) if b.null_count else None
    return pa.Array.from_buffers(arrow_type, n, [validity, offsets, data],
                                 null_count=b.null_count)


cdef bint _is_abort_marker(const pb_batch_header *h, const uint8_t *batch,
                           Py_ssize_t size) noexcept:
    """Whether a (checked) control batch is an abort marker: its record's key is Kafka's
    control record key, version int16 then type int16 (0 abort, 1 commit)."""
    cdef pb_record r
    cdef const uint8_t *p = batch + PB_BATCH_HEADER_SIZE
    if h.attributes & PB_ATTR_COMPRESSION_MASK or h.records_count < 1:
        return False
    return (pb_record_parse(&p, batch + size, &r) == PB_OK and r.key_len >= 4
            and r.key[2] == 0 and r.key[3] == 0)


def fetched_end(buf) -> int:
    """The offset after the last complete batch of ``buf`` (a fetch's records), from the
    batch headers alone (nothing checked or decoded: ``add_batches`` does that), or -1
    when it holds none: where the next fetch starts, known before the records are
    decoded."""
    cdef Py_buffer view
    cdef pb_batch_header h
    cdef Py_ssize_t pos = 0, size
    cdef int64_t end = -1
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        while pos + PB_BATCH_HEADER_SIZE <= view.len:
            if pb_read_header(<const uint8_t *>view.buf + pos, view.len - pos, &h) != PB_OK:
                break
            size = <Py_ssize_t>h.batch_length + PB_LOG_OVERHEAD
            if pos + size > view.len:
                break
            end = h.base_offset + h.last_offset_delta + 1
            pos += size
    finally:
        PyBuffer_Release(&view)
    return end


cdef class RecordColumns:
    """Growable columns: offset, timestamp, timestamp_type, key, value, headers."""

    cdef pb_record_columns cols
    cdef object _decompress

    def __cinit__(self):
        if pb_columns_init(&self.cols) != 0:
            raise MemoryError()

    def __dealloc__(self):
        pb_columns_free(&self.cols)

    def __len__(self):
        return self.cols.length

    def add_batches(self, buf, int64_t min_offset=0, max_offset=None,
                    aborted=None) -> int:
        """Append the records of every complete batch in ``buf`` (a fetch's records).

        Records below ``min_offset`` (a fetch answers from the start of the batch holding
        the requested offset) or at/after ``max_offset`` are left out; control batches
        (transaction markers) carry no data. A trailing partial batch is normal at the end
        of a size-limited fetch and is ignored. Returns the offset after the last complete
        batch, or -1 when ``buf`` held none. A damaged batch raises CorruptRecordError.
        """
        cdef Py_buffer view
        cdef pb_batch_header h
        cdef Py_ssize_t pos = 0, size
        cdef int rc
        cdef int64_t next_offset = -1
        cdef int64_t limit = INT64_MAX if max_offset is None else max_offset
        cdef const uint8_t *base
        # aborted transactions by first offset, and the producers with one begun so far
        cdef list pending = sorted(aborted, key=lambda a: a[1]) if aborted else []
        cdef Py_ssize_t next_pending = 0
        cdef set aborting = set()
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            base = <const uint8_t *>view.buf
            while pos + PB_BATCH_HEADER_SIZE <= view.len:
                if pb_read_header(base + pos, view.len - pos, &h) != PB_OK:
                    raise CorruptRecordError(f"bad batch header at byte {pos}")
                size = <Py_ssize_t>h.batch_length + PB_LOG_OVERHEAD
                if pos + size > view.len:
                    break
                rc = pb_check_batch(base + pos, size, &h)
                if rc != PB_OK:
                    raise CorruptRecordError(
                        f"batch at byte {pos}: {pb_err_message(rc).decode()}")
                while next_pending < len(pending) and \
                        pending[next_pending][1] <= h.base_offset + h.last_offset_delta:
                    aborting.add(pending[next_pending][0])
                    next_pending += 1
                if h.attributes & PB_ATTR_CONTROL:
                    if aborting and _is_abort_marker(&h, base + pos, size):
                        aborting.discard(h.producer_id)
                elif not (h.attributes & PB_ATTR_TRANSACTIONAL and aborting and
                          h.producer_id in aborting):
                    self._add_one(&h, base + pos, size, min_offset, limit)
                next_offset = h.base_offset + h.last_offset_delta + 1
                pos += size
        finally:
            PyBuffer_Release(&view)
        return next_offset

    cdef _add_one(self, pb_batch_header *h, const uint8_t *batch, Py_ssize_t size,
                  int64_t min_offset, int64_t max_offset):
        cdef int codec = h.attributes & PB_ATTR_COMPRESSION_MASK
        cdef Py_buffer records
        cdef int rc
        if codec == 0:
            rc = pb_columns_add_records(&self.cols, h, batch + PB_BATCH_HEADER_SIZE,
                                        size - PB_BATCH_HEADER_SIZE, min_offset, max_offset)
        else:
            if self._decompress is None:
                from pybroker._native.compression import decompress
                self._decompress = decompress
            plain = self._decompress(
                codec, (<const char *>batch)[PB_BATCH_HEADER_SIZE:size],
                DEFAULT_MAX_DECOMPRESSED)
            PyObject_GetBuffer(plain, &records, PyBUF_SIMPLE)
            try:
                rc = pb_columns_add_records(&self.cols, h, <const uint8_t *>records.buf,
                                            records.len, min_offset, max_offset)
            finally:
                PyBuffer_Release(&records)
        if rc == -1:
            raise MemoryError()
        if rc != PB_OK:
            raise CorruptRecordError(
                f"batch at offset {h.base_offset}: {pb_err_message(rc).decode()}")

    def to_arrow(self) -> dict:
        """The columns as pyarrow arrays, keyed by Spark's Kafka source column names.

        The arrays take the decoded buffers over without a copy (a copy of every fetched
        byte was the reader's largest cost after the decode itself) and the columns start
        empty again: each call returns the rows added since the one before."""
        import pyarrow as pa

        cdef _TakenColumns owner = _TakenColumns()
        cdef pb_record_columns *c = &owner.cols
        owner.cols = self.cols
        if pb_columns_init(&self.cols) != 0:
            self.cols = owner.cols
            memset(&owner.cols, 0, sizeof(owner.cols))
            raise MemoryError()
        cdef Py_ssize_t n = c.length
        header_struct = pa.StructArray.from_arrays(
            [_binary_array(pa, &c.header_key, pa.string(), owner),
             _binary_array(pa, &c.header_value, pa.binary(), owner)],
            names=["key", "value"])
        headers = pa.ListArray.from_arrays(
            pa.Array.from_buffers(pa.int32(), n + 1,
                                  [None, _wrap(pa, c.header_offsets, 4 * (n + 1), owner)]),
            header_struct)
        return {
            "key": _binary_array(pa, &c.key, pa.binary(), owner),
            "value": _binary_array(pa, &c.value, pa.binary(), owner),
            "offset": pa.Array.from_buffers(
                pa.int64(), n, [None, _wrap(pa, c.offset, 8 * n, owner)]),
            "timestamp": pa.Array.from_buffers(
                pa.int64(), n, [None, _wrap(pa, c.timestamp, 8 * n, owner)]),
            "timestamp_type": pa.Array.from_buffers(
                pa.int32(), n, [None, _wrap(pa, c.timestamp_type, 4 * n, owner)]),
            "headers": headers,
        }

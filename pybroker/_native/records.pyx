# distutils: sources = csrc/pb_records.c csrc/pb_crc32c.c
"""Kafka record batch v2 in C: validate, stamp, scan, find, encode, decode.

The wire format is at the top of csrc/pb_records.h. Every function takes any
buffer-protocol object (bytes, bytearray, memoryview, mmap) and works on it in place
(STYLE 5): validation and scans never copy the batch; stamping writes into the caller's
writable buffer. Compressed batches are the one exception: ``validate_batch`` decompresses
their records section a piece at a time (``compression.decompress_chunks``) into a
``RecordWalker``, which checks the records as they stream by, so validation holds one
piece whatever the batch inflates to and stops at the first bad record; the readers
(``decode_records``, ``find_timestamp``) decompress the whole section and walk it.

Bad input raises ``CorruptRecordError`` (damaged bytes: truncation, bad batchLength,
magic, CRC), ``InvalidRecordError`` (intact bytes breaking a rule: record framing,
counts, offset deltas, control batches from producers), ``RecordValidationError``
(records without a key where the topic needs keys: the indices of all of them, found by
the same C walk) or ``UnsupportedCompressionError``. Anything else is a bug here (STYLE 12).

Thread-safety: module functions keep no state; BatchInfo and ScanResult are immutable;
a RecordWalker is used by one thread at a time. Large inputs are processed without the
GIL, so the caller must not resize the buffer from another thread meanwhile (an mmap
export already forbids that).
"""

import os
import time
from collections import namedtuple

from cpython.buffer cimport (PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release,
                             PyObject_GetBuffer)
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.pystate cimport PyThreadState
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uintptr_t
from libc.string cimport memcpy, memset

from pybroker._native cimport crc32c as _crc
from pybroker._native import compression as _compression
from pybroker.errors import (CorruptRecordError, InvalidRecordError, RecordValidationError,
                             UnsupportedCompressionError)

# This extension links its own copy of pb_crc32c.c: select its path like crc32c.pyx does
# (that module's import already rejected an unknown PYBROKER_CRC32C value).
import pybroker._native.crc32c  # noqa: E402,F401
_crc.pb_crc32c_init(os.environ.get("PYBROKER_CRC32C", "").encode())

Record = namedtuple("Record", "offset timestamp key value headers")
Record.__doc__ = """One decoded record: headers are a list of (str key, bytes | None value)."""

HEADER_SIZE = PB_BATCH_HEADER_SIZE
MAX_DECOMPRESSED_SIZE = DEFAULT_MAX_DECOMPRESSED


cdef int _raise(int err, Py_ssize_t pos) except -1:
    if err < 0:
        err = -err
    if err == PB_ERR_NO_MEMORY:
        raise MemoryError()
    msg = f"{pb_err_message(err).decode()} (at byte {pos})"
    if err >= PB_ERR_UNSUPPORTED:
        raise UnsupportedCompressionError(msg)
    if err >= PB_ERR_INVALID:
        raise InvalidRecordError(msg)
    raise CorruptRecordError(msg)


cdef class BatchInfo:
    """The header of one record batch (read-only). ``size`` is the whole batch in bytes."""

    @property
    def last_offset(self):
        return self.base_offset + self.last_offset_delta

    def __repr__(self):
        return (f"BatchInfo(base_offset={self.base_offset}, size={self.size}, "
                f"records_count={self.records_count}, compression={self.compression}, "
                f"max_timestamp={self.max_timestamp}, crc=0x{self.crc:08x})")


cdef BatchInfo batch_info_from_header(const pb_batch_header *h):
    cdef BatchInfo info = BatchInfo.__new__(BatchInfo)
    info.base_offset = h.base_offset
    info.size = <Py_ssize_t>h.batch_length + PB_LOG_OVERHEAD
    info.partition_leader_epoch = h.partition_leader_epoch
    info.magic = h.magic
    info.crc = h.crc
    info.attributes = h.attributes
    info.compression = h.attributes & PB_ATTR_COMPRESSION_MASK
    info.timestamp_type = 1 if h.attributes & PB_ATTR_LOG_APPEND_TIME else 0
    info.is_transactional = (h.attributes & PB_ATTR_TRANSACTIONAL) != 0
    info.is_control = (h.attributes & PB_ATTR_CONTROL) != 0
    info.last_offset_delta = h.last_offset_delta
    info.first_timestamp = h.first_timestamp
    info.max_timestamp = h.max_timestamp
    info.producer_id = h.producer_id
    info.producer_epoch = h.producer_epoch
    info.base_sequence = h.base_sequence
    info.records_count = h.records_count
    info.control_type = -1
    info.coordinator_epoch = -1
    return info


cdef void _read_control_type(BatchInfo info, const uint8_t *batch, Py_ssize_t available
                             ) noexcept:
    """Set ``info.control_type`` from the key of a control batch's (uncompressed) record
    (version int16, type int16) and ``info.coordinator_epoch`` from its value (version
    int16, coordinator epoch int32). Left -1 when the batch is not whole in ``available``
    bytes or does not read as a control record."""
    cdef pb_record r
    cdef const uint8_t *p = batch + PB_BATCH_HEADER_SIZE
    if not info.is_control or info.compression or info.size > available or \
            info.records_count < 1:
        return
    if pb_record_parse(&p, batch + info.size, &r) == PB_OK and r.key_len >= 4:
        info.control_type = (r.key[2] << 8) | r.key[3]
        if r.value_len >= 6:
            info.coordinator_epoch = <int32_t>((<uint32_t>r.value[2] << 24) |
                                               (<uint32_t>r.value[3] << 16) |
                                               (<uint32_t>r.value[4] << 8) | r.value[5])


cdef class ScanResult:
    """What a recovery scan found; ``error`` is None or why the scan stopped early."""

    def __repr__(self):
        return (f"ScanResult(valid_end={self.valid_end}, next_offset={self.next_offset}, "
                f"batch_count={self.batch_count}, error={self.error!r})")


cdef inline int _check_range(Py_ssize_t start, Py_ssize_t end, Py_ssize_t length) except -1:
    if start < 0 or end < start or end > length:
        raise ValueError(f"range [{start}, {end}) outside a buffer of {length} bytes")
    return 0


cdef object _compressed_section(const pb_batch_header *h, object buf, Py_ssize_t position):
    """The compressed records section of the checked batch at ``position`` of ``buf``."""
    # A real memoryview (it keeps `buf` exported) so that nothing the codec libraries or a
    # traceback retain can outlive the memory it points to.
    view = memoryview(buf)
    if view.itemsize != 1 or view.format != "B":
        view = view.cast("B")
    return view[position + PB_BATCH_HEADER_SIZE:
                position + <Py_ssize_t>h.batch_length + PB_LOG_OVERHEAD]


cdef object _decompress_section(const pb_batch_header *h, object buf, Py_ssize_t position,
                                Py_ssize_t limit):
    """Scratch buffer holding the decompressed records section of the checked batch at
    ``position`` of ``buf``."""
    return _compression.decompress(h.attributes & PB_ATTR_COMPRESSION_MASK,
                                   _compressed_section(h, buf, position), limit)


cdef class RecordWalker:
    """Checks a records section of ``count`` records fed in pieces, exactly as
    ``validate_batch`` checks a whole one (the same verdicts, at the same byte positions),
    holding none of it (``pb_record_walker`` in pb_records.h).

    ``feed(piece)`` raises as soon as the records so far are bad (``InvalidRecordError``);
    ``finish()`` raises if the section, now ended, is. Pieces of ``RECORDS_GIL_THRESHOLD``
    bytes and more are walked without the GIL. One thread at a time. With
    ``keys_required``, ``keyless`` lists the indices of the records without a key.
    """

    cdef pb_record_walker _walker
    cdef pb_keyless _keyless

    def __cinit__(self, int32_t count, bint keys_required=False):
        memset(&self._keyless, 0, sizeof(self._keyless))
        pb_walker_init(&self._walker, count, &self._keyless if keys_required else NULL)

    def __dealloc__(self):
        pb_keyless_free(&self._keyless)

    @property
    def keyless(self):
        """Indices of the records walked so far that have no key (``keys_required``)."""
        return [self._keyless.index[i] for i in range(self._keyless.len)]

    @property
    def position(self):
        """Bytes of the section walked so far."""
        return self._walker.pos

    def feed(self, piece):
        cdef Py_buffer view
        cdef PyThreadState *state
        cdef int err
        PyObject_GetBuffer(piece, &view, PyBUF_SIMPLE)
        try:
            state = _crc.release_gil_if(view.len >= RECORDS_GIL_THRESHOLD)
            err = pb_walker_feed(&self._walker, <const uint8_t *>view.buf, <size_t>view.len)
            _crc.reacquire_gil(state)
        finally:
            PyBuffer_Release(&view)
        if err:
            _raise(err, <Py_ssize_t>self._walker.err_pos)

    def finish(self):
        cdef int err = pb_walker_finish(&self._walker)
        if err:
            _raise(err, <Py_ssize_t>self._walker.err_pos)


cdef int _validate_compressed(const pb_batch_header *h, object buf, Py_ssize_t limit,
                              str keyless_error) except -1:
    cdef RecordWalker walker = RecordWalker(h.records_count, keyless_error is not None)
    for piece in _compression.decompress_chunks(h.attributes & PB_ATTR_COMPRESSION_MASK,
                                                _compressed_section(h, buf, 0), limit):
        walker.feed(piece)
    walker.finish()
    return _refuse_keyless(&walker._keyless, keyless_error)


cdef int _refuse_keyless(const pb_keyless *keyless, str message) except -1:
    """Raise the RecordValidationError of the records without a key, if any: one record
    error each (as Kafka answers), made here so no Python loop runs per record."""
    cdef list record_errors
    cdef int32_t i
    if keyless.len == 0:
        return 0
    record_errors = [(keyless.index[i], message) for i in range(keyless.len)]
    raise RecordValidationError(record_errors)


def validate_batch(buf, Py_ssize_t max_decompressed_size=DEFAULT_MAX_DECOMPRESSED,
                   str keyless_error=None):
    """Check one batch exactly as a producer sent it; return its BatchInfo.

    Header bounds, batchLength == len(buf) - 12, magic 2, CRC32C, recordsCount ==
    lastOffsetDelta + 1, no control batch, and every record's framing with offsetDelta i.
    Compressed records are checked the same way as they are decompressed (at most
    ``max_decompressed_size`` bytes), a piece at a time, up to the first bad record.
    With ``keyless_error`` (a compacted topic) every record must have a key: an otherwise
    valid batch with records without one raises ``RecordValidationError``, each such
    record's index paired with ``keyless_error``. ``buf`` is never modified.
    """
    cdef Py_buffer view
    cdef PyThreadState *state
    cdef pb_batch_header h
    cdef pb_keyless keyless
    cdef size_t pos = 0
    cdef int err
    memset(&keyless, 0, sizeof(keyless))
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        state = _crc.release_gil_if(view.len >= RECORDS_GIL_THRESHOLD)
        err = pb_validate_batch(<const uint8_t *>view.buf, <size_t>view.len, &h, &pos,
                                &keyless if keyless_error is not None else NULL)
        _crc.reacquire_gil(state)
        if err:
            _raise(err, <Py_ssize_t>pos)
        if h.attributes & PB_ATTR_COMPRESSION_MASK:
            _validate_compressed(&h, buf, max_decompressed_size, keyless_error)
        else:
            _refuse_keyless(&keyless, keyless_error)
    finally:
        PyBuffer_Release(&view)
        pb_keyless_free(&keyless)
    return batch_info_from_header(&h)


def read_batch_header(buf, Py_ssize_t position=0):
    """Header of the batch at ``position`` (61 bytes needed; no CRC, records unread but
    for a whole control batch's one record: its ``control_type``)."""
    cdef Py_buffer view
    cdef pb_batch_header h
    cdef int err
    cdef BatchInfo info
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        _check_range(position, position, view.len)
        err = pb_read_header(<const uint8_t *>view.buf + position,
                             <size_t>(view.len - position), &h)
        if err:
            _raise(err, position)
        info = batch_info_from_header(&h)
        _read_control_type(info, <const uint8_t *>view.buf + position, view.len - position)
    finally:
        PyBuffer_Release(&view)
    return info


def stamp_batch(buf, Py_ssize_t position, int64_t base_offset, int32_t partition_leader_epoch,
                int64_t log_append_time=-1):
    """Rewrite baseOffset and partitionLeaderEpoch of the batch at ``position`` in place.

    With ``log_append_time >= 0`` also set the LogAppendTime bit and maxTimestamp and
    recompute the CRC. ``buf`` must be writable.
    """
    cdef Py_buffer view
    cdef PyThreadState *state
    cdef int err
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    try:
        _check_range(position, position, view.len)
        state = _crc.release_gil_if(
            log_append_time >= 0 and view.len - position >= RECORDS_GIL_THRESHOLD)
        err = pb_stamp_batch(<uint8_t *>view.buf + position, <size_t>(view.len - position),
                             base_offset, partition_leader_epoch, log_append_time)
        _crc.reacquire_gil(state)
        if err:
            _raise(err, position)
    finally:
        PyBuffer_Release(&view)


def scan_log(buf, Py_ssize_t start, Py_ssize_t end, int64_t base_offset,
             int64_t index_interval_bytes):
    """Recovery scan of the batches in ``buf[start:end]`` (positions are absolute).

    Validates each batch's header, CRC and offsets (increasing, within 2^31 of
    ``base_offset``) and stops at the first bad one; rebuilds the offset and time index
    entries the way Kafka's LogSegment.recover does. One C loop, no per-batch Python.
    """
    cdef Py_buffer view
    cdef PyThreadState *state
    cdef pb_scan s
    cdef int rc
    cdef ScanResult result = ScanResult.__new__(ScanResult)
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        _check_range(start, end, view.len)
        state = _crc.release_gil_if(end - start >= RECORDS_GIL_THRESHOLD)
        rc = pb_scan_log(<const uint8_t *>view.buf, <size_t>start, <size_t>end,
                         base_offset, index_interval_bytes, &s)
        _crc.reacquire_gil(state)
    finally:
        PyBuffer_Release(&view)
    try:
        if rc != 0:
            raise MemoryError("scan_log: index buffers")
        result.valid_end = <Py_ssize_t>s.valid_end
        result.next_offset = s.next_offset
        result.max_timestamp = s.max_timestamp
        result.offset_of_max_timestamp = s.offset_of_max_timestamp
        result.batch_count = s.batch_count
        result.offset_index = PyBytes_FromStringAndSize(<char *>s.offset_index,
                                                        <Py_ssize_t>s.offset_index_len)
        result.time_index = PyBytes_FromStringAndSize(<char *>s.time_index,
                                                      <Py_ssize_t>s.time_index_len)
        if s.err:
            result.error = f"{pb_err_message(s.err).decode()} at position {s.err_pos}"
        else:
            result.error = None
    finally:
        pb_scan_free(&s)
    return result


def find_position(buf, Py_ssize_t start, Py_ssize_t end, int64_t target_offset):
    """(position, BatchInfo) of the first complete batch in ``buf[start:end]`` whose last
    offset >= ``target_offset``, or None. Header walk only (no CRC)."""
    cdef Py_buffer view
    cdef pb_batch_header h
    cdef size_t pos = 0
    cdef int rc
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        _check_range(start, end, view.len)
        rc = pb_find_position(<const uint8_t *>view.buf, <size_t>start, <size_t>end,
                              target_offset, &pos, &h)
        if rc < 0:
            _raise(rc, <Py_ssize_t>pos)
    finally:
        PyBuffer_Release(&view)
    if rc == 0:
        return None
    return (<Py_ssize_t>pos, batch_info_from_header(&h))


def producer_batches(buf, int64_t min_offset):
    """The headers of the complete batches of ``buf`` (whole batches read back from a log)
    that carry a producer id (control batches included, with their ``control_type``:
    they end transactions) and hold
    offsets >= ``min_offset``; and the offset after the last complete batch
    (``min_offset`` if none). Header walk only (no CRC): the state machines' replay,
    where batches without a producer id (most, for plain producers) cost no Python."""
    cdef Py_buffer view
    cdef pb_batch_header h
    cdef Py_ssize_t pos = 0
    cdef Py_ssize_t size
    cdef int64_t next_offset = min_offset
    cdef int64_t last
    cdef BatchInfo info
    found = []
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        while view.len - pos >= PB_BATCH_HEADER_SIZE:
            if pb_read_header(<const uint8_t *>view.buf + pos, <size_t>(view.len - pos), &h):
                break
            size = <Py_ssize_t>h.batch_length + 12
            if size > view.len - pos:
                break
            last = h.base_offset + h.last_offset_delta
            if last >= min_offset:
                if h.producer_id >= 0:
                    info = batch_info_from_header(&h)
                    _read_control_type(info, <const uint8_t *>view.buf + pos, view.len - pos)
                    found.append(info)
                next_offset = last + 1
            pos += size
    finally:
        PyBuffer_Release(&view)
    return found, next_offset


def find_timestamp(buf, Py_ssize_t start, Py_ssize_t end, int64_t target_ts,
                   Py_ssize_t max_decompressed_size=DEFAULT_MAX_DECOMPRESSED):
    """(position, offset, timestamp) of the first record with timestamp >= ``target_ts``
    in ``buf[start:end]``, or None (Kafka's LogSegment.findOffsetByTimestamp).

    Batches are skipped by their maxTimestamp; inside the first candidate the records are
    walked natively (a compressed batch is decompressed first). LogAppendTime batches
    answer with their base offset and maxTimestamp, as every record carries it.
    """
    cdef Py_buffer view
    cdef pb_batch_header h
    cdef size_t pos = 0
    cdef Py_ssize_t p = start
    cdef int rc
    cdef int32_t delta = 0
    cdef int64_t ts = 0
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        _check_range(start, end, view.len)
        while True:
            rc = pb_find_timestamp(<const uint8_t *>view.buf, <size_t>p, <size_t>end,
                                   target_ts, &pos, &h)
            if rc < 0:
                _raise(rc, <Py_ssize_t>pos)
            if rc == 0:
                return None
            if h.attributes & PB_ATTR_LOG_APPEND_TIME:
                return (<Py_ssize_t>pos, h.base_offset, h.max_timestamp)
            rc = _find_in_batch(&h, buf, <const uint8_t *>view.buf, <Py_ssize_t>pos, target_ts,
                                max_decompressed_size, &delta, &ts)
            if rc:
                return (<Py_ssize_t>pos, h.base_offset + delta, ts)
            # maxTimestamp promised a record that is not there: keep looking after it.
            p = <Py_ssize_t>pos + h.batch_length + PB_LOG_OVERHEAD
    finally:
        PyBuffer_Release(&view)


cdef int _find_in_batch(const pb_batch_header *h, object buf, const uint8_t *base,
                        Py_ssize_t position, int64_t target_ts, Py_ssize_t limit,
                        int32_t *delta, int64_t *ts) except -1:
    cdef Py_ssize_t size = <Py_ssize_t>h.batch_length + PB_LOG_OVERHEAD
    cdef const uint8_t *batch = base + position
    cdef Py_buffer view
    cdef int rc
    if h.attributes & PB_ATTR_COMPRESSION_MASK == 0:
        rc = pb_records_find_timestamp(batch + PB_BATCH_HEADER_SIZE,
                                       <size_t>(size - PB_BATCH_HEADER_SIZE), h.records_count,
                                       h.first_timestamp, target_ts, delta, ts)
    else:
        data = _decompress_section(h, buf, position, limit)
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            rc = pb_records_find_timestamp(<const uint8_t *>view.buf, <size_t>view.len,
                                           h.records_count, h.first_timestamp, target_ts,
                                           delta, ts)
        finally:
            PyBuffer_Release(&view)
    if rc < 0:
        _raise(rc, 0)
    return rc


def decode_records(batch_buf, Py_ssize_t max_decompressed_size=DEFAULT_MAX_DECOMPRESSED):
    """All records of one batch as ``Record`` tuples (tools and tests; not a hot path).

    Checks the batch like ``validate_batch`` but accepts what a log stores: control
    batches, and the batches the log cleaner rewrote (fewer records than
    lastOffsetDelta + 1, offset deltas with gaps). Record timestamps of a LogAppendTime
    batch are its maxTimestamp.
    """
    cdef Py_buffer view
    cdef pb_batch_header h
    cdef int err
    cdef size_t pos = 0
    PyObject_GetBuffer(batch_buf, &view, PyBUF_SIMPLE)
    try:
        err = pb_check_batch(<const uint8_t *>view.buf, <size_t>view.len, &h)
        if not err and <Py_ssize_t>h.batch_length + PB_LOG_OVERHEAD != view.len:
            err = PB_ERR_BATCH_LENGTH
        if not err and h.records_count < 0:
            err = PB_ERR_COUNT
        if not err and h.attributes & PB_ATTR_COMPRESSION_MASK > 4:
            err = PB_ERR_UNSUPPORTED
        if err:
            _raise(err, 0)
        if h.attributes & PB_ATTR_COMPRESSION_MASK:
            data = _decompress_section(&h, batch_buf, 0, max_decompressed_size)
        else:
            data = PyBytes_FromStringAndSize(<char *>view.buf + PB_BATCH_HEADER_SIZE,
                                             view.len - PB_BATCH_HEADER_SIZE)
    finally:
        PyBuffer_Release(&view)
    return _decode_section(&h, data)


cdef list _decode_section(const pb_batch_header *h, object data):
    cdef Py_buffer view
    cdef pb_record r
    cdef const uint8_t *p
    cdef const uint8_t *end
    cdef const uint8_t *hp
    cdef const uint8_t *hk
    cdef const uint8_t *hv
    cdef int32_t hklen, hvlen, i, j
    cdef int err
    cdef bint log_append = (h.attributes & PB_ATTR_LOG_APPEND_TIME) != 0
    out = []
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t *>view.buf
        end = p + view.len
        for i in range(h.records_count):
            err = pb_record_parse(&p, end, &r)
            if err:
                _raise(err, p - <const uint8_t *>view.buf)
            headers = []
            hp = r.headers
            for j in range(r.header_count):
                pb_header_next(&hp, r.headers_end, &hk, &hklen, &hv, &hvlen)
                headers.append((
                    (<const char *>hk)[:hklen].decode("utf-8", "surrogateescape"),
                    None if hvlen < 0 else (<const char *>hv)[:hvlen]))
            out.append(Record(
                h.base_offset + r.offset_delta,
                h.max_timestamp if log_append else
                <int64_t>(<unsigned long long>h.first_timestamp +
                          <unsigned long long>r.timestamp_delta),
                None if r.key_len < 0 else (<const char *>r.key)[:r.key_len],
                None if r.value_len < 0 else (<const char *>r.value)[:r.value_len],
                headers))
        if p != end:
            _raise(PB_ERR_TRAILING, p - <const uint8_t *>view.buf)
    finally:
        PyBuffer_Release(&view)
    return out


# ---- encoding ----

cdef enum:
    MAX_VIEWS = 16


cdef class _Views:
    """Py_buffers held for the duration of one encode call; released on every path."""
    cdef Py_buffer views[MAX_VIEWS]
    cdef int n

    cdef Py_buffer *get(self, obj, int align) except NULL:
        if self.n == MAX_VIEWS:
            raise ValueError("too many buffers")
        PyObject_GetBuffer(obj, &self.views[self.n], PyBUF_SIMPLE)
        self.n += 1
        if align > 1 and (<uintptr_t>self.views[self.n - 1].buf) % align:
            raise ValueError(f"buffer must be {align}-byte aligned (Arrow buffers are)")
        return &self.views[self.n - 1]

    cdef void release(self):
        while self.n:
            self.n -= 1
            PyBuffer_Release(&self.views[self.n])

    def __dealloc__(self):
        self.release()


cdef int _column(_Views views, object spec, int64_t count, pb_column *col) except -1:
    """Fill ``col`` from ``(offsets, data[, validity[, validity_offset]])`` or None."""
    cdef Py_buffer *v
    cdef int64_t bits
    col.offsets = NULL
    col.data = NULL
    col.data_len = 0
    col.validity = NULL
    col.validity_offset = 0
    col.length = 0
    if spec is None:
        return 0
    spec = tuple(spec)
    if not 2 <= len(spec) <= 4:
        raise ValueError("a column is (offsets, data[, validity[, validity_offset]])")
    v = views.get(spec[0], 4)
    col.offsets = <const int32_t *>v.buf
    col.length = v.len // 4 - 1
    v = views.get(spec[1], 1)
    col.data = <const uint8_t *>v.buf
    col.data_len = <size_t>v.len
    if len(spec) > 2 and spec[2] is not None:
        v = views.get(spec[2], 1)
        col.validity = <const uint8_t *>v.buf
        col.validity_offset = spec[3] if len(spec) > 3 else 0
        if col.validity_offset < 0:
            raise ValueError("validity_offset must be >= 0")
        bits = v.len * 8 - col.validity_offset
        if bits < col.length:
            col.length = bits
    if col.length < count:
        raise ValueError(f"column buffers describe {col.length} entries, need {count}")
    return 0


cdef int _input(_Views views, pb_encode_input *inp, Py_ssize_t count, values, keys,
                timestamps, headers, rows) except -1:
    """Fill ``inp`` from the arguments of ``encode_batch_columns`` (its docstring)."""
    cdef Py_buffer *v
    cdef Py_ssize_t needed
    if count < 1 or count > 0x7fffffff:
        raise ValueError("a batch holds 1 .. 2^31-1 records")
    inp.count = <int32_t>count
    inp.timestamps = NULL
    inp.header_offsets = NULL
    inp.rows = NULL
    inp.timestamps_length = inp.header_offsets_length = 0
    inp.default_timestamp = int(time.time() * 1000)
    if rows is not None:
        v = views.get(rows, 4)
        if v.len < count * 4:
            raise ValueError("rows buffer shorter than count int32 values")
        inp.rows = <const int32_t *>v.buf
    # With rows, the C encoder bounds-checks every row it reads against the columns.
    needed = 0 if inp.rows != NULL else count
    _column(views, values, needed, &inp.values)
    _column(views, keys, needed, &inp.keys)
    if timestamps is not None:
        v = views.get(timestamps, 8)
        if v.len < needed * 8:
            raise ValueError("timestamps buffer shorter than count int64 values")
        inp.timestamps = <const int64_t *>v.buf
        inp.timestamps_length = v.len // 8
    if headers is not None:
        list_offsets, key_column, value_column = headers
        v = views.get(list_offsets, 4)
        if v.len < (needed + 1) * 4:
            raise ValueError("header list offsets shorter than count + 1")
        inp.header_offsets = <const int32_t *>v.buf
        inp.header_offsets_length = v.len // 4
        _column(views, key_column, 0, &inp.header_keys)
        _column(views, value_column, 0, &inp.header_values)
    else:
        _column(views, None, 0, &inp.header_keys)
        _column(views, None, 0, &inp.header_values)
    return 0


cdef void _header(pb_batch_header *h, int64_t base_offset, int64_t producer_id,
                  int producer_epoch, int32_t base_sequence, int compression,
                  bint transactional, int32_t partition_leader_epoch) noexcept:
    """The header fields the caller chooses; counts and timestamps come from the records."""
    h.base_offset = base_offset
    h.partition_leader_epoch = partition_leader_epoch
    h.attributes = compression | (PB_ATTR_TRANSACTIONAL if transactional else 0)
    h.producer_id = producer_id
    h.producer_epoch = producer_epoch
    h.base_sequence = base_sequence


def encode_batch_columns(Py_ssize_t count, values, keys=None, timestamps=None, headers=None,
                         *, rows=None, int64_t base_offset=0, int64_t producer_id=-1,
                         int producer_epoch=-1, int32_t base_sequence=-1, int compression=0,
                         bint transactional=False, int32_t partition_leader_epoch=-1):
    """Encode ``count`` records from Arrow-layout columns into one batch (bytes).

    ``values`` / ``keys``: ``(offsets, data[, validity[, validity_offset]])`` buffers of an
    Arrow binary array: int32 offsets (count + 1, 4-byte aligned), data, and an optional
    validity bitmap (LSB first; a clear bit is a null) starting at bit ``validity_offset``.
    ``keys=None``: all keys null. ``timestamps``: int64 buffer of ``count`` milliseconds
    (8-byte aligned) or None for now. ``headers``: None or ``(list_offsets, key_column,
    value_column)`` as an Arrow list<struct<key, value>>: int32 ``list_offsets``
    (count + 1) select each record's entries of the two binary columns; keys not null.
    ``rows``: None, or an int32 buffer of ``count`` row numbers (4-byte aligned): record i
    is then row ``rows[i]`` of the columns, which may hold any number of rows (the
    producer encodes a partition's rows of an Arrow batch without gathering them; each
    row read is bounds-checked). This is the entry point of the Spark writer and the load generator: no per-record
    Python work.
    """
    cdef _Views views = _Views()
    cdef pb_encode_input inp
    cdef const char *why = NULL
    cdef int64_t size
    cdef pb_batch_header h
    if not 0 <= compression <= 4:
        raise UnsupportedCompressionError(f"unknown compression codec {compression}")
    try:
        _input(views, &inp, count, values, keys, timestamps, headers, rows)
        size = pb_encode_records_size(&inp, &why)
        if size < 0:
            raise ValueError(why.decode())
        _header(&h, base_offset, producer_id, producer_epoch, base_sequence, compression,
                transactional, partition_leader_epoch)
        h.last_offset_delta = inp.count - 1
        h.first_timestamp = inp.base_timestamp
        h.max_timestamp = inp.max_timestamp
        h.records_count = inp.count
        return _encode(&inp, size, &h)
    finally:
        views.release()


cdef bytes _encode(pb_encode_input *inp, int64_t size, pb_batch_header *h):
    cdef bytes out
    cdef bytes records
    cdef uint8_t *o
    cdef PyThreadState *state
    # A big batch is copied and checksummed without the GIL (the same threshold as the
    # validator's): the bulk producer's sender thread reads acks and sends meanwhile.
    cdef bint release = size >= RECORDS_GIL_THRESHOLD
    if h.attributes & PB_ATTR_COMPRESSION_MASK == 0:
        out = PyBytes_FromStringAndSize(NULL, PB_BATCH_HEADER_SIZE + size)
        o = <uint8_t *>PyBytes_AS_STRING(out)
        state = _crc.release_gil_if(release)
        pb_encode_records(o + PB_BATCH_HEADER_SIZE, inp)
        _crc.reacquire_gil(state)
    else:
        records = PyBytes_FromStringAndSize(NULL, size)
        state = _crc.release_gil_if(release)
        pb_encode_records(<uint8_t *>PyBytes_AS_STRING(records), inp)
        _crc.reacquire_gil(state)
        return _compressed(records, h)
    state = _crc.release_gil_if(release)
    pb_finish_batch(o, <size_t>len(out), h)
    _crc.reacquire_gil(state)
    return out


cdef bytes _compressed(records, pb_batch_header *h):
    """The batch of header ``h`` over ``records`` (a records section) compressed with the
    codec in h.attributes."""
    compressed = _compression.compress(h.attributes & PB_ATTR_COMPRESSION_MASK, records)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, PB_BATCH_HEADER_SIZE + len(compressed))
    cdef uint8_t *o = <uint8_t *>PyBytes_AS_STRING(out)
    memcpy(o + PB_BATCH_HEADER_SIZE, PyBytes_AS_STRING(compressed), len(compressed))
    pb_finish_batch(o, <size_t>len(out), h)
    return out


cdef class BatchBuilder:
    """One record batch filled from Arrow-layout columns over any number of ``append``
    calls, then ``finish``ed: the bulk producer keeps one open per partition, so its
    batches reach ``limit`` bytes whatever the size of the Arrow batches the rows came in
    (10,000-row Spark batches gave 4 partitions ~350 KB batches each before: 3x the
    batches and Produce requests, each with its per-request cost in the broker).

    The records go straight into ``buffer`` (a bytearray the caller may reuse once the
    finished batch is no longer needed: the producer pools them, so encoding does not
    allocate and fault in fresh pages for every batch). It grows, by reallocation, up to
    ``limit`` bytes, and beyond that only for a first record that needs it.
    Not thread-safe: one thread appends and finishes.
    """
    cdef pb_batch_builder b
    cdef bytearray buf
    cdef Py_ssize_t limit
    cdef bint finished

    def __cinit__(self, bytearray buffer not None, Py_ssize_t limit):
        if limit < PB_BATCH_HEADER_SIZE + 7:
            raise ValueError("limit below the smallest batch")
        if len(buffer) < PB_BATCH_HEADER_SIZE:
            buffer = _new_buffer(min(limit, 65536))
        self.buf = buffer
        self.limit = limit
        self.finished = False
        pb_builder_init(&self.b, <uint8_t *>PyByteArray_AS_STRING(buffer), len(buffer))

    @property
    def count(self) -> int:
        """Records appended so far."""
        return self.b.count

    @property
    def size(self) -> int:
        """Bytes of the batch so far, its header included."""
        return self.b.len

    @property
    def buffer(self) -> bytearray:
        """The buffer the batch is written in (for the caller's pool)."""
        return self.buf

    cdef int _grow(self, size_t need) except -1:
        """Move to a buffer of at least ``need`` bytes (a new one: the old one may be
        exported by a view of an earlier batch, so it is never resized)."""
        cdef size_t cap = max(need, min(<size_t>self.limit, 2 * self.b.capacity))
        cdef bytearray grown = _new_buffer(cap)
        memcpy(PyByteArray_AS_STRING(grown), self.b.buf, self.b.len)
        self.buf = grown
        self.b.buf = <uint8_t *>PyByteArray_AS_STRING(grown)
        self.b.capacity = cap
        return 0

    def append(self, Py_ssize_t count, values, keys=None, timestamps=None, headers=None,
               *, rows=None) -> int:
        """Append records from the columns (the arguments of ``encode_batch_columns``) in
        order while they fit; returns how many were. Fewer than ``count``: the batch is
        full, finish it and append the rest to the next. A bad row raises ValueError and
        appends nothing."""
        cdef _Views views = _Views()
        cdef pb_encode_input inp
        cdef const char *why = NULL
        cdef size_t need = 0
        cdef int64_t done = 0
        cdef pb_batch_builder saved = self.b
        cdef PyThreadState *state
        # ~1,000 rows is >= ~64 KiB of copying at Spark's usual row sizes: the size from
        # which the encoder lets the sender thread run (RECORDS_GIL_THRESHOLD).
        cdef bint release = count >= 1024
        if self.finished:
            raise ValueError("append to a finished batch")
        try:
            _input(views, &inp, count, values, keys, timestamps, headers, rows)
            while True:
                state = _crc.release_gil_if(release)
                done = pb_builder_append(&self.b, &inp, <int32_t>done, &need, &why)
                _crc.reacquire_gil(state)
                if done < 0:  # undo what earlier rounds (before a _grow) appended too
                    self.b = saved
                    raise ValueError(why.decode())
                if done == count:
                    return done
                if need:  # a first record larger than the buffer
                    self._grow(need)
                elif self.b.capacity < <size_t>self.limit and self.b.count < 0x7fffffff:
                    self._grow(0)
                else:
                    return done
                saved.buf, saved.capacity = self.b.buf, self.b.capacity
        finally:
            views.release()

    def finish(self, *, int64_t base_offset=0, int64_t producer_id=-1, int producer_epoch=-1,
               int32_t base_sequence=-1, int compression=0, bint transactional=False,
               int32_t partition_leader_epoch=-1):
        """The batch, header and CRC written: a memoryview of the buffer (uncompressed),
        or new bytes (compressed, the buffer free for reuse at once). At least one record
        must have been appended."""
        cdef pb_batch_header h
        if self.b.count < 1:
            raise ValueError("a batch needs at least one record")
        if not 0 <= compression <= 4:
            raise UnsupportedCompressionError(f"unknown compression codec {compression}")
        if self.finished:
            raise ValueError("batch already finished")
        self.finished = True
        _header(&h, base_offset, producer_id, producer_epoch, base_sequence, compression,
                transactional, partition_leader_epoch)
        if compression:
            h.last_offset_delta = self.b.count - 1
            h.first_timestamp = self.b.base_timestamp
            h.max_timestamp = self.b.max_timestamp
            h.records_count = self.b.count
            return _compressed(memoryview(self.buf)[PB_BATCH_HEADER_SIZE:self.b.len], &h)
        # With the GIL: the records were checksummed as they were appended, so this is
        # the header, its 40-byte CRC and the combine, ~1 us.
        pb_builder_finish(&self.b, &h)
        return memoryview(self.buf)[:self.b.len]


cdef bytearray _new_buffer(size_t size):
    """A bytearray of ``size`` bytes left uninitialised (the encoder writes every byte it
    hands out): zeroing a 1 MB buffer would touch every page once more."""
    return <bytearray>PyByteArray_FromStringAndSize(NULL, size)


cdef tuple _pack_column(list items):
    """Arrow-layout (offsets, data, validity) of a list of bytes-like or None."""
    import array
    offsets = array.array("i", [0])
    validity = bytearray((len(items) + 7) // 8)
    parts = []
    cdef int64_t total = 0
    cdef Py_ssize_t i
    cdef bint nulls = False
    for i, item in enumerate(items):
        if item is None:
            nulls = True
        else:
            validity[i >> 3] |= 1 << (i & 7)
            parts.append(item)
            total += len(item)
            if total > 0x7fffffff:
                raise ValueError("column data larger than 2 GiB")
        offsets.append(total)
    return (offsets, b"".join(parts), validity if nulls else None)


def encode_batch(values, keys=None, timestamps=None, headers=None, *, int64_t base_offset=0,
                 int64_t producer_id=-1, int producer_epoch=-1, int32_t base_sequence=-1,
                 int compression=0, bint transactional=False,
                 int32_t partition_leader_epoch=-1):
    """Encode one batch from lists (a convenience over ``encode_batch_columns``).

    ``values``: list of bytes-like or None; ``keys``: same length or None;
    ``timestamps``: list of int milliseconds or None (now); ``headers``: None or one list of
    ``(key str | bytes, value bytes | None)`` per record.
    """
    import array
    cdef Py_ssize_t n = len(values)
    if keys is not None and len(keys) != n:
        raise ValueError("keys and values differ in length")
    ts = None
    if timestamps is not None:
        if len(timestamps) != n:
            raise ValueError("timestamps and values differ in length")
        ts = array.array("q", timestamps)
    hdr = None
    if headers is not None:
        if len(headers) != n:
            raise ValueError("headers and values differ in length")
        list_offsets = array.array("i", [0])
        hkeys = []
        hvalues = []
        for record_headers in headers:
            for k, v in record_headers:
                hkeys.append(k.encode("utf-8") if isinstance(k, str) else k)
                hvalues.append(v)
            list_offsets.append(len(hkeys))
        hdr = (list_offsets, _pack_column(hkeys), _pack_column(hvalues))
    return encode_batch_columns(
        n, _pack_column(list(values)), None if keys is None else _pack_column(list(keys)),
        ts, hdr, base_offset=base_offset, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, compression=compression,
        transactional=transactional, partition_leader_epoch=partition_leader_epoch)


CONTROL_ABORT = 0   # Kafka's ControlRecordType
CONTROL_COMMIT = 1


cdef enum:
    _ATTRIBUTES_AT = 21  # the batch header's attributes field; the CRC covers from here on
    _CRC_AT = 17


def encode_control_batch(int64_t producer_id, int producer_epoch, int control_type,
                         int32_t coordinator_epoch, int64_t timestamp=-1, *,
                         int64_t base_offset=0, int32_t partition_leader_epoch=-1):
    """A transaction marker: a control batch (transactional and control attributes, no
    sequence) of one record, Kafka's control record: key version 0 int16 + type int16
    (``CONTROL_ABORT``, ``CONTROL_COMMIT``), value version 0 int16 + coordinator epoch
    int32. ``timestamp`` -1: now."""
    cdef bytearray batch
    cdef uint8_t *p
    cdef Py_ssize_t size
    cdef uint32_t crc
    key = bytes([0, 0, (control_type >> 8) & 0xFF, control_type & 0xFF])
    value = bytes([0, 0]) + (coordinator_epoch & 0xFFFFFFFF).to_bytes(4, "big")
    batch = bytearray(encode_batch([value], [key], None if timestamp < 0 else [timestamp],
                                   base_offset=base_offset, producer_id=producer_id,
                                   producer_epoch=producer_epoch, transactional=True,
                                   partition_leader_epoch=partition_leader_epoch))
    p = <uint8_t *>PyByteArray_AS_STRING(batch)
    size = len(batch)
    p[_ATTRIBUTES_AT + 1] |= PB_ATTR_CONTROL  # int16 big-endian: the flag is in the low byte
    crc = _crc.pb_crc32c(0, p + _ATTRIBUTES_AT, <size_t>(size - _ATTRIBUTES_AT))
    p[_CRC_AT] = (crc >> 24) & 0xFF
    p[_CRC_AT + 1] = (crc >> 16) & 0xFF
    p[_CRC_AT + 2] = (crc >> 8) & 0xFF
    p[_CRC_AT + 3] = crc & 0xFF
    return bytes(batch)


# ---- varints, exposed for the golden-table tests only ----

cdef extern from "pb_varint.h" nogil:
    int pb_read_varint(const uint8_t **pp, const uint8_t *end, int32_t *out)
    int pb_read_varlong(const uint8_t **pp, const uint8_t *end, int64_t *out)
    size_t pb_write_varint(uint8_t *p, int32_t v)
    size_t pb_write_varlong(uint8_t *p, int64_t v)
    size_t pb_varint_size(int32_t v)
    size_t pb_varlong_size(int64_t v)


def _encode_varint(int64_t value, bint long=False):
    """Kafka zigzag varint (or varlong) bytes of ``value`` (tests and benchmarks)."""
    cdef uint8_t out[10]
    cdef size_t n
    if long:
        n = pb_write_varlong(out, value)
        assert n == pb_varlong_size(value)
    else:
        if not -2**31 <= value < 2**31:
            raise OverflowError("varint holds an int32")
        n = pb_write_varint(out, <int32_t>value)
        assert n == pb_varint_size(<int32_t>value)
    return (<char *>out)[:n]


def _decode_varint(bytes data, bint long=False):
    """(value, bytes used) of the varint (or varlong) at the start of ``data`` (tests)."""
    cdef const uint8_t *start = <const uint8_t *>PyBytes_AS_STRING(data)
    cdef const uint8_t *p = start
    cdef int32_t v32
    cdef int64_t v64
    cdef int err
    if long:
        err = pb_read_varlong(&p, start + len(data), &v64)
    else:
        err = pb_read_varint(&p, start + len(data), &v32)
        v64 = v32
    if err:
        raise ValueError("truncated or overlong varint")
    return v64, <Py_ssize_t>(p - start)

# distutils: sources = csrc/pb_cleaner.c csrc/pb_records.c csrc/pb_crc32c.c
"""Log compaction's per-record work in C: the offset map and the copy of surviving records.

``OffsetMap(memory)`` is Kafka's SkimpyOffsetMap (csrc/pb_cleaner.h: 16-byte keyed hashes
in an open-addressing table of fixed memory). The log cleaner (pybroker/log/log_cleaner.py)
reads a log's segments in chunks and hands each chunk here:

- ``add_batches(chunk, start_offset)`` puts the keyed records at or after ``start_offset``
  of the complete batches in ``chunk`` into the map, and stops when the map is full;
- ``clean_batches(chunk, ...)`` writes the complete batches of ``chunk`` again with only
  their surviving records (the rules are in pb_cleaner.h).

Both follow transactions through a ``Transactions`` (the aborted ones of the cleaned range,
from the segments' ``.txnindex``; one per walk over the log, in offset order): batches of
aborted transactions put no key in the map and lose their records, and a marker stays
while its transaction has a batch left (``kept_markers`` lists those kept).

Both answer how many bytes of the chunk they consumed (whole batches; the rest goes at the
head of the next chunk). Uncompressed batches are handled entirely in C without the GIL; a
compressed batch costs one decompression (and, when some records go, one compression with
its codec) through ``compression``, nothing per record. Batches are CRC-checked as they
are read: a damaged one raises ``CorruptRecordError``.

Thread-safety: an ``OffsetMap`` belongs to one cleaner thread at a time.
"""

import os

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from pybroker._native cimport crc32c as _crc
from pybroker._native.cleaner cimport (
    PB_CLEAN_COMPRESSED,
    PB_CLEAN_NOMEM,
    pb_clean_args,
    pb_clean_batches,
    pb_clean_finish,
    pb_clean_keeps_empty,
    pb_clean_records,
    pb_clean_stats,
    pb_clean_write_empty,
    pb_aborted_txn,
    pb_filtered,
    pb_map_add_batches,
    pb_map_add_records,
    pb_map_clear,
    pb_map_free,
    pb_map_get,
    pb_map_init,
    pb_map_put,
    pb_offset_map,
    pb_outbuf,
    pb_outbuf_append,
    pb_outbuf_free,
    pb_outbuf_reserve,
    pb_siphash128,
    pb_txn_free,
    pb_txn_init,
    pb_txn_retained,
    pb_txn_tracker,
)
from pybroker._native.records cimport (
    DEFAULT_MAX_DECOMPRESSED,
    PB_ATTR_COMPRESSION_MASK,
    PB_BATCH_HEADER_SIZE,
    PB_ERR_INVALID,
    pb_batch_header,
    pb_err_message,
)

from pybroker._native import compression as _compression
from pybroker.errors import CorruptRecordError, InvalidRecordError

# This extension links its own copy of pb_crc32c.c: select its path as records.pyx does.
import pybroker._native.crc32c  # noqa: E402,F401
_crc.pb_crc32c_init(os.environ.get("PYBROKER_CRC32C", "").encode())

SLOT_BYTES = 24  # one map entry: a 16-byte hash and an offset


cdef int _raise(int rc, Py_ssize_t pos) except -1:
    if rc == PB_CLEAN_NOMEM:
        raise MemoryError("log cleaner buffers")
    msg = f"{pb_err_message(-rc).decode()} (at byte {pos} of the chunk)"
    if -rc >= PB_ERR_INVALID:
        raise InvalidRecordError(msg)
    raise CorruptRecordError(msg)


cdef object _records_section(object chunk, const pb_batch_header *h, Py_ssize_t pos):
    """The decompressed records section of the compressed batch at ``pos``."""
    view = memoryview(chunk).cast("B")
    end = pos + h.batch_length + 12
    return _compression.decompress(h.attributes & PB_ATTR_COMPRESSION_MASK,
                                   view[pos + PB_BATCH_HEADER_SIZE:end],
                                   DEFAULT_MAX_DECOMPRESSED)


def siphash128(key, data):
    """SipHash-2-4 with 128-bit output as ``(low, high)`` words (tests check it against
    the reference vectors)."""
    cdef uint64_t out[2]
    cdef bytes k = bytes(key)
    cdef bytes d = bytes(data)
    if len(k) != 16:
        raise ValueError("a SipHash key is 16 bytes")
    k0 = int.from_bytes(k[:8], "little")
    k1 = int.from_bytes(k[8:], "little")
    pb_siphash128(k0, k1, <const uint8_t *><const char *>d, len(d), out)
    return out[0], out[1]


cdef class CleanedChunk:
    """What ``clean_batches`` made of a chunk."""
    cdef readonly Py_ssize_t consumed       # bytes of the chunk read (whole batches)
    cdef readonly bytes data                # the cleaned batches
    cdef readonly int64_t records_read
    cdef readonly int64_t records_retained


cdef class Transactions:
    """The transactions met by one walk over a log (see module doc). ``aborted``: the
    aborted transactions of the walked range as ``(producer id, first offset, marker
    offset, ...)`` (an ``AbortedTxn``), in any order."""

    cdef pb_txn_tracker t

    def __cinit__(self, aborted=()):
        entries = sorted(aborted, key=lambda txn: txn[1])
        cdef pb_aborted_txn *array = <pb_aborted_txn *>malloc(
            sizeof(pb_aborted_txn) * max(len(entries), 1))
        if array == NULL:
            raise MemoryError()
        cdef Py_ssize_t i
        for i in range(len(entries)):
            array[i].producer_id = entries[i][0]
            array[i].first_offset = entries[i][1]
            array[i].last_offset = entries[i][2]
        pb_txn_init(&self.t, array, len(entries))

    def __dealloc__(self):
        pb_txn_free(&self.t)

    def kept_markers(self):
        """The offsets of the markers ``clean_batches`` kept since the last call."""
        kept = [self.t.kept_markers[i] for i in range(self.t.kept_count)]
        self.t.kept_count = 0
        return kept


cdef class OffsetMap:
    """Key -> latest offset over a log's dirty section, in ``memory`` bytes of slots (see
    module doc). ``load_factor``: the share of slots filled before the map says it is full
    (Kafka's ``log.cleaner.io.buffer.load.factor``, 0.9)."""

    cdef pb_offset_map m

    def __cinit__(self, size_t memory, double load_factor=0.9):
        seed = os.urandom(16)
        if pb_map_init(&self.m, memory, load_factor, int.from_bytes(seed[:8], "little"),
                       int.from_bytes(seed[8:], "little")) != 0:
            raise MemoryError(f"offset map of {memory} bytes")

    def __dealloc__(self):
        pb_map_free(&self.m)

    @property
    def size(self):
        """Keys in the map."""
        return self.m.count

    @property
    def slots(self):
        return self.m.capacity

    @property
    def max_size(self):
        """Keys the map takes before it is full."""
        return self.m.max_count

    @property
    def latest_offset(self):
        """The last offset the map covers (-1: none): records past it are kept."""
        return self.m.latest_offset

    @latest_offset.setter
    def latest_offset(self, int64_t offset):
        self.m.latest_offset = offset

    def clear(self):
        with nogil:
            pb_map_clear(&self.m)

    def put(self, key, int64_t offset):
        """Store ``offset`` for ``key``; False when the map is full (tests and tools)."""
        cdef bytes k = bytes(key)
        return pb_map_put(&self.m, <const uint8_t *><const char *>k, len(k), offset) == 0

    def get(self, key):
        """The offset stored for ``key``, -1 if none."""
        cdef bytes k = bytes(key)
        return pb_map_get(&self.m, <const uint8_t *><const char *>k, len(k))

    def add_batches(self, chunk, int64_t start_offset, Transactions transactions=None):
        """Put the keyed records at or after ``start_offset`` of the complete batches of
        ``chunk`` (but those of aborted ``transactions``). Returns ``(consumed, full)``:
        bytes of whole batches read, and whether the map filled up (then ``latest_offset``
        is the last offset put)."""
        if transactions is None:
            transactions = Transactions()
        cdef Py_buffer view
        cdef size_t pos = 0
        cdef int full = 0
        cdef int rc
        cdef pb_batch_header h
        cdef Py_buffer section
        PyObject_GetBuffer(chunk, &view, PyBUF_SIMPLE)
        try:
            while True:
                with nogil:
                    rc = pb_map_add_batches(&self.m, <const uint8_t *>view.buf,
                                            <size_t>view.len, &pos, start_offset,
                                            &transactions.t, &full, &h)
                if rc < 0:
                    _raise(rc, pos)
                if rc != PB_CLEAN_COMPRESSED:
                    break
                data = _records_section(chunk, &h, pos)
                PyObject_GetBuffer(data, &section, PyBUF_SIMPLE)
                try:
                    with nogil:
                        rc = pb_map_add_records(&self.m, &h, <const uint8_t *>section.buf,
                                                <size_t>section.len, start_offset)
                finally:
                    PyBuffer_Release(&section)
                if rc < 0:
                    _raise(rc, pos)
                if rc == 1:
                    full = 1
                    break
                if h.base_offset + h.last_offset_delta > self.m.latest_offset:
                    self.m.latest_offset = h.base_offset + h.last_offset_delta
                pos += <size_t>h.batch_length + 12
        finally:
            PyBuffer_Release(&view)
        return pos, bool(full)

    def clean_batches(self, chunk, int64_t now_ms, int64_t delete_retention_ms,
                      producers, int64_t round_end_offset, Transactions transactions=None):
        """The complete batches of ``chunk`` with only their surviving records
        (``CleanedChunk``). ``producers``: producer id -> offset of its last batch (its
        batch is kept, if only as an empty header); ``round_end_offset``: the offset after
        the cleaning round's last batch (that batch is kept too)."""
        if transactions is None:
            transactions = Transactions()
        cdef pb_clean_args args
        cdef pb_clean_stats stats
        cdef pb_outbuf out
        cdef pb_batch_header h
        cdef pb_filtered f
        cdef Py_buffer view
        cdef Py_buffer section
        cdef size_t pos = 0
        cdef size_t start
        cdef int rc
        cdef Py_ssize_t i
        cdef int64_t *pairs = NULL
        cdef CleanedChunk result = CleanedChunk.__new__(CleanedChunk)
        out.data = NULL
        out.len = out.cap = 0
        stats.records_read = stats.records_retained = 0
        ordered = sorted(producers.items())
        if ordered:
            pairs = <int64_t *>malloc(sizeof(int64_t) * 2 * len(ordered))
            if pairs == NULL:
                raise MemoryError()
            for i in range(len(ordered)):
                pairs[2 * i] = ordered[i][0]
                pairs[2 * i + 1] = ordered[i][1]
        args.map = &self.m
        args.now_ms = now_ms
        args.delete_retention_ms = delete_retention_ms
        args.producers = pairs
        args.producer_count = len(ordered)
        args.round_end_offset = round_end_offset
        args.txn = &transactions.t
        PyObject_GetBuffer(chunk, &view, PyBUF_SIMPLE)
        try:
            while True:
                with nogil:
                    rc = pb_clean_batches(&args, <const uint8_t *>view.buf, <size_t>view.len,
                                          &pos, &out, &stats, &h)
                if rc < 0:
                    _raise(rc, pos)
                if rc != PB_CLEAN_COMPRESSED:
                    break
                data = _records_section(chunk, &h, pos)
                start = out.len
                if pb_outbuf_reserve(&out, PB_BATCH_HEADER_SIZE):
                    raise MemoryError()
                out.len += PB_BATCH_HEADER_SIZE
                PyObject_GetBuffer(data, &section, PyBUF_SIMPLE)
                try:
                    with nogil:
                        rc = pb_clean_records(&args, &h, <const uint8_t *>section.buf,
                                              <size_t>section.len, 0, &out, &f)
                finally:
                    PyBuffer_Release(&section)
                if rc < 0:
                    _raise(rc, pos)
                stats.records_read += h.records_count
                stats.records_retained += f.retained
                if f.retained == 0:
                    out.len = start
                    rc = pb_clean_write_empty(&out, &h) if pb_clean_keeps_empty(&args, &h) else 0
                elif f.retained == h.records_count and not f.set_horizon:
                    out.len = start
                    rc = pb_outbuf_append(&out, <const uint8_t *>view.buf + pos,
                                          <size_t>h.batch_length + 12)
                else:
                    kept = PyBytes_FromStringAndSize(
                        <const char *>out.data + start + PB_BATCH_HEADER_SIZE,
                        out.len - start - PB_BATCH_HEADER_SIZE)
                    packed = _compression.compress(h.attributes & PB_ATTR_COMPRESSION_MASK, kept)
                    out.len = start + PB_BATCH_HEADER_SIZE
                    rc = pb_outbuf_append(&out, <const uint8_t *><const char *>packed,
                                          len(packed))
                    if rc == 0:
                        pb_clean_finish(&out, start, &h, &f)
                if rc == 0 and out.len != start:
                    rc = pb_txn_retained(&transactions.t, &h)
                if rc:
                    _raise(rc, pos)
                pos += <size_t>h.batch_length + 12
            result.consumed = pos
            result.data = PyBytes_FromStringAndSize(<const char *>out.data, out.len) \
                if out.len else b""
            result.records_read = stats.records_read
            result.records_retained = stats.records_retained
        finally:
            PyBuffer_Release(&view)
            pb_outbuf_free(&out)
            free(pairs)
        return result

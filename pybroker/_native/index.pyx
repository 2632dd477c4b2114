# distutils: sources = csrc/pb_index.c
"""Search Kafka's memory-mapped index files.

Formats (big-endian as Kafka writes them; packed entries, no header):

    offset index (.index)      8 bytes  relative offset u32 | position u32
    time index   (.timeindex)  12 bytes timestamp i64       | relative offset u32

``buf`` is any buffer-protocol object over the file (normally its ``mmap``), ``entries``
how many entries are valid (the file is preallocated, so its size says nothing). Keys are
non-decreasing. Searches look at the warm tail (last 8 KiB of entries) first, as Kafka's
``AbstractIndex.warmEntries()`` does: lookups cluster at the log end and those pages stay
resident.

Where a key repeats (only a damaged index has that), floor lookups answer the first of
the equal entries: the earliest position, so a forward scan from it cannot miss.

Why plain functions taking the buffer: acquiring a PEP 3118 buffer of an mmap is a few
tens of nanoseconds, well inside the one-microsecond budget per lookup, and it keeps the
caller free to remap the file (grow, trim) without a wrapper object to invalidate. No
typed memoryviews: creating one per call costs more than the search.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer

from pybroker._native.index cimport (
    PB_OFFSET_ENTRY_SIZE,
    PB_TIME_ENTRY_SIZE,
    pb_load_be32,
    pb_load_be64,
    pb_offset_index_ceiling,
    pb_offset_index_floor,
    pb_offset_index_position_floor,
    pb_time_index_ceiling,
    pb_time_index_floor,
    pb_time_index_offset_ceiling,
)

OFFSET_ENTRY_SIZE = PB_OFFSET_ENTRY_SIZE
TIME_ENTRY_SIZE = PB_TIME_ENTRY_SIZE


cdef int _acquire(object buf, Py_buffer *view, Py_ssize_t entries,
                  Py_ssize_t entry_size) except -1:
    """Get `buf`'s bytes and check `entries` fit in them; released by the caller."""
    PyObject_GetBuffer(buf, view, PyBUF_SIMPLE)
    if entries < 0 or entries > view.len // entry_size:
        PyBuffer_Release(view)
        raise ValueError(f"{entries} entries of {entry_size} bytes do not fit in a "
                         f"buffer of {view.len} bytes")
    return 0


cdef inline const unsigned char *_data(Py_buffer *view):
    return <const unsigned char *>view.buf


cdef inline tuple _time_entry(Py_buffer *view, Py_ssize_t slot):
    cdef const unsigned char *entry = _data(view) + slot * PB_TIME_ENTRY_SIZE
    return (<long long>pb_load_be64(entry), pb_load_be32(entry + 8))


def offset_index_lookup(object buf, Py_ssize_t entries, long long target_relative_offset):
    """Floor entry ``(relative_offset, position)``: the largest relative offset <= target.
    ``(0, 0)`` when the index is empty or the target precedes its first entry (the
    segment's start, as Kafka's ``OffsetIndex.lookup``)."""
    cdef Py_buffer view
    cdef ptrdiff_t slot
    cdef const unsigned char *entry
    _acquire(buf, &view, entries, PB_OFFSET_ENTRY_SIZE)
    try:
        slot = pb_offset_index_floor(_data(&view), <size_t>entries, target_relative_offset)
        if slot < 0:
            return (0, 0)
        entry = _data(&view) + slot * PB_OFFSET_ENTRY_SIZE
        return (pb_load_be32(entry), pb_load_be32(entry + 4))
    finally:
        PyBuffer_Release(&view)


def offset_index_position_floor(object buf, Py_ssize_t entries, long long position):
    """The largest indexed file position <= ``position``, 0 when none: a batch boundary
    at which a read bounded by bytes can stop (``LogSegment.read``)."""
    cdef Py_buffer view
    cdef ptrdiff_t slot
    _acquire(buf, &view, entries, PB_OFFSET_ENTRY_SIZE)
    try:
        slot = pb_offset_index_position_floor(_data(&view), <size_t>entries, position)
        if slot < 0:
            return 0
        return pb_load_be32(_data(&view) + slot * PB_OFFSET_ENTRY_SIZE + 4)
    finally:
        PyBuffer_Release(&view)


def time_index_lookup(object buf, Py_ssize_t entries, long long target_timestamp):
    """First entry ``(timestamp, relative_offset)`` with timestamp >= target, ``None``
    when every entry is older. The first record with timestamp >= target lies at or
    before that entry's offset; ``time_index_floor`` says where a forward scan starts."""
    cdef Py_buffer view
    cdef size_t slot
    _acquire(buf, &view, entries, PB_TIME_ENTRY_SIZE)
    try:
        slot = pb_time_index_ceiling(_data(&view), <size_t>entries, target_timestamp)
        return _time_entry(&view, slot) if slot < <size_t>entries else None
    finally:
        PyBuffer_Release(&view)


def time_index_floor(object buf, Py_ssize_t entries, long long target_timestamp):
    """Floor entry ``(timestamp, relative_offset)``: the largest timestamp <= target,
    ``None`` when the index is empty or the target precedes its first entry. This is
    Kafka's ``TimeIndex.lookup``: the scan for the first record with timestamp >= target
    starts at that offset (or at the segment start on ``None``)."""
    cdef Py_buffer view
    cdef ptrdiff_t slot
    _acquire(buf, &view, entries, PB_TIME_ENTRY_SIZE)
    try:
        slot = pb_time_index_floor(_data(&view), <size_t>entries, target_timestamp)
        return _time_entry(&view, slot) if slot >= 0 else None
    finally:
        PyBuffer_Release(&view)


def offset_index_entries_below(object buf, Py_ssize_t entries,
                               long long target_relative_offset):
    """How many leading entries have a relative offset < target: the entries an offset
    index keeps when the log is truncated to that offset."""
    cdef Py_buffer view
    _acquire(buf, &view, entries, PB_OFFSET_ENTRY_SIZE)
    try:
        return pb_offset_index_ceiling(_data(&view), <size_t>entries, target_relative_offset)
    finally:
        PyBuffer_Release(&view)


def time_index_entries_below(object buf, Py_ssize_t entries,
                             long long target_relative_offset):
    """How many leading time index entries have a relative offset < target: the
    entries a time index keeps when the log is truncated to that offset."""
    cdef Py_buffer view
    _acquire(buf, &view, entries, PB_TIME_ENTRY_SIZE)
    try:
        return pb_time_index_offset_ceiling(_data(&view), <size_t>entries,
                                            target_relative_offset)
    finally:
        PyBuffer_Release(&view)

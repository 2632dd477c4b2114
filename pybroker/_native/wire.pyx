"""Fast paths of the Kafka wire protocol: Produce requests in, Produce and Fetch responses out.

Produce request v3-v11 body (after the request header; v9+ are flexible: compact
strings/arrays/bytes as uvarint(length + 1) and a tagged-field buffer closing each struct):

    transactional_id:nullable string  acks:int16  timeout_ms:int32
    topic_data:[ name:string  partition_data:[ index:int32  records:nullable bytes ] ]

Fetch response v4-v17 (response header v1 with an empty tag buffer from v12):

    throttle_time_ms:int32  [v7+ error_code:int16 session_id:int32]
    responses:[ topic:string (v4-12) | topic_id:uuid (v13+)
      partitions:[ partition_index:int32 error_code:int16 high_watermark:int64
        last_stable_offset:int64 [v5+ log_start_offset:int64]
        aborted_transactions:nullable [producer_id:int64 first_offset:int64]
        [v11+ preferred_read_replica:int32] records:nullable bytes
        [v12+ tag 1: current_leader] ] ]  [v16+ tag 0: node_endpoints]

Which version has which field, and the newest version, come from the message specs
through the generated ``csrc/pb_protocol.h`` (``protocol.pxd``); the version numbers above
are for the reader. These agree byte for byte with the generic codec (``pybroker.net.protocol.codec``), which a
test checks; they exist because Produce and Fetch are the requests a busy broker spends its
time on. Work is per request and per partition: record bytes are never looked at (the
parser hands out views of the receive buffer; the builder emits ``FileRegion``s for
sendfile), so no Python or C loop here runs per record (only per record error, KIP-467's
``record_errors`` of a refused batch).

Tagged fields are skipped when parsing Produce (none are defined up to v11). Responses
write the KIP-951 leader hints when the caller gives them: a partition's
``current_leader`` (Produce v10+, Fetch v12+) and the top-level ``node_endpoints``
(Produce v10+, Fetch v16+), each only when it differs from its default, as the generic
codec writes tagged fields. Fetch's ``diverging_epoch`` and ``snapshot_id`` (for
followers of a KRaft-style log) are never written: this broker's followers truncate by
OffsetForLeaderEpoch.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy

from pybroker._native.protocol cimport (
    PB_FETCH_MAX_VERSION,
    PB_FETCH_RESPONSE_ERROR_CODE_FIRST,
    PB_FETCH_RESPONSE_FIRST_FLEXIBLE,
    PB_FETCH_RESPONSE_NODE_ENDPOINTS_FIRST,
    PB_FETCH_RESPONSE_NODE_ENDPOINTS_TAG,
    PB_FETCH_RESPONSE_RESPONSES_PARTITIONS_CURRENT_LEADER_FIRST,
    PB_FETCH_RESPONSE_RESPONSES_PARTITIONS_CURRENT_LEADER_TAG,
    PB_FETCH_RESPONSE_RESPONSES_PARTITIONS_LOG_START_OFFSET_FIRST,
    PB_FETCH_RESPONSE_RESPONSES_PARTITIONS_PREFERRED_READ_REPLICA_FIRST,
    PB_FETCH_RESPONSE_RESPONSES_TOPIC_ID_FIRST,
    PB_FETCH_RESPONSE_SESSION_ID_FIRST,
    PB_PRODUCE_MAX_VERSION,
    PB_PRODUCE_REQUEST_FIRST_FLEXIBLE,
    PB_PRODUCE_RESPONSE_FIRST_FLEXIBLE,
    PB_PRODUCE_RESPONSE_NODE_ENDPOINTS_FIRST,
    PB_PRODUCE_RESPONSE_NODE_ENDPOINTS_TAG,
    PB_PRODUCE_RESPONSE_RESPONSES_PARTITION_RESPONSES_CURRENT_LEADER_FIRST,
    PB_PRODUCE_RESPONSE_RESPONSES_PARTITION_RESPONSES_CURRENT_LEADER_TAG,
    PB_PRODUCE_RESPONSE_RESPONSES_PARTITION_RESPONSES_ERROR_MESSAGE_FIRST,
    PB_PRODUCE_RESPONSE_RESPONSES_PARTITION_RESPONSES_LOG_START_OFFSET_FIRST,
    PB_PRODUCE_RESPONSE_RESPONSES_PARTITION_RESPONSES_RECORD_ERRORS_FIRST,
)

import uuid as _uuid

from pybroker.errors import InvalidRequestError, UnsupportedVersionError
from pybroker.file_region import FileRegion

# The first versions whose responses carry KIP-951's node_endpoints, from the specs: the
# handlers fill the leader hints from there on, as Kafka does.
PRODUCE_NODE_ENDPOINTS_FIRST = PB_PRODUCE_RESPONSE_NODE_ENDPOINTS_FIRST
FETCH_NODE_ENDPOINTS_FIRST = PB_FETCH_RESPONSE_NODE_ENDPOINTS_FIRST

# --------------------------------------------------------------------------- parsing


cdef const unsigned char *wire_take(WireCursor *c, Py_ssize_t n) except NULL:
    cdef const unsigned char *p
    if n < 0 or n > c.end - c.pos:
        raise InvalidRequestError(f"truncated: need {n} bytes at {c.pos}, frame ends at {c.end}")
    p = c.data + c.pos
    c.pos += n
    return p


cdef inline int16_t _i16(const unsigned char *p) noexcept:
    return <int16_t>((<unsigned int>p[0] << 8) | p[1])


cdef inline int32_t _i32(const unsigned char *p) noexcept:
    return <int32_t>((<unsigned int>p[0] << 24) | (<unsigned int>p[1] << 16) |
                     (<unsigned int>p[2] << 8) | p[3])


cdef Py_ssize_t wire_uvarint(WireCursor *c) except -1:
    """An unsigned varint of at most 5 bytes whose value fits in an int32."""
    cdef uint64_t value = 0
    cdef int shift = 0
    cdef unsigned char b
    while True:
        b = wire_take(c, 1)[0]
        value |= (<uint64_t>(b & 0x7F)) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 28:
            raise InvalidRequestError("varint longer than 5 bytes")
    if value > 0x7FFFFFFF:
        raise InvalidRequestError("varint out of range")
    return <Py_ssize_t>value


cdef Py_ssize_t wire_length(WireCursor *c, bint flexible, bint wide) except -2:
    """A length or count (-1 for null) that never exceeds the bytes left in the frame."""
    cdef Py_ssize_t n
    if flexible:
        n = wire_uvarint(c) - 1
    elif wide:
        n = _i32(wire_take(c, 4))
    else:
        n = _i16(wire_take(c, 2))
    if n < -1:
        raise InvalidRequestError(f"negative length {n}")
    if n > c.end - c.pos:
        raise InvalidRequestError(f"length {n} exceeds the {c.end - c.pos} bytes left")
    return n


cdef int wire_skip_tagged(WireCursor *c) except -1:
    cdef Py_ssize_t count = wire_uvarint(c), i
    for i in range(count):
        wire_uvarint(c)  # tag
        wire_take(c, wire_uvarint(c))  # size: a plain uvarint, not length + 1
    return 0


cdef object _string(WireCursor *c, bint flexible, bint nullable):
    cdef Py_ssize_t n = wire_length(c, flexible, False)
    cdef const unsigned char *p
    if n < 0:
        if nullable:
            return None
        raise InvalidRequestError("null topic name")
    p = wire_take(c, n)
    try:
        return PyUnicode_DecodeUTF8(<const char *>p, n, NULL)
    except UnicodeDecodeError as e:
        raise InvalidRequestError("invalid utf-8 in a string") from e


def read_uvarint(object buf, Py_ssize_t pos, Py_ssize_t end):
    """``(value, next_pos)`` of the unsigned varint at ``pos``; ``end`` bounds the read.

    The generic codec's varint reader too, so the rules (5 bytes at most, int32 range)
    live in one place.
    """
    cdef Py_buffer view
    cdef WireCursor c
    cdef Py_ssize_t value
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        c.data = <const unsigned char *>view.buf
        c.pos = pos
        c.end = min(end, view.len)
        if pos < 0:
            raise InvalidRequestError(f"varint position {pos} outside the frame")
        value = wire_uvarint(&c)
        return value, c.pos
    finally:
        PyBuffer_Release(&view)


def parse_produce(object buf, Py_ssize_t offset, int version):
    """Parse a Produce request body at ``offset`` of ``buf`` (one frame, no size prefix).

    Returns ``(transactional_id, acks, timeout_ms, [(topic, [(partition, records)])])``
    where ``records`` is a memoryview slice of ``buf`` (no copy) or None. Raises
    ``InvalidRequestError`` on malformed input (never reading past ``buf``) and
    ``UnsupportedVersionError`` outside v3 to the newest version of the specs.
    """
    cdef Py_buffer view
    cdef WireCursor c
    cdef bint flex = version >= PB_PRODUCE_REQUEST_FIRST_FLEXIBLE
    cdef Py_ssize_t ntopics, nparts, i, j, n
    cdef int32_t partition
    cdef object transactional_id, topic, mv
    cdef list topics, parts
    if version < PRODUCE_MIN_VERSION or version > PB_PRODUCE_MAX_VERSION:
        raise UnsupportedVersionError(f"Produce v{version} has no fast path")
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if offset < 0 or offset > view.len:
            raise InvalidRequestError(f"body offset {offset} outside the frame")
        c.data = <const unsigned char *>view.buf
        c.pos = offset
        c.end = view.len
        # One memoryview of the whole frame; each partition's records is a slice of it.
        mv = memoryview(buf)
        if mv.itemsize != 1 or mv.ndim != 1:
            mv = mv.cast("B")
        transactional_id = _string(&c, flex, True)
        acks = _i16(wire_take(&c, 2))
        timeout_ms = _i32(wire_take(&c, 4))
        ntopics = wire_length(&c, flex, True)
        if ntopics < 0:
            raise InvalidRequestError("null topic_data")
        topics = []
        for i in range(ntopics):
            topic = _string(&c, flex, False)
            nparts = wire_length(&c, flex, True)
            if nparts < 0:
                raise InvalidRequestError("null partition_data")
            parts = []
            for j in range(nparts):
                partition = _i32(wire_take(&c, 4))
                n = wire_length(&c, flex, True)
                if n < 0:
                    parts.append((partition, None))
                else:
                    wire_take(&c, n)
                    parts.append((partition, mv[c.pos - n:c.pos]))
                if flex:
                    wire_skip_tagged(&c)
            if flex:
                wire_skip_tagged(&c)
            topics.append((topic, parts))
        if flex:
            wire_skip_tagged(&c)
        return transactional_id, acks, timeout_ms, topics
    finally:
        PyBuffer_Release(&view)


# --------------------------------------------------------------------------- building


cdef class _Segments:
    """Response bytes built in one growing C buffer, cut into segments at file regions.

    Not thread-safe; one instance per response, discarded when the response is built.
    """
    cdef unsigned char *buf
    cdef Py_ssize_t len, cap, total
    cdef list segments

    def __cinit__(self):
        self.cap = 512
        self.buf = <unsigned char *>PyMem_Malloc(self.cap)
        if self.buf == NULL:
            raise MemoryError()
        self.len = 0
        self.total = 0
        self.segments = []

    def __dealloc__(self):
        PyMem_Free(self.buf)

    cdef unsigned char *reserve(self, Py_ssize_t n) except NULL:
        cdef Py_ssize_t cap = self.cap
        cdef unsigned char *grown
        cdef unsigned char *p
        if self.len + n > cap:
            while self.len + n > cap:
                cap *= 2
            grown = <unsigned char *>PyMem_Realloc(self.buf, cap)
            if grown == NULL:
                raise MemoryError()
            self.buf = grown
            self.cap = cap
        p = self.buf + self.len
        self.len += n
        return p

    cdef int put(self, const void *data, Py_ssize_t n) except -1:
        memcpy(self.reserve(n), data, n)
        return 0

    cdef int i8(self, int v) except -1:
        self.reserve(1)[0] = <uint8_t>v
        return 0

    cdef int be(self, int64_t v, int nbytes) except -1:
        """``v`` as a big-endian two's complement integer of ``nbytes`` bytes."""
        cdef unsigned char *p = self.reserve(nbytes)
        cdef uint64_t u = <uint64_t>v
        cdef int k
        for k in range(nbytes - 1, -1, -1):
            p[k] = <uint8_t>u
            u >>= 8
        return 0

    cdef inline int i16(self, int64_t v) except -1:
        return self.be(v, 2)

    cdef inline int i32(self, int64_t v) except -1:
        return self.be(v, 4)

    cdef inline int i64(self, int64_t v) except -1:
        return self.be(v, 8)

    cdef int uvarint(self, uint64_t v) except -1:
        while v > 0x7F:
            self.i8(<int>((v & 0x7F) | 0x80))
            v >>= 7
        return self.i8(<int>v)

    cdef int length(self, Py_ssize_t n, bint flexible, bint wide) except -1:
        """A length or count, -1 for null, in the version's encoding."""
        if flexible:
            return self.uvarint(<uint64_t>(n + 1))
        if wide:
            return self.i32(n)
        return self.i16(<int>n)

    cdef int flush(self) except -1:
        if self.len:
            self.segments.append(PyBytes_FromStringAndSize(<char *>self.buf, self.len))
            self.total += self.len
            self.len = 0
        return 0

    cdef int region(self, object region) except -1:
        self.flush()
        self.segments.append(region)
        self.total += region.length
        return 0


cdef Py_ssize_t _records_size(object records) except -1:
    if isinstance(records, FileRegion):
        return records.length
    if isinstance(records, (list, tuple)):
        return sum([_records_size(r) for r in records])
    return memoryview(records).nbytes


cdef int _put_records(_Segments out, object records) except -1:
    cdef Py_buffer view
    if isinstance(records, FileRegion):
        return out.region(records)
    if isinstance(records, (list, tuple)):
        for r in records:
            _put_records(out, r)
        return 0
    PyObject_GetBuffer(records, &view, PyBUF_SIMPLE)
    try:
        out.put(view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return 0


cdef int _put_string(_Segments out, str s, bint flexible) except -1:
    cdef bytes data = s.encode("utf-8")
    out.length(len(data), flexible, False)
    return out.put(<const char *>data, len(data))


cdef int _put_nullable_string(_Segments out, object s, bint flexible) except -1:
    if s is None:
        return out.length(-1, flexible, False)
    return _put_string(out, s, flexible)


cdef int _put_leader_tags(_Segments out, object leader, int tag) except -1:
    """A partition's tagged fields: ``current_leader`` (``(leader_id, leader_epoch)``)
    under ``tag`` unless None or the default (-1, -1), as the generic codec omits it."""
    cdef int32_t leader_id, leader_epoch
    if leader is None:
        return out.i8(0)
    leader_id, leader_epoch = leader
    if leader_id == -1 and leader_epoch == -1:
        return out.i8(0)
    out.i8(1)  # one tagged field
    out.uvarint(<uint64_t>tag)
    out.uvarint(9)  # its size: two int32s and the struct's empty tag buffer
    out.i32(leader_id)
    out.i32(leader_epoch)
    return out.i8(0)


cdef int _put_node_endpoints_tags(_Segments out, object endpoints, int tag) except -1:
    """The response's tagged fields: ``node_endpoints`` (``[(node_id, host, port,
    rack)]``) under ``tag`` unless None or empty."""
    cdef _Segments value
    if not endpoints:
        return out.i8(0)
    value = _Segments()
    value.length(len(endpoints), True, True)
    for node_id, host, port, rack in endpoints:
        value.i32(node_id)
        _put_string(value, host, True)
        value.i32(port)
        _put_nullable_string(value, rack, True)
        value.i8(0)
    out.i8(1)  # one tagged field
    out.uvarint(<uint64_t>tag)
    out.uvarint(<uint64_t>value.len)
    return out.put(value.buf, value.len)


def build_fetch(int version, int32_t correlation_id, int32_t throttle_time_ms,
                int error_code, int32_t session_id, list topics, object node_endpoints=None):
    """Encode a whole Fetch response frame (v4 to the specs' newest), size prefix included.

    ``topics``: ``[(topic, [(partition_index, error_code, high_watermark,
    last_stable_offset, log_start_offset, aborted_transactions, records,
    current_leader)])]`` where ``topic`` is the name (v4-v12) or the topic id as
    ``uuid.UUID`` or 16 bytes (v13+), ``aborted_transactions`` None or
    ``[(producer_id, first_offset)]``, ``records`` None, a bytes-like object, a
    ``FileRegion`` or a list of those, and ``current_leader`` None or ``(leader_id,
    leader_epoch)`` (written v12+). ``node_endpoints``: None or ``[(node_id, host, port,
    rack)]`` (written v16+).

    Returns ``(segments, total_size)``: bytes and ``FileRegion``s in wire order and the
    number of bytes they make on the wire, prefix included.
    """
    cdef bint flex = version >= PB_FETCH_RESPONSE_FIRST_FLEXIBLE
    cdef bint leaders = version >= PB_FETCH_RESPONSE_RESPONSES_PARTITIONS_CURRENT_LEADER_FIRST
    cdef _Segments out = _Segments()
    cdef object topic, part, aborted, records, leader, first
    cdef bytes tid
    cdef list parts
    if version < FETCH_MIN_VERSION or version > PB_FETCH_MAX_VERSION:
        raise UnsupportedVersionError(f"Fetch v{version} has no fast path")
    out.i32(0)  # size prefix, patched below
    out.i32(correlation_id)
    if flex:
        out.i8(0)  # response header v1: no tagged fields
    out.i32(throttle_time_ms)
    if version >= PB_FETCH_RESPONSE_ERROR_CODE_FIRST:
        out.i16(error_code)
    if version >= PB_FETCH_RESPONSE_SESSION_ID_FIRST:
        out.i32(session_id)
    out.length(len(topics), flex, True)
    for topic, parts in topics:
        if version >= PB_FETCH_RESPONSE_RESPONSES_TOPIC_ID_FIRST:
            tid = topic.bytes if isinstance(topic, _uuid.UUID) else bytes(topic)
            if len(tid) != 16:
                raise ValueError(f"topic id must be 16 bytes, got {len(tid)}")
            out.put(<const char *>tid, 16)
        else:
            _put_string(out, topic, flex)
        out.length(len(parts), flex, True)
        for part in parts:
            partition_index, perr, hw, lso, log_start, aborted, records, leader = part
            out.i32(partition_index)
            out.i16(perr)
            out.i64(hw)
            out.i64(lso)
            if version >= PB_FETCH_RESPONSE_RESPONSES_PARTITIONS_LOG_START_OFFSET_FIRST:
                out.i64(log_start)
            if aborted is None:
                out.length(-1, flex, True)
            else:
                out.length(len(aborted), flex, True)
                for producer_id, first_offset in aborted:
                    out.i64(producer_id)
                    out.i64(first_offset)
                    if flex:
                        out.i8(0)
            if version >= PB_FETCH_RESPONSE_RESPONSES_PARTITIONS_PREFERRED_READ_REPLICA_FIRST:
                out.i32(-1)  # preferred_read_replica: none, read from the leader
            if records is None:
                out.length(-1, flex, True)
            else:
                out.length(_records_size(records), flex, True)
                _put_records(out, records)
            if leaders:
                _put_leader_tags(out, leader,
                                 PB_FETCH_RESPONSE_RESPONSES_PARTITIONS_CURRENT_LEADER_TAG)
            elif flex:
                out.i8(0)
        if flex:
            out.i8(0)
    if version >= PB_FETCH_RESPONSE_NODE_ENDPOINTS_FIRST:
        _put_node_endpoints_tags(out, node_endpoints, PB_FETCH_RESPONSE_NODE_ENDPOINTS_TAG)
    elif flex:
        out.i8(0)
    out.flush()
    # The first segment holds the header; patch the size now that the total is known.
    first = out.segments[0]
    out.segments[0] = (out.total - 4).to_bytes(4, "big", signed=True) + first[4:]
    return out.segments, out.total


cdef int _start_response(_Segments out, int32_t correlation_id, bint flexible) except -1:
    out.i32(0)  # size prefix, patched when the frame is complete
    out.i32(correlation_id)
    if flexible:
        out.i8(0)  # response header v1: no tagged fields
    return 0


cdef int _put_record_errors(_Segments out, object record_errors, bint flexible) except -1:
    """KIP-467's ``record_errors``: ``[(batch_index, batch_index_error_message)]``."""
    if record_errors is None:
        return out.length(0, flexible, True)
    out.length(len(record_errors), flexible, True)
    for batch_index, batch_message in record_errors:
        out.i32(batch_index)
        _put_nullable_string(out, batch_message, flexible)
        if flexible:
            out.i8(0)
    return 0


def build_produce_response(int version, int32_t correlation_id, int32_t throttle_time_ms,
                           list topics, object node_endpoints=None):
    """Encode a whole Produce response frame (v3 to the specs' newest), size prefix
    included, as bytes.

    ``topics``: ``[(name, [(partition_index, error_code, base_offset, log_append_time_ms,
    log_start_offset, error_message, record_errors, current_leader)])]``,
    ``error_message`` None or a string (v8+), ``record_errors`` None or
    ``[(batch_index, batch_index_error_message)]`` (KIP-467, v8+), ``current_leader``
    None or ``(leader_id, leader_epoch)`` (KIP-951, v10+). ``node_endpoints``: None or
    ``[(node_id, host, port, rack)]`` (v10+).

    Produce v3-v11 response (header v1, one empty tag byte, from v9)::

        responses:[ name:string  partition_responses:[ index:int32 error_code:int16
          base_offset:int64 log_append_time_ms:int64 [v5+ log_start_offset:int64]
          [v8+ record_errors:[batch_index:int32 batch_index_error_message:nullable
          string] error_message:nullable string] [v10+ tag 0: current_leader] ] ]
        throttle_time_ms:int32 [v10+ tag 0: node_endpoints]

    Why: the generic codec walks a field table per partition (~4 us a request); this is
    one pass over C integers.
    """
    cdef bint flex = version >= PB_PRODUCE_RESPONSE_FIRST_FLEXIBLE
    cdef bint leaders = (
        version >= PB_PRODUCE_RESPONSE_RESPONSES_PARTITION_RESPONSES_CURRENT_LEADER_FIRST)
    cdef _Segments out = _Segments()
    cdef object name, parts, part, message, record_errors, leader
    cdef unsigned char *p
    cdef uint64_t size
    if version < PRODUCE_MIN_VERSION or version > PB_PRODUCE_MAX_VERSION:
        raise UnsupportedVersionError(f"Produce v{version} has no fast path")
    _start_response(out, correlation_id, flex)
    out.length(len(topics), flex, True)
    for name, parts in topics:
        _put_string(out, name, flex)
        out.length(len(parts), flex, True)
        for part in parts:
            (partition_index, error_code, base_offset, append_time, log_start, message,
             record_errors, leader) = part
            out.i32(partition_index)
            out.i16(error_code)
            out.i64(base_offset)
            out.i64(append_time)
            if version >= PB_PRODUCE_RESPONSE_RESPONSES_PARTITION_RESPONSES_LOG_START_OFFSET_FIRST:
                out.i64(log_start)
            if version >= PB_PRODUCE_RESPONSE_RESPONSES_PARTITION_RESPONSES_RECORD_ERRORS_FIRST:
                _put_record_errors(out, record_errors, flex)
            if version >= PB_PRODUCE_RESPONSE_RESPONSES_PARTITION_RESPONSES_ERROR_MESSAGE_FIRST:
                _put_nullable_string(out, message, flex)
            if leaders:
                _put_leader_tags(
                    out, leader, PB_PRODUCE_RESPONSE_RESPONSES_PARTITION_RESPONSES_CURRENT_LEADER_TAG)
            elif flex:
                out.i8(0)
        if flex:
            out.i8(0)
    out.i32(throttle_time_ms)
    if version >= PB_PRODUCE_RESPONSE_NODE_ENDPOINTS_FIRST:
        _put_node_endpoints_tags(out, node_endpoints, PB_PRODUCE_RESPONSE_NODE_ENDPOINTS_TAG)
    elif flex:
        out.i8(0)
    size = <uint64_t>(out.len - 4)
    p = out.buf
    p[0] = <uint8_t>(size >> 24)
    p[1] = <uint8_t>(size >> 16)
    p[2] = <uint8_t>(size >> 8)
    p[3] = <uint8_t>size
    return PyBytes_FromStringAndSize(<char *>out.buf, out.len)

"""Kafka request headers, parsed once per request before anything else is known about it.

    request header v0: api_key:int16 api_version:int16 correlation_id:int32
                   v1: v0 + client_id:nullable_string (int16 length, never compact)
                   v2: v1 + tagged_fields (uvarint count; per field uvarint tag, uvarint
                       size, value)

The version follows from the API key and version (Kafka's generated
``ApiMessageType.requestHeaderVersion``): v2 for the flexible versions of the API, v1
otherwise and for API keys nobody knows, v0 for ControlledShutdown v0 only. A version newer
than the table counts as flexible when the API has flexible versions, so an ApiVersions
request from a newer client still gets its correlation id and body offset right (KIP-511).

Which versions are flexible comes from the message specs through the generated
``csrc/pb_protocol.h`` (``pb_first_flexible_request``), compiled in: the parser works
whatever was imported before it.

Why native: the Python reader cost 2-6 us per request (closures, a NamedTuple, a
``struct`` call per field), a visible share of a one-record produce round trip. This is
one bounded cursor walk and one tuple.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t

from pybroker._native.protocol cimport PB_API_KEY_LIMIT, pb_first_flexible_request
from pybroker._native.wire cimport WireCursor, wire_skip_tagged, wire_take

from pybroker.errors import InvalidRequestError

cdef enum:
    CONTROLLED_SHUTDOWN_KEY = 7


cpdef int request_header_version(int api_key, int api_version) noexcept:
    """2 for flexible requests, 1 otherwise (and for unknown keys), 0 for
    ControlledShutdown v0."""
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    # keys outside the specs (negative ones included) are unknown: header v1
    if 0 <= api_key < PB_API_KEY_LIMIT and api_version >= pb_first_flexible_request[api_key]:
        return 2
    return 1


cdef inline int _be16(const unsigned char *p) noexcept:
    return <int16_t>((<unsigned int>p[0] << 8) | p[1])


cdef inline int32_t _be32(const unsigned char *p) noexcept:
    return <int32_t>((<unsigned int>p[0] << 24) | (<unsigned int>p[1] << 16) |
                     (<unsigned int>p[2] << 8) | p[3])


def parse_request_header(object buf):
    """``(api_key, api_version, correlation_id, client_id, header_size)`` of the request
    header at the start of ``buf`` (one frame without its size prefix; any buffer).

    ``header_size`` is where the body starts. Raises ``InvalidRequestError`` when the
    header is truncated, its client id is not UTF-8 or its tagged fields are malformed.
    """
    cdef Py_buffer view
    cdef WireCursor c
    cdef const unsigned char *p
    cdef int api_key, api_version, hv
    cdef int32_t correlation_id
    cdef Py_ssize_t n
    cdef object client_id = None
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        c.data = <const unsigned char *>view.buf
        c.pos = 0
        c.end = view.len
        p = wire_take(&c, 8)
        api_key = _be16(p)
        api_version = _be16(p + 2)
        correlation_id = _be32(p + 4)
        hv = request_header_version(api_key, api_version)
        if hv >= 1:
            n = _be16(wire_take(&c, 2))
            if n < -1:
                raise InvalidRequestError(f"negative length {n}")
            if n >= 0:
                p = wire_take(&c, n)
                try:
                    client_id = PyUnicode_DecodeUTF8(<const char *>p, n, NULL)
                except UnicodeDecodeError as e:
                    raise InvalidRequestError("field client_id: invalid utf-8") from e
        if hv >= 2:
            wire_skip_tagged(&c)
        return api_key, api_version, correlation_id, client_id, c.pos
    finally:
        PyBuffer_Release(&view)

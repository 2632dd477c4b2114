# The C-level interface of wire.pyx (STYLE 1, 6): a bounded cursor over one request
# frame and the readers the Produce parser is built from.

cdef struct WireCursor:
    const unsigned char *data
    Py_ssize_t pos
    Py_ssize_t end

cdef enum:
    # The oldest versions served: Kafka 4 removed Produce v0-2 and Fetch v0-3 (KIP-896).
    # Every other version and field version comes from the specs (protocol.pxd).
    PRODUCE_MIN_VERSION = 3
    FETCH_MIN_VERSION = 4

cdef const unsigned char *wire_take(WireCursor *c, Py_ssize_t n) except NULL
cdef Py_ssize_t wire_uvarint(WireCursor *c) except -1
cdef Py_ssize_t wire_length(WireCursor *c, bint flexible, bint wide) except -2
cdef int wire_skip_tagged(WireCursor *c) except -1

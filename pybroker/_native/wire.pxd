# The C-level interface of wire.pyx (STYLE 1, 6): a bounded cursor over one request
# frame and the readers the Produce parser is built from.

cdef struct WireCursor:
    const unsigned char *data
    Py_ssize_t pos
    Py_ssize_t end

cdef enum:
    PRODUCE_MIN_VERSION = 3
    PRODUCE_MAX_VERSION = 11
    PRODUCE_FIRST_FLEXIBLE = 9
    FETCH_MIN_VERSION = 4
    FETCH_MAX_VERSION = 16
    FETCH_FIRST_FLEXIBLE = 12
    FETCH_FIRST_TOPIC_ID = 13

cdef const unsigned char *wire_take(WireCursor *c, Py_ssize_t n) except NULL
cdef Py_ssize_t wire_uvarint(WireCursor *c) except -1
cdef Py_ssize_t wire_length(WireCursor *c, bint flexible, bint wide) except -2
cdef int wire_skip_tagged(WireCursor *c) except -1

# C interface of csrc/pb_crc32c.h (STYLE 2): other modules cimport pb_crc32c from here.
from cpython.pystate cimport PyThreadState
from libc.stdint cimport uint32_t

cdef extern from "Python.h":
    PyThreadState *PyEval_SaveThread() nogil
    void PyEval_RestoreThread(PyThreadState *) nogil


cdef extern from "pb_crc32c.h" nogil:
    const char *pb_crc32c_init(const char *force)
    const char *pb_crc32c_implementation()
    uint32_t pb_crc32c(uint32_t crc, const void *buf, size_t len)


cdef enum:
    # Release the GIL only when the CRC of a buffer this size (~2.5 us at 25 GB/s) dwarfs
    # the cost of giving it up: an uncontended release/reacquire is ~0.1 us, but a
    # contended reacquire can wait for another thread's switch interval, which small
    # buffers (the common produce batch) must never pay.
    CRC_GIL_THRESHOLD = 65536


# Release the GIL around plain C work only when `cond` (a size threshold) says it pays;
# Cython's `with nogil(...)` takes only compile-time conditions. No Python in between.
cdef inline PyThreadState *release_gil_if(bint cond) noexcept:
    return PyEval_SaveThread() if cond else NULL


cdef inline void reacquire_gil(PyThreadState *state) noexcept:
    if state != NULL:
        PyEval_RestoreThread(state)

# distutils: sources = csrc/pb_crc32c.c
"""CRC32C (Castagnoli), the checksum of Kafka record batch v2.

The C side picks, at import, AVX-512 VPCLMULQDQ folding for large buffers
(``sse4.2-vpclmul``), SSE4.2 with three interleaved streams (``sse4.2-3way``),
single-stream SSE4.2 (``sse4.2``) or a portable table (``table``); csrc/pb_crc32c.c says
why. The environment variable ``PYBROKER_CRC32C`` forces one (a path the CPU lacks falls
back to ``table``); tests use it to check the paths agree. Thread-safe: no state changes after import.
"""

import os

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.pystate cimport PyThreadState
from libc.stdint cimport uint32_t

_NAMES = ("", "table", "sse4.2", "sse4.2-3way", "sse4.2-vpclmul")


cdef _select(str name):
    if name not in _NAMES:
        raise ValueError(f"PYBROKER_CRC32C must be one of {_NAMES[1:]}, not {name!r}")
    pb_crc32c_init(name.encode())


_select(os.environ.get("PYBROKER_CRC32C", ""))


def crc32c(buf, uint32_t crc=0):
    """CRC32C of any buffer-protocol object, continuing from ``crc``.

    ``crc32c(b"123456789") == 0xE3069283``; ``crc32c(b, crc32c(a)) == crc32c(a + b)``.
    """
    cdef Py_buffer view
    cdef uint32_t result
    cdef PyThreadState *state
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        state = release_gil_if(view.len >= CRC_GIL_THRESHOLD)
        result = pb_crc32c(crc, view.buf, <size_t>view.len)
        reacquire_gil(state)
    finally:
        PyBuffer_Release(&view)
    return result


def crc32c_implementation():
    """The path in use: ``"sse4.2-vpclmul"``, ``"sse4.2-3way"``, ``"sse4.2"`` or ``"table"``."""
    return pb_crc32c_implementation().decode()


def _select_implementation(str name):
    """For tests only: switch the path in this process (not thread-safe)."""
    _select(name)
    return crc32c_implementation()

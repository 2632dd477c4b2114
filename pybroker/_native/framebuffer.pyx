# cython: freethreading_compatible = False
"""Receive buffers for large request frames: memory that grows with the bytes that arrive.

A request frame is ``int32 size`` + ``size`` bytes, and the size is the client's word: a
connection that sends a size prefix of 100 MB and nothing more must not cost 100 MB. A
``FrameBuffer`` is an anonymous private mapping whose length is the frame's size but whose
*capacity* (the mapped bytes) starts small and grows with ``ensure`` as bytes are received,
by ``mremap`` (the kernel moves page table entries, never the bytes). Pages a client never
filled are never touched, so they cost no memory either way.

Reuse is decided by counting buffer exports (py-pgproto's ``WriteBuffer._view_count``,
STYLE 32), never by reference counts: ``exports`` is the number of live views
(memoryviews, ``Py_buffer`` held by native code). A buffer with no export can be recycled
or grown; ``ensure`` refuses to move memory while a view of it exists.

Not thread-safe: one thread at a time (the event loop; a network thread receiving into a
view it was handed holds an export, so the loop does not grow it meanwhile).
"""

from cpython.buffer cimport PyBuffer_FillInfo
from libc.errno cimport errno
from libc.string cimport strerror
from posix.mman cimport (
    MADV_DONTNEED,
    MAP_ANONYMOUS,
    MAP_FAILED,
    MAP_PRIVATE,
    PROT_READ,
    PROT_WRITE,
    madvise,
    mmap,
    munmap,
)


cdef extern from "sys/mman.h" nogil:
    void *mremap(void *old_addr, size_t old_len, size_t new_len, int flags, ...)
    enum: MREMAP_MAYMOVE

cdef extern from "unistd.h" nogil:
    long sysconf(int name)
    enum: _SC_PAGESIZE

cdef Py_ssize_t PAGE = sysconf(_SC_PAGESIZE)


cdef inline Py_ssize_t _round_up(Py_ssize_t n) noexcept:
    return (n + PAGE - 1) // PAGE * PAGE


cdef class FrameBuffer:
    """``FrameBuffer(length)``: a writable buffer of ``length`` bytes (contents undefined
    until written) backed by ``capacity`` mapped bytes; ``ensure(n)`` maps the first ``n``
    bytes before anything is written to them. A view shows the mapped part of the frame
    (``min(length, capacity)`` bytes): the whole frame once it has been ensured, which is
    when the receiver hands it on."""

    cdef char *_data
    cdef Py_ssize_t _capacity
    cdef Py_ssize_t _length
    cdef int _exports

    def __cinit__(self, Py_ssize_t length):
        if length < 0:
            raise ValueError(f"negative length {length}")
        self._data = NULL
        self._capacity = 0
        self._length = length
        self._exports = 0

    def __dealloc__(self):
        if self._data != NULL:
            munmap(self._data, self._capacity)

    @property
    def length(self) -> int:
        """Bytes of the frame: what views and ``len`` see."""
        return self._length

    @length.setter
    def length(self, Py_ssize_t value):
        if value < 0:
            raise ValueError(f"negative length {value}")
        if self._exports:
            raise BufferError("a FrameBuffer's length cannot change while it is exported")
        self._length = value

    @property
    def capacity(self) -> int:
        """Bytes mapped (a multiple of the page size): at most what was ever ensured."""
        return self._capacity

    @property
    def exports(self) -> int:
        """Live views of this buffer; 0 means nothing refers to its memory."""
        return self._exports

    def ensure(self, Py_ssize_t n):
        """Map at least the first ``n`` bytes (``n`` <= ``length``), growing the mapping if
        needed. Growth may move the memory, so it is refused while views exist."""
        cdef Py_ssize_t want
        cdef void *moved
        if n < 0 or n > self._length:
            raise ValueError(f"ensure({n}) outside a {self._length}-byte frame")
        if n <= self._capacity:
            return
        if self._exports:
            raise BufferError("a FrameBuffer cannot grow while it is exported")
        want = _round_up(n)
        if self._data == NULL:
            moved = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        else:
            moved = mremap(self._data, self._capacity, want, MREMAP_MAYMOVE)
        if moved == MAP_FAILED:
            raise MemoryError(f"mapping {want} bytes for a request frame: "
                              f"{strerror(errno).decode()}")
        self._data = <char *>moved
        self._capacity = want

    def discard_beyond(self, Py_ssize_t keep):
        """Give the pages past the first ``keep`` bytes back to the kernel (they read as
        zeros if touched again): a pooled buffer stops costing more than ``keep``."""
        cdef Py_ssize_t start = _round_up(max(keep, 0))
        if self._data != NULL and start < self._capacity:
            madvise(self._data + start, self._capacity - start, MADV_DONTNEED)

    def __len__(self):
        return self._length

    def __getbuffer__(self, Py_buffer *view, int flags):
        PyBuffer_FillInfo(view, self, self._data, min(self._length, self._capacity), 0, flags)
        self._exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self._exports -= 1

    def __repr__(self):
        return (f"<FrameBuffer length={self._length} capacity={self._capacity} "
                f"exports={self._exports}>")

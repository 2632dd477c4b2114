# distutils: sources = csrc/pb_zerocopy.c
"""Send file regions to sockets without copying them through Python.

``sendfile(out_fd, in_fd, offset, count)`` and ``SplicePipe().splice(...)`` move up to
``count`` bytes of ``in_fd`` from ``offset`` to the socket ``out_fd`` and return how many
went: the socket is non-blocking, so a full send buffer ends the call early (``0`` when
nothing fit) and the caller resumes at ``offset + sent`` once the socket is writable.
Errors raise ``OSError`` (``BrokenPipeError``, ``ConnectionResetError``, ...); a region
that ends before ``count`` bytes (the file was truncated under the caller) raises
``OSError(ENODATA)`` rather than returning 0, which would look like a full socket forever.

``zerocopy_implementation()`` says which of the two this process uses: both are checked
at first use on a memfd and a socket pair. sendfile is preferred (one system call per
chunk instead of two, what Kafka uses); ``PYBROKER_ZEROCOPY=splice|sendfile`` forces one.

The GIL is released during the system calls: a page-cache miss reads the disk.

For I/O threads (``pybroker.net``'s ``num.network.threads``) there are blocking forms on
the same non-blocking sockets: ``send_region_wait`` and ``recv_wait`` loop system call +
``poll`` with the GIL released until everything has moved, and stop early (returning
the bytes moved so far) when the socket stays not ready for ``patience_ms``, when they
have run ``slice_ms`` (if > 0) and would have to wait again, or, for a receive, when the
peer ends the stream; the caller's event loop then waits for the socket itself. Failures
raise ``OSError`` after counting what was sent.

Residency: ``region_resident(fd, offset, count, ahead)`` says whether a region can be sent
without waiting for the disk (all its pages cached and readable now) and starts
background reads (``POSIX_FADV_WILLNEED``) of what is missing: the region itself when it
is not resident, and the ``ahead`` bytes after it either way, so a consumer reading on
finds its next region read already. ``residency_implementation()`` says how the test is
done: ``"cachestat"`` (Linux 6.5+), ``"nowait"`` (``preadv2(RWF_NOWAIT)`` of the first
and last byte) or ``"none"`` (everything counts as resident); the first that works here
is used, and a kernel that refuses one at run time moves the process to the next.
``PYBROKER_RESIDENCY=cachestat|nowait|none`` starts lower, for tests of the fallbacks.
"""

import os

from libc.stdint cimport int64_t

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer

from pybroker._native.zerocopy cimport (
    PB_COPIED_BYTES,
    PB_COLD,
    PB_COLD_REGIONS,
    PB_ZERO_COPY_BYTES,
    pb_region_resident,
    pb_residency,
    pb_residency_get,
    pb_residency_set,
    pb_recv_wait,
    pb_send_region_wait,
    pb_sendfile,
    pb_splice,
    pb_splice_pipe_close,
    pb_splice_pipe_open,
    pb_zerocopy_count,
    pb_zerocopy_counter_value,
)

__all__ = ["COLD", "SplicePipe", "count_copied", "recv_wait", "region_resident",
           "residency_implementation", "send_region_wait", "sendfile", "zerocopy_counters",
           "zerocopy_implementation"]


cdef int _raise_errno(Py_ssize_t negative_errno, str context) except -1:
    """The one place an errno from pb_zerocopy.c becomes an exception (STYLE 13);
    ``OSError`` picks the subclass from the errno."""
    cdef int err = <int>-negative_errno
    raise OSError(err, f"{context}: {os.strerror(err)}")


cdef Py_ssize_t _check_region(int64_t offset, Py_ssize_t count) except -1:
    if offset < 0 or count < 0:
        raise ValueError(f"bad file region: offset {offset}, count {count}")
    return 0


def sendfile(int out_fd, int in_fd, int64_t offset, Py_ssize_t count):
    """Send ``count`` bytes of ``in_fd`` at ``offset`` to ``out_fd`` with sendfile(2);
    returns the bytes sent, 0 when the socket is full. ``in_fd``'s position is unused."""
    cdef ssize_t n
    _check_region(offset, count)
    with nogil:
        n = pb_sendfile(out_fd, in_fd, offset, <size_t>count)
    if n < 0:
        _raise_errno(n, "sendfile")
    pb_zerocopy_count(PB_ZERO_COPY_BYTES, <size_t>n)
    return n


cdef class SplicePipe:
    """A connection's pipe for splice(2): file -> pipe -> socket.

    Bytes the socket did not take stay in the pipe and go first on the next call, which
    must continue the same region (same file, ``offset + sent``); a call for any other
    place drops them. Not thread-safe: one per connection, used by its event loop.
    """

    def __cinit__(self):
        cdef int err = pb_splice_pipe_open(&self._pipe)
        if err < 0:
            _raise_errno(err, "splice pipe")

    def __dealloc__(self):
        pb_splice_pipe_close(&self._pipe)

    def splice(self, int out_fd, int in_fd, int64_t offset, Py_ssize_t count):
        """Send ``count`` bytes of ``in_fd`` at ``offset`` to ``out_fd``; returns the
        bytes sent, 0 when the socket is full."""
        cdef ssize_t n
        _check_region(offset, count)
        with nogil:
            n = pb_splice(&self._pipe, out_fd, in_fd, offset, <size_t>count)
        if n < 0:
            _raise_errno(n, "splice")
        pb_zerocopy_count(PB_ZERO_COPY_BYTES, <size_t>n)
        return n

    @property
    def pending(self):
        """Bytes read from the file into the pipe that the socket has not taken yet."""
        return self._pipe.pending

    @property
    def capacity(self):
        return self._pipe.capacity

    def close(self):
        pb_splice_pipe_close(&self._pipe)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def send_region_wait(int out_fd, int in_fd, int64_t offset, Py_ssize_t count,
                     int patience_ms, int slice_ms=0, SplicePipe pipe=None,
                     bint warm_only=False, Py_ssize_t ahead=0):
    """Send ``count`` bytes of ``in_fd`` at ``offset`` to the non-blocking socket
    ``out_fd``, sleeping in ``poll`` whenever it is full; returns the bytes sent, fewer
    than ``count`` only when the socket took nothing for ``patience_ms`` or the call used
    up ``slice_ms``. Through ``pipe`` with splice when given (the connection's pipe),
    else with sendfile. ``warm_only`` (a thread that must not wait for the disk): first
    ``region_resident(in_fd, offset, count, ahead)``, and ``COLD`` with nothing sent when
    the region is not resident."""
    cdef size_t moved = 0
    cdef int err
    cdef pb_splice_pipe *p = NULL
    _check_region(offset, count)
    _check_region(offset, ahead)
    if warm_only and not _residency_chosen:
        _choose_residency()
    if pipe is not None:
        p = &pipe._pipe
    with nogil:
        err = pb_send_region_wait(p, out_fd, in_fd, offset, <size_t>count, patience_ms,
                                  slice_ms, warm_only, <size_t>ahead, &moved)
    pb_zerocopy_count(PB_ZERO_COPY_BYTES, moved)
    if err == PB_COLD:
        return COLD
    if err < 0:
        _raise_errno(err, "splice" if p != NULL else "sendfile")
    return moved


def recv_wait(int fd, object buf, int patience_ms, int slice_ms=0):
    """Receive into all of the writable buffer ``buf`` from the non-blocking socket
    ``fd``, sleeping in ``poll`` whenever nothing is queued; returns the bytes received,
    fewer than ``len(buf)`` when the peer ended the stream, sent nothing for
    ``patience_ms`` or the call used up ``slice_ms``. ``buf`` stays exported (cannot be
    resized) during the call."""
    cdef Py_buffer view
    cdef size_t moved = 0
    cdef int err
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    try:
        with nogil:
            err = pb_recv_wait(fd, <char *>view.buf, <size_t>view.len, patience_ms, slice_ms,
                               &moved)
    finally:
        PyBuffer_Release(&view)
    if err < 0:
        _raise_errno(err, "recv")
    return moved


_RESIDENCY_NAMES = ("cachestat", "nowait", "none")  # in pb_residency's order
cdef bint _residency_chosen = False
COLD = -1


def region_resident(int fd, int64_t offset, Py_ssize_t count, Py_ssize_t ahead=0):
    """True when all of ``count`` bytes of ``fd`` at ``offset`` can be sent without
    waiting for the disk. Starts background reads of the region when it is not resident
    and of the ``ahead`` bytes after it in any case. Raises ``OSError`` for a bad fd."""
    cdef int resident
    _check_region(offset, count)
    _check_region(offset, ahead)
    if not _residency_chosen:
        _choose_residency()
    resident = pb_region_resident(fd, offset, <size_t>count, <size_t>ahead)
    if resident < 0:
        _raise_errno(resident, "residency")
    return resident == 1


def residency_implementation():
    """``"cachestat"``, ``"nowait"`` or ``"none"``: how this process tells resident
    regions from cold ones (after any fallback so far)."""
    if not _residency_chosen:
        _choose_residency()
    return _RESIDENCY_NAMES[<int>pb_residency_get()]


cdef _choose_residency():
    global _residency_chosen
    wanted = os.environ.get("PYBROKER_RESIDENCY", "")
    if wanted not in ("",) + _RESIDENCY_NAMES:
        raise ValueError(f"PYBROKER_RESIDENCY={wanted!r}: expected one of "
                         f"{', '.join(_RESIDENCY_NAMES)}")
    pb_residency_set(<pb_residency><int>_RESIDENCY_NAMES.index(wanted or "cachestat"))
    _residency_chosen = True


def count_copied(Py_ssize_t n):
    """Account ``n`` bytes the caller sent from user memory (headers, small responses,
    the fallback path), so the counters show what share of traffic went zero-copy."""
    if n < 0:
        raise ValueError(f"negative byte count {n}")
    pb_zerocopy_count(PB_COPIED_BYTES, <size_t>n)


def zerocopy_counters():
    """Process-wide totals: ``{"zero_copy_bytes": n, "copied_bytes": n,
    "cold_regions": n}`` (the last: pieces of file regions found not in the page cache)."""
    return {
        "zero_copy_bytes": pb_zerocopy_counter_value(PB_ZERO_COPY_BYTES),
        "copied_bytes": pb_zerocopy_counter_value(PB_COPIED_BYTES),
        "cold_regions": pb_zerocopy_counter_value(PB_COLD_REGIONS),
    }


cdef object _implementation = None


def zerocopy_implementation():
    """``"sendfile"`` or ``"splice"``: the path this process uses (checked once)."""
    global _implementation
    if _implementation is None:
        _implementation = _pick()
    return _implementation


cdef str _pick():
    wanted = os.environ.get("PYBROKER_ZEROCOPY", "")
    if wanted not in ("", "sendfile", "splice"):
        raise ValueError(f"PYBROKER_ZEROCOPY={wanted!r}: expected 'sendfile' or 'splice'")
    order = [wanted] if wanted else ["sendfile", "splice"]
    errors = []
    for kind in order:
        try:
            _probe(kind)
            return kind
        except OSError as exc:
            errors.append(f"{kind}: {exc}")
    raise OSError(f"no zero-copy path works here ({'; '.join(errors)})")


cdef _probe(str kind):
    """Move a few KiB from a memfd to a socket pair with `kind` and check the bytes.
    Calls the C functions directly, so probing does not show in the counters."""
    import socket
    cdef bytes data = os.urandom(12345)
    cdef ssize_t n
    cdef pb_splice_pipe pipe
    memfd = os.memfd_create("pybroker-zerocopy-probe", os.MFD_CLOEXEC)
    a, b = socket.socketpair()
    try:
        os.write(memfd, data)
        if kind == "sendfile":
            n = pb_sendfile(a.fileno(), memfd, 0, len(data))
        else:
            err = pb_splice_pipe_open(&pipe)
            if err < 0:
                _raise_errno(err, "splice pipe")
            n = pb_splice(&pipe, a.fileno(), memfd, 0, len(data))
            pb_splice_pipe_close(&pipe)
        if n < 0:
            _raise_errno(n, kind)
        got = b""
        while len(got) < n:
            got += b.recv(n - len(got))
        if n != len(data) or got != data:
            raise OSError(f"{kind} moved {n} bytes, not the {len(data)} written")
    finally:
        os.close(memfd)
        a.close()
        b.close()

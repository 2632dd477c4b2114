"""Appends to log segment files: a list of buffers written at an explicit position.

Two paths, picked once per process by ``append_implementation()``:

- ``io_uring``: one IORING_OP_WRITEV per append (per 1024 buffers), submitted and waited
  for on the calling thread's own ring (liburing through cffi, ``_uring_build.py``).
- ``pwritev``: the plain system call. Used when io_uring cannot be set up (ENOSYS on old
  kernels, EPERM under seccomp or ``kernel.io_uring_disabled``), or when the environment
  says ``PYBROKER_APPEND=pwritev``. ``PYBROKER_APPEND=io_uring`` insists on io_uring and
  fails loudly if it is unavailable.

Either way the call blocks until the bytes are in the page cache (durability is
``fsync``'s business, left to the log's flush policy) and the GIL is released meanwhile.
Short writes are continued until everything is written; an error raises ``OSError``
(its errno subclass), and bytes before the failure may already be in the file: the log
truncates back to its last good position, as after a crash.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence

from pybroker._native._uring import ffi, lib

__all__ = ["Appender", "append_implementation"]

_implementation: str | None = None


def append_implementation() -> str:
    """``"io_uring"`` or ``"pwritev"``: the path Appenders of this process use."""
    global _implementation
    if _implementation is None:
        _implementation = _pick()
    return _implementation


def _pick() -> str:
    wanted = os.environ.get("PYBROKER_APPEND", "")
    if wanted == "pwritev":
        return "pwritev"
    if wanted not in ("", "io_uring"):
        raise ValueError(f"PYBROKER_APPEND={wanted!r}: expected 'io_uring' or 'pwritev'")
    err = lib.pb_uring_probe()
    if err == 0:
        return "io_uring"
    if wanted == "io_uring":
        raise _os_error(-err, "io_uring requested by PYBROKER_APPEND but unavailable")
    return "pwritev"


def _os_error(errno: int, context: str) -> OSError:
    """The one place an errno from native code becomes an exception (STYLE 13):
    ``OSError`` picks the subclass (``FileNotFoundError``, ...) from the errno."""
    return OSError(errno, f"{context}: {os.strerror(errno)}")


class Appender:
    """Writes buffers at positions of one open file descriptor.

    The Appender does not own ``fd``: ``close()`` only stops further appends; whoever
    opened the file closes it. Thread-safety: appends from several threads are safe
    (each thread submits on its own ring); appends to overlapping ranges are the
    caller's problem, as with ``pwrite``.
    """

    __slots__ = ("_fd", "_uring", "kind")

    def __init__(self, fd: int, kind: str | None = None) -> None:
        """``kind`` overrides the process-wide choice (tests and benchmarks compare the
        two paths in one process); ``"io_uring"`` raises if io_uring is unavailable."""
        if kind not in (None, "io_uring", "pwritev"):
            raise ValueError(f"unknown append kind {kind!r}")
        if fd < 0:
            raise ValueError(f"bad file descriptor {fd}")
        # Positions only mean something on a regular file; on a pipe or socket io_uring
        # would ignore the position and write anyway, while pwritev fails (ESPIPE).
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _os_error(errno.ESPIPE, f"fd {fd} is not a regular file")
        if kind is None:
            kind = append_implementation()
        elif kind == "io_uring" and (err := lib.pb_uring_probe()):
            raise _os_error(-err, "io_uring unavailable")
        self._fd = fd
        self.kind = kind
        self._uring = kind == "io_uring"

    @property
    def fd(self) -> int:
        return self._fd

    def append(self, buffers: Sequence[object], position: int) -> int:
        """Write ``buffers`` (bytes-like, contiguous) back to back from ``position``;
        returns the number of bytes written, always their total length."""
        if self._fd < 0:
            raise ValueError("append on a closed Appender")
        if len(buffers) == 1:  # the common case (one batch): no iovec array to build
            buf = buffers[0]
            # bytes go to a `char *` parameter as they are; anything else gets pinned
            view = buf if type(buf) is bytes else ffi.from_buffer(buf)
            written = lib.pb_append_one(self._fd, view, len(view), position, self._uring)
        else:
            # from_buffer pins each buffer (no copy) until `views` goes away after the call
            views = [ffi.from_buffer(b) for b in buffers]
            iov = ffi.new("struct iovec[]", [(v, len(v)) for v in views])
            written = lib.pb_append(self._fd, iov, len(views), position, self._uring)
        if written < 0:
            raise _os_error(-written, f"append at {position} to fd {self._fd}")
        return written

    def close(self) -> None:
        self._fd = -1

    def __enter__(self) -> Appender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""Appends to log segment files: a list of buffers written at an explicit position.

Two paths, picked once per process by ``append_implementation()``:

- ``io_uring``: one IORING_OP_WRITEV per append (per 1024 buffers), submitted and waited
  for on the calling thread's own ring (liburing through cffi, ``_uring_build.py``).
- ``pwritev``: the plain system call. Used when io_uring cannot be set up (ENOSYS on old
  kernels, EPERM under seccomp or ``kernel.io_uring_disabled``), or when the environment
  says ``PYBROKER_APPEND=pwritev``. ``PYBROKER_APPEND=io_uring`` insists on io_uring and
  fails loudly if it is unavailable.

Either way ``append`` blocks until the bytes are in the page cache (durability is
``fsync``'s business, left to the log's flush policy) and the GIL is released meanwhile.
Short writes are continued until everything is written; an error raises ``OSError``
(its errno subclass), and bytes before the failure may already be in the file: the log
truncates back to its last good position, as after a crash.

``append_async`` is the event loop's way: the write is queued on the loop thread's
asynchronous ring and the coroutine resumes when its completion arrives (an eventfd the
loop watches). Why: buffered writes to ext4 and tmpfs cannot complete inline, io_uring
gives each to an ``iou-wrk`` kernel thread, and a synchronous wait left the loop idle
for the whole page-cache copy (one profile: 64-82% of the broker's samples in those
workers, the loop waiting). Now the loop receives and validates the next requests while
the kernel copies, and writes to different files run in parallel workers. All entries
queued in one loop iteration go to the kernel in one ``io_uring_enter`` (a produce
request to many partitions is one submission). With ``pwritev`` (or more than 1024
buffers, or fewer than ``ASYNC_MIN_BYTES`` bytes) ``append_async`` writes synchronously,
like ``append``.

Small single-buffer appends of an Appender that took the process choice (``kind=None``,
what log segments use) are one ``pwrite`` on the calling thread even where io_uring is
the path: a buffered io_uring write cannot complete inline on this kernel, so a
synchronous one is a hand-off to an ``iou-wrk`` thread and back, which cost 3.2 us
against 1.0 us for a 170-byte append on an idle machine and up to 58 us on a busy one,
where that worker waits for a CPU (``/tmp``-style measurement: 20,000 appends, p50).
An explicit ``kind`` always takes its own path (tests and benchmarks compare them).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import stat
import threading
from collections.abc import Sequence
from typing import Any

from pybroker._native._uring import ffi, lib

__all__ = ["Appender", "append_implementation"]

log = logging.getLogger("pybroker.log")

_implementation: str | None = None
_IOV_MAX = 1024      # more buffers than this: the synchronous path splits them
_REAP_BATCH = 64     # completions collected per native call
# Below this many bytes append_async writes synchronously (one pwrite for a single
# buffer, see the module doc): the page-cache copy is a few microseconds, and the loop
# round trip through the eventfd (epoll wake-up, reap, futures) cost more than it saved:
# one-record produce p50 32 us waiting, 48-59 us through the eventfd (bench.single_node).
# Above it the copy dominates and overlapping it with the loop's work is what pays.
ASYNC_MIN_BYTES = 64 * 1024


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

    __slots__ = ("_fd", "_uring", "kind", "_in_flight", "_pwrite_small")

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
        self._pwrite_small = kind is None  # see the module doc
        if kind is None:
            kind = append_implementation()
        elif kind == "io_uring" and (err := lib.pb_uring_probe()):
            raise _os_error(-err, "io_uring unavailable")
        self._fd = fd
        self.kind = kind
        self._uring = kind == "io_uring"
        self._in_flight: asyncio.Future[int] | None = None

    @property
    def fd(self) -> int:
        return self._fd

    def append(self, buffers: Sequence[object], position: int) -> int:
        """Write ``buffers`` (bytes-like, contiguous) back to back from ``position``;
        returns the number of bytes written, always their total length."""
        if self._fd < 0:
            raise ValueError("append on a closed Appender")
        in_flight = self._in_flight  # `writing`, inline: this runs once per produce
        if in_flight is not None and not in_flight.done():
            # same file, maybe the same range: never race the kernel's write
            raise BlockingIOError(errno.EBUSY, "an asynchronous append is in flight")
        if self._pwrite_small and len(buffers) == 1 and len(buffers[0]) < ASYNC_MIN_BYTES:
            buf = buffers[0]
            done = os.pwrite(self._fd, buf, position)
            if done == len(buf):
                return done
            # short (or a buffer of wider items): the native loop finishes the rest
            rest = memoryview(buf).cast("B")[done:]
            return done + (self._append_native([rest], position + done) if rest else 0)
        return self._append_native(buffers, position)

    def _append_native(self, buffers: Sequence[object], position: int) -> int:
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

    async def append_async(self, buffers: Sequence[object], position: int) -> int:
        """``append`` without blocking the running event loop (see module doc); the
        buffers must not change until it returns. Writes through one Appender are done
        one after another. If the awaiting task is cancelled, the write still completes
        in the kernel, and the next write through this Appender waits for it first."""
        if self._fd < 0:
            raise ValueError("append on a closed Appender")
        while self._in_flight is not None and not self._in_flight.done():
            await asyncio.shield(self._in_flight)
        if not self._uring or len(buffers) > _IOV_MAX or \
                sum(memoryview(b).nbytes for b in buffers) < ASYNC_MIN_BYTES:
            return self.append(buffers, position)
        completions = _Completions.for_running_loop()
        if completions is None:  # this thread cannot have an async ring: go synchronous
            return self.append(buffers, position)
        views = [ffi.from_buffer(b) for b in buffers]
        total = sum(len(v) for v in views)
        fut = self._in_flight = completions.write(self._fd, views, position)
        result = await asyncio.shield(fut)  # a cancelled caller must not cancel the write
        if result < 0:
            raise _os_error(-result, f"append at {position} to fd {self._fd}")
        if result < total:  # short write (disk full, file size limit): finish synchronously
            rest = memoryview(b"".join(ffi.buffer(v)[:] for v in views))[result:]
            result += self.append([rest], position + result)
        return result

    @property
    def writing(self) -> bool:
        """An ``append_async`` write is still in the kernel's hands."""
        return self._in_flight is not None and not self._in_flight.done()

    def close(self) -> None:
        self._fd = -1

    def __enter__(self) -> Appender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Completions:
    """This thread's asynchronous ring as its running event loop sees it.

    Each write is a token; its future, iovec array and pinned buffers are kept here until
    the kernel reports it done, so nothing the kernel reads is freed first, even if the
    waiter is gone. Entries queued during one loop iteration are submitted together by
    one callback. One per thread (the ring is the thread's); when another loop starts
    running on the thread (tests run several loops one after another) the eventfd is
    watched by that one instead. Thread-safety: its thread only.
    """

    _local = threading.local()

    @classmethod
    def for_running_loop(cls) -> _Completions | None:
        loop = asyncio.get_running_loop()
        completions = getattr(cls._local, "completions", False)
        if completions is False:
            efd = lib.pb_async_eventfd()
            completions = cls(efd) if efd >= 0 else None
            cls._local.completions = completions
        if completions is not None and completions._loop is not loop:
            completions._watch(loop)
        return completions

    def __init__(self, efd: int) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._efd = efd
        self._pending: dict[int, tuple[asyncio.Future[int], Any, Any]] = {}
        self._next_token = 1
        self._submit_scheduled = False
        self._tokens = ffi.new(f"unsigned long long[{_REAP_BATCH}]")
        self._results = ffi.new(f"long long[{_REAP_BATCH}]")

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        old = self._loop
        if old is not None and not old.is_closed():
            old.remove_reader(self._efd)
        self._loop = loop
        self._submit_scheduled = False
        loop.add_reader(self._efd, self._on_completions)
        self._on_completions()  # anything an earlier loop left behind

    def write(self, fd: int, views: list[Any], position: int) -> asyncio.Future[int]:
        assert self._loop is not None
        iov = ffi.new("struct iovec[]", [(v, len(v)) for v in views])
        token = self._next_token
        self._next_token += 1
        err = lib.pb_async_writev(fd, iov, len(views), position, token, 0)
        if err < 0:
            raise _os_error(-err, f"queueing an append at {position} to fd {fd}")
        fut: asyncio.Future[int] = self._loop.create_future()
        self._pending[token] = (fut, iov, views)
        if not self._submit_scheduled:
            self._submit_scheduled = True
            self._loop.call_soon(self._submit)
        return fut

    def _submit(self) -> None:
        self._submit_scheduled = False
        ret = lib.pb_async_submit()
        if ret < 0 and self._loop is not None:
            # io_uring_enter fails only when it took nothing (EAGAIN, EBUSY: out of
            # resources for now). Failing the waiters would let the log reuse the range
            # while the entries still sit in the ring; retry shortly instead.
            log.warning("io_uring submission failed (%s); retrying", os.strerror(-ret))
            self._submit_scheduled = True
            self._loop.call_later(0.001, self._submit)

    def _on_completions(self) -> None:
        try:
            os.read(self._efd, 8)  # reset the counter first: a later completion re-arms it
        except (BlockingIOError, InterruptedError):
            pass
        tokens, results, pending = self._tokens, self._results, self._pending
        while True:
            n = lib.pb_async_reap(tokens, results, _REAP_BATCH)
            for i in range(n):
                entry = pending.pop(tokens[i], None)
                if entry is not None:
                    fut = entry[0]
                    if not fut.done() and not fut.get_loop().is_closed():
                        fut.set_result(results[i])
            if n < _REAP_BATCH:
                return


def _forget_in_child() -> None:
    """A forked child's native side drops the parent's rings and eventfd (atfork in
    _uring_build.py); its Python side must forget them too and set up its own."""
    _Completions._local = threading.local()


os.register_at_fork(after_in_child=_forget_in_child)

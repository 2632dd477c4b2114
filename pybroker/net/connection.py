"""One client connection: size-prefixed frames in, responses out in request order.

Wire framing (Kafka): every request and response is ``int32 size`` (big-endian, not
counting itself) followed by ``size`` bytes.

Receive path. The socket is read with ``recv_into`` into a preallocated buffer (the
equivalent of ``asyncio.BufferedProtocol``, STYLE 8). A small frame is copied out of it
into its own ``bytearray`` (cheap, and the handler may keep views of it after the buffer
is reused). A frame larger than ``LARGE_FRAME`` gets a ``bytearray`` of its exact size that
the rest of the frame is received straight into, so a 1 MiB produce batch is never copied
in Python: the produce handler stamps offsets into it in place and the log appends from it.
Those large buffers are recycled: once a request is answered and nothing refers to its
frame any more (no view of it survives the handler), the buffer goes back to the
process's pool (``frame_pool.py``) and a later large frame of about its size, on any
connection, is received into it.
A size prefix above ``socket.request.max.bytes`` (or negative) is logged and the connection
closed, as Kafka does.

Why raw sockets and not a transport: the fetch path writes file regions with the native
sendfile/splice on the socket's fd and must wait for writability itself; asyncio and uvloop
refuse ``add_writer`` on an fd a transport owns, and a transport's write buffer would have
to be drained before every sendfile anyway.

Ordering. Requests are handled one at a time by the connection's worker task, and each
response is fully written before the next request is handled: the muted channel of Kafka's
SocketServer, which idempotent producers rely on. While the worker is idle, requests that
complete at once are answered straight from the receive callback (``_serve_inline``),
still one at a time and in order; the first that does not is handed to the worker.
Reading continues meanwhile (pipelined requests queue up) until
``connection.queued.max.bytes`` are waiting (a pybroker key: it bounds each connection,
where Kafka's queued.max.request.bytes bounds them all together); then the reader pauses
until the worker catches up.

Send path. A response is a list of parts: bytes-like objects (sent with ``sendmsg``,
counted with ``count_copied``) and :class:`FileRegion`s (sent with the native
sendfile/splice, counted as zero-copy by the native module). On EAGAIN the worker awaits
writability of this socket only; other connections are not blocked.

Network threads (``num.network.threads``, ``network_threads.NetworkThreads``, shared by the server's
connections). One event-loop thread doing every kernel copy of bulk traffic was the limit
of fetch and produce throughput, so the two bulk transfers move in pool threads: a file
region of ``THREAD_MIN_BYTES`` or more (the worker awaits it; the loop serves other
connections meanwhile), and the rest of a received frame once that much of it is missing
(reading is paused for the connection until the thread is back; then the frame is queued
and reading resumes as usual). A thread loops system call + ``poll`` on the same
non-blocking socket with the GIL released, and hands the socket back to the loop when it
stays not ready for ``THREAD_PATIENCE_MS``, so a slow or dead peer is waited for by the
loop, never by a pool thread. Ordering is unchanged: a thread works for the one request
the worker is answering, or the one frame being received, and the worker still answers
one request at a time. Unlike Kafka's network threads (each a selector owning a share of
the connections), ours own no connection: small frames and responses stay on the loop.

Threads. Every method runs on the event loop thread. The only work on other threads is
the transfer function a pool thread runs with the fd, the splice pipe and the frame
buffer it was given; the loop does not touch those until the thread's result is back on
the loop (``_thread_returned``). While a thread holds the fd, :meth:`close` does not close
it: the socket is shut down (the thread's poll wakes, its send fails, its receive ends)
and the fd and pipe are closed when the last thread is back, so the fd number cannot be
reused by another socket or file while a thread still writes to it.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import socket
import sys
from collections.abc import Callable, Coroutine, Generator, Sequence
from typing import Any

from pybroker._native import zerocopy
from pybroker.file_region import FileRegion
from pybroker.net import frame_pool
from pybroker.net.network_threads import NetworkThreads

log = logging.getLogger("pybroker.net")

RECV_BUFFER = 64 * 1024
# Frames above this get their own buffer and are received into it directly. Below it the
# copy out of the shared buffer costs less than a second recv syscall would.
LARGE_FRAME = 16 * 1024
# sendmsg takes at most IOV_MAX (1024) buffers per call.
_IOV_MAX = 1024
# With network threads: a file region of at least this many bytes is sent by one of them,
# and the rest of a large frame is received by one when at least this much is missing.
# Below it the hand-over (a queue put, a thread wake-up, a call_soon_threadsafe back)
# costs about what the loop thread saves.
THREAD_MIN_BYTES = 256 * 1024
# A network thread gives the socket back to the event loop when it has not been ready for
# this long, and after THREAD_SLICE_MS of work when it would have to wait again: the loop
# then waits for the socket without holding a thread and queues the rest behind other
# connections' transfers, so neither dead nor slow peers take the pool from the others.
THREAD_PATIENCE_MS = 20
THREAD_SLICE_MS = 100

Part = Any  # bytes-like or FileRegion
Dispatch = Callable[["Connection", bytearray], Coroutine[Any, Any, Sequence[Part] | None]]


class ConnectionClosed(Exception):
    """The socket is gone; the request being handled has nobody to answer to."""


class CloseConnection(Exception):
    """Raised by the dispatcher for a request it cannot answer: log one line and close."""


class Connection:
    """State of one accepted socket. Created and driven by :class:`pybroker.net.server.Server`."""

    def __init__(self, sock: socket.socket, peer: str, dispatch: Dispatch,
                 max_request_bytes: int, max_queued_bytes: int,
                 on_close: Callable[[Connection], None],
                 network_threads: NetworkThreads | None = None) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self._dispatch = dispatch
        self._max_request = max_request_bytes
        self._max_queued = max_queued_bytes
        self._on_close = on_close
        self._loop = asyncio.get_running_loop()
        self._buf = bytearray(RECV_BUFFER)
        self._view = memoryview(self._buf)
        self._start = 0  # first unparsed byte in _buf
        self._end = 0  # end of received data in _buf
        self._large: bytearray | None = None  # frame being received into its own buffer
        self._large_view: memoryview | None = None
        self._large_pos = 0
        self._queue: collections.deque[bytearray] = collections.deque()
        self._queued_bytes = 0
        self._reading = False
        self._wakeup: asyncio.Future[None] | None = None
        # (frame, awaitable giving its response | None, response | None): a request
        # _serve_inline began and the worker finishes
        self._handover: tuple[bytearray, Any, Any] | None = None
        self._write_waiter: asyncio.Future[None] | None = None
        self._draining = False  # stop reading, answer what is queued, then close
        self.closed = False
        self._threads = network_threads
        self._thread_users = 0  # network-thread transfers on this socket under way
        self._receiving = False  # a network thread is receiving the rest of _large
        self._pipe = _new_pipe()
        self._worker = self._loop.create_task(self._run())
        self._resume_reading()

    # receive ---------------------------------------------------------------------------

    def _resume_reading(self) -> None:
        if not self._reading and not self.closed and not self._draining and \
                not self._receiving:
            self._loop.add_reader(self.fd, self._on_readable)
            self._reading = True

    def _pause_reading(self) -> None:
        if self._reading:
            self._loop.remove_reader(self.fd)
            self._reading = False

    def _on_readable(self) -> None:
        try:
            if self._large is not None:
                assert self._large_view is not None
                n = self.sock.recv_into(self._large_view[self._large_pos:])
            else:
                if self._end == len(self._buf):
                    self._compact()
                n = self.sock.recv_into(self._view[self._end:])
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            log.info("connection %s: receive failed: %s", self.peer, exc)
            self.close()
            return
        if n == 0:
            # The peer is done sending. What it sent is still handled (an acks=0 producer
            # that closes right after its last request must not lose it), then we close.
            if self._large is not None:
                log.info("connection %s: peer closed %d bytes into a %d-byte request",
                         self.peer, self._large_pos, len(self._large))
            self.drain()
            return
        if self._large is not None:
            self._large_pos += n
            if self._large_pos == len(self._large):
                self._enqueue(self._large)
                self._large = self._large_view = None
        else:
            self._end += n
            self._parse_frames()
        if self._queue:
            self._kick()
        if self._queued_bytes > self._max_queued:
            self._pause_reading()
        elif self._large is not None and self._threads is not None and not self.closed and \
                len(self._large) - self._large_pos >= THREAD_MIN_BYTES:
            # (closed: _kick ran handlers, and a thread must never get a closed fd)
            self._receive_in_thread()

    def _receive_in_thread(self) -> None:
        """A network thread receives the rest of ``_large`` while the loop serves others;
        reading stays paused until it is back (``_received_in_thread``)."""
        assert self._large_view is not None
        self._pause_reading()
        self._receiving = True
        done = self._in_thread(zerocopy.recv_wait, self.fd, self._large_view[self._large_pos:],
                               THREAD_PATIENCE_MS, THREAD_SLICE_MS)
        done.add_done_callback(self._received_in_thread)

    def _received_in_thread(self, done: asyncio.Future[int]) -> None:
        self._receiving = False
        exc = done.exception()
        if self.closed:
            return
        if exc is not None:
            log.info("connection %s: receive failed: %s", self.peer, exc)
            self.close()
            return
        # Short when the peer ended the stream or paused: reading on the loop sees which.
        self._large_pos += done.result()
        if self._large is not None and self._large_pos == len(self._large):
            self._enqueue(self._large)
            self._large = self._large_view = None
            self._kick()
        if self._queued_bytes <= self._max_queued:
            self._resume_reading()

    def _compact(self) -> None:
        remaining = self._end - self._start
        if self._start:
            self._view[:remaining] = self._view[self._start:self._end]
        self._start, self._end = 0, remaining

    def _parse_frames(self) -> None:
        buf, view = self._buf, self._view
        while not self.closed:
            available = self._end - self._start
            if available < 4:
                break
            size = int.from_bytes(buf[self._start:self._start + 4], "big", signed=True)
            if size < 0 or size > self._max_request:
                log.warning("connection %s: request size %d outside 0..%d "
                            "(socket.request.max.bytes), closing", self.peer, size,
                            self._max_request)
                self.close()
                return
            body = self._start + 4
            if available - 4 >= size:
                self._enqueue(bytearray(view[body:body + size]))
                self._start = body + size
                continue
            if size > LARGE_FRAME:
                # Receive the rest straight into the frame's own buffer (no copy later).
                have = available - 4
                frame = frame_pool.frames.take(size)
                frame[:have] = view[body:self._end]
                self._large, self._large_view, self._large_pos = frame, memoryview(frame), have
                self._start = self._end = 0
                return
            if body + size > len(buf):
                self._compact()
            break
        if self._start == self._end:
            self._start = self._end = 0

    def _recycle(self, frame: bytearray) -> None:
        """Give an answered large frame's buffer back to the pool, unless anything still
        refers to it: the only references must be the caller's, this argument and
        getrefcount's (a surviving memoryview of it would be one more)."""
        if len(frame) > LARGE_FRAME and sys.getrefcount(frame) <= 3:
            frame_pool.frames.give(frame)

    def _enqueue(self, frame: bytearray) -> None:
        self._queue.append(frame)
        self._queued_bytes += len(frame)

    def _kick(self) -> None:
        """Frames were queued: answer them right here if the worker is parked and they
        complete at once (``_serve_inline``), else wake the worker for the rest."""
        wakeup = self._wakeup
        if wakeup is None or wakeup.done():
            return  # the worker is busy (or already woken): it gets to them in order
        if self._queue and self._handover is None:
            self._serve_inline()
        if (self._queue or self._handover is not None) and not wakeup.done():
            wakeup.set_result(None)

    def _serve_inline(self) -> None:
        """Answer queued requests in the reader callback while the worker is parked.

        Why: handing a request to the worker task costs a future, a loop iteration and a
        task step before the handler runs and another future after it; for a request
        whose handler finishes without suspending (a one-record produce) that was about
        3 us of a 26 us round trip (bench one-record produce p50, busy CPUs). The
        requests answered here are those one receive brought (at most a receive buffer
        of frames), so one pipelining client holds the loop no longer than before the
        worker's turn would have. The first step of the dispatch coroutine runs here; if
        it finishes and its response (one bytes-like part) goes out in one ``sendmsg``,
        the request is done. Anything else is handed over, in order, to the worker: a
        handler that suspended (the worker resumes that same coroutine, ``_Resumed``),
        its exception, or a response the socket did not take whole. Only one request is
        ever handed over, and nothing more is answered here until the worker has
        finished it."""
        while self._queue and not self.closed:
            frame = self._queue.popleft()
            self._queued_bytes -= len(frame)
            coro = self._dispatch(self, frame)
            if not hasattr(coro, "send"):  # an awaitable that is no coroutine: the worker's
                self._handover = (frame, coro, None)
                return
            try:
                step = coro.send(None)
            except StopIteration as done:
                response = done.value
            except BaseException as exc:  # the worker raises it where _run handles it
                self._handover = (frame, _Raised(exc), None)
                return
            else:
                self._handover = (frame, _Resumed(coro, step), None)
                return
            if response:
                rest = self._send_now(response)
                if rest is not None:
                    self._handover = (frame, None, rest)
                    return
            self._recycle(frame)

    def _send_now(self, parts: Sequence[Part]) -> Sequence[Part] | None:
        """Send a one-part bytes-like response with one ``sendmsg``; None when it all
        went out, else what is left for the worker's ``write``."""
        if len(parts) != 1 or isinstance(parts[0], FileRegion):
            return parts
        view = memoryview(parts[0]).cast("B")
        try:
            sent = self.sock.sendmsg([view])
        except OSError:  # EAGAIN, or an error the worker's write meets again and reports
            return parts
        if sent:
            zerocopy.count_copied(sent)
        return None if sent == len(view) else [view[sent:]]

    # request loop ----------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while True:
                while not self._queue and self._handover is None:
                    if self._draining or self.closed:
                        return
                    self._wakeup = self._loop.create_future()
                    await self._wakeup
                    self._wakeup = None
                if self._handover is not None:  # begun by _serve_inline
                    frame, resumed, response = self._handover
                    self._handover = None
                    if resumed is not None:
                        response = await resumed
                    del resumed
                else:
                    frame = self._queue.popleft()
                    self._queued_bytes -= len(frame)
                    if self._queued_bytes <= self._max_queued:
                        self._resume_reading()
                    response = await self._dispatch(self, frame)
                if response:
                    await self.write(response)
                    del response
                self._recycle(frame)
                del frame
        except CloseConnection as exc:
            log.warning("connection %s: %s; closing", self.peer, exc)
        except (ConnectionClosed, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("connection %s: request handling failed, closing", self.peer)
        finally:
            if self._handover is not None:
                # A request _serve_inline began and this worker never took (it was
                # cancelled first): close its coroutine now, so what its first step took
                # (a partition's append lock, a fetch waiter) is let go at once, not at gc.
                _, resumed, _ = self._handover
                self._handover = None
                if isinstance(resumed, _Resumed):
                    resumed.close()
            self.close()

    # send ------------------------------------------------------------------------------

    async def write(self, parts: Sequence[Part]) -> None:
        """Send ``parts`` in order; returns when all of it is in the socket."""
        pending: list[Any] = []
        for part in parts:
            if isinstance(part, FileRegion):
                if pending:
                    await self._send_buffers(pending, socket.MSG_MORE)
                    pending = []
                await self._send_region(part)
            elif len(part):
                pending.append(part)
        if pending:
            await self._send_buffers(pending)

    async def _send_buffers(self, buffers: list[Any], flags: int = 0) -> None:
        """``flags=MSG_MORE`` before file regions: the kernel holds the small header back
        to go out in one segment with the file data that follows (no tiny packet)."""
        views = [memoryview(b).cast("B") for b in buffers]
        while views:
            if self.closed:
                raise ConnectionClosed()
            try:
                sent = self.sock.sendmsg(views[:_IOV_MAX], (), flags)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._failed_send(exc)
            if sent:
                zerocopy.count_copied(sent)
                while sent:
                    head = views[0]
                    if sent >= len(head):
                        sent -= len(head)
                        views.pop(0)
                    else:
                        views[0] = head[sent:]
                        sent = 0
            else:
                await self._writable()

    async def _send_region(self, region: FileRegion) -> None:
        offset, remaining = region.position, region.length
        while remaining > 0:
            if self.closed:
                raise ConnectionClosed()
            threaded = self._threads is not None and remaining >= THREAD_MIN_BYTES
            try:
                if threaded:
                    sent = await self._in_thread(zerocopy.send_region_wait, self.fd, region.fd,
                                                 offset, remaining, THREAD_PATIENCE_MS,
                                                 THREAD_SLICE_MS, self._pipe)
                elif self._pipe is not None:
                    sent = self._pipe.splice(self.fd, region.fd, offset, remaining)
                else:
                    sent = zerocopy.sendfile(self.fd, region.fd, offset, remaining)
            except OSError as exc:
                self._failed_send(exc)
            offset += sent
            remaining -= sent
            # A thread comes back short only when the socket stayed full: wait here.
            if remaining and (threaded or not sent):
                await self._writable()

    def _failed_send(self, exc: OSError) -> None:
        if not self.closed:  # else close() shut the socket down under a network thread
            log.info("connection %s: send failed: %s", self.peer, exc)
            self.close()
        raise ConnectionClosed() from exc

    # network threads -------------------------------------------------------------------

    def _in_thread(self, fn: Callable[..., int], *args: Any) -> asyncio.Future[int]:
        """Run the blocking transfer ``fn(*args)`` on this socket in a network thread.
        Until it returns the fd stays open whatever happens (see :meth:`close`)."""
        assert self._threads is not None
        done: asyncio.Future[int] = self._loop.create_future()
        self._thread_users += 1
        self._threads.submit(self._loop, functools.partial(self._thread_returned, done),
                             fn, args)
        return done

    def _thread_returned(self, done: asyncio.Future[int], result: int,
                         error: BaseException | None) -> None:
        self._thread_users -= 1
        if self.closed and not self._thread_users:
            self._close_fds()
        if done.cancelled():  # the worker task was cancelled meanwhile
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    async def _writable(self) -> None:
        fut = self._write_waiter = self._loop.create_future()
        self._loop.add_writer(self.fd, _set_done, fut)
        try:
            await fut
        finally:
            self._write_waiter = None
            if not self.closed:
                self._loop.remove_writer(self.fd)
        if self.closed:
            raise ConnectionClosed()

    # lifecycle -------------------------------------------------------------------------

    def drain(self) -> asyncio.Task[None]:
        """Stop reading; the worker answers the requests already received, then closes."""
        self._draining = True
        self._pause_reading()
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)
        return self._worker

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._pause_reading()
        self._loop.remove_writer(self.fd)
        for waiter in (self._wakeup, self._write_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        if self._thread_users:
            # A network thread is in a system call on this fd. Closing it now would let
            # the number be reused by the next accept or open and the thread would move
            # bytes on someone else's file. Shutting the socket down wakes the thread's
            # poll (its send fails, its receive ends); the fd and the splice pipe are
            # closed when the last thread is back on the loop (_thread_returned).
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        else:
            self._close_fds()
        self._queue.clear()
        self._on_close(self)


    def _close_fds(self) -> None:
        if self._pipe is not None:
            self._pipe.close()
        try:
            self.sock.close()
        except OSError:
            pass


class _Resumed:
    """Awaiting it continues a coroutine that ran to its first suspension outside any
    task (``Connection._serve_inline``): the awaiting task first waits for what the
    coroutine yielded (a future, or None for a bare yield), then drives it on; what the
    task is sent or thrown (a cancellation) goes to the coroutine, as ``await`` would."""

    __slots__ = ("_coro", "_step")

    def __init__(self, coro: Any, step: Any) -> None:
        self._coro, self._step = coro, step

    def close(self) -> None:
        """Close the coroutine if it was never awaited (its ``finally`` blocks run)."""
        if self._coro is not None:
            self._coro.close()
            self._coro = self._step = None

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, step = self._coro, self._step
        self._coro = self._step = None
        while True:
            try:
                value = yield step
            except BaseException as exc:
                try:
                    step = coro.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    step = coro.send(value)
                except StopIteration as done:
                    return done.value


class _Raised:
    """Awaiting it raises what a dispatch raised in ``_serve_inline``, in the worker."""

    __slots__ = ("_exc",)

    def __init__(self, exc: BaseException) -> None:
        self._exc: BaseException | None = exc

    def __await__(self) -> Generator[Any, Any, Any]:
        exc, self._exc = self._exc, None
        assert exc is not None, "awaited twice"
        raise exc
        yield  # a generator: never reached


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _new_pipe() -> Any:
    """A splice pipe when the native module prefers splice, else None (use sendfile)."""
    if zerocopy.zerocopy_implementation() == "splice":
        return zerocopy.SplicePipe()
    return None

"""One client connection: size-prefixed frames in, responses out in request order.

Wire framing (Kafka): every request and response is ``int32 size`` (big-endian, not
counting itself) followed by ``size`` bytes.

Receive path and memory. What a connection costs is bounded by what its client sent and
by settings, never by what the client declares:
- An idle connection holds no receive buffer: every connection reads into the server's
  one scratch buffer (``ReceiveScratch``, 64 KiB; the event loop runs one read at a time),
  complete small frames are copied out of it into a ``bytearray`` each (the handler may
  keep views of them), and the start of a small frame still arriving is kept in a
  ``bytearray`` of exactly what arrived (``_pending``, at most ``LARGE_FRAME`` + 4 bytes).
- A frame larger than ``LARGE_FRAME`` is received straight into a ``FrameBuffer`` of its
  own (``pybroker._native.framebuffer``): its size prefix maps nothing, its memory grows
  (``mremap``, no copy) with the bytes that arrive, so a 1 MiB produce batch is never
  copied in Python (the produce handler stamps offsets into it in place and the log
  appends from it) and a 100 MB size prefix followed by nothing costs nothing. Answered
  frames go back to the process's pool (``frame_pool.py``) once nothing exports them.
- Every received byte of a frame not yet answered is charged to the server's
  ``RequestMemory`` (``queued.max.request.bytes``, all connections together): past it a
  connection that holds charged bytes stops being read until memory is released.
- A connection stops being read while ``connection.queued.max.bytes`` of whole requests
  wait for its worker (pipelining), and while a response waits for the socket to become
  writable: a client that does not read its answers stops being read (Kafka's muted
  channel), so its requests and answers pile up in neither our memory nor our CPU.
- A connection throttled for a quota (``throttle``) is not read, and its requests already
  received wait, until its throttle time is up: Kafka's muted channel of KIP-219.
A size prefix above ``socket.request.max.bytes`` (or negative) is logged and the
connection closed, as Kafka does.

Why raw sockets and not a transport: the fetch path writes file regions with the native
sendfile/splice on the socket's fd and must wait for writability itself; asyncio and uvloop
refuse ``add_writer`` on an fd a transport owns, and a transport's write buffer would have
to be drained before every sendfile anyway.

Ordering and fairness. Requests are handled one at a time, and each response is fully
written before the next request is handled: the muted channel of Kafka's SocketServer,
which idempotent producers rely on. Requests that complete at once are answered straight
from the receive callback (``_serve_inline``), still one at a time and in order; the first
that does not is handed to the connection's worker task with everything after it. The
worker exists only while there is such work: an idle connection has no task. One connection never holds the event loop for long: inline serving stops after
``INLINE_SLICE_S`` and the worker gives the loop back every ``WORKER_SLICE_S`` of
requests that completed without suspending, so a client pipelining thousands of cheap
requests is served in turns with everyone else.

Peer gone. When the peer closes (end of stream) reading stops; the requests already
received are still handled (an acks=0 producer that closes right after its last request
must not lose it) and answered if the socket still takes it, then the connection closes.
A handler waiting on the client's behalf (a long-polling Fetch, a parked JoinGroup)
waits through :meth:`Connection.wait`, which raises :class:`PeerGone` as soon as the peer
is gone, so the socket and the waiting work are released at once, not when the wait ends.

Send path. A response is a list of parts: bytes-like objects (sent with ``sendmsg``,
counted with ``count_copied``) and :class:`FileRegion`s (sent with the native
sendfile/splice, counted as zero-copy by the native module). On EAGAIN the worker awaits
writability of this socket only; other connections are not blocked.

Request times. Each answered request's time, from being taken off the queue until its
response is entirely in the socket, goes to the server's ``RequestTimes`` (per API, a
histogram: ``request_times.py``), from the timestamps the fairness slices take anyway.

Network threads (``num.network.threads``, ``network_threads.NetworkThreads``, shared by the
server's connections). One event-loop thread doing every kernel copy of bulk traffic was
the limit of fetch and produce throughput, so the two bulk transfers move in pool threads:
a file region of ``THREAD_MIN_BYTES`` or more (the worker awaits it; the loop serves other
connections meanwhile), and the rest of a received frame once that much of it is missing
(reading is paused for the connection until the thread is back). A thread loops system
call + ``poll`` on the same non-blocking socket with the GIL released, and hands the
socket back to the loop when it stays not ready for ``THREAD_PATIENCE_MS``, so a slow or
dead peer is waited for by the loop, never by a pool thread. Ordering is unchanged: a
thread works for the one request the worker is answering, or the one frame being
received. Unlike Kafka's network threads (each a selector owning a share of the
connections), ours own no connection: small frames and responses stay on the loop.

Cold reads. A region whose pages are not in the page cache is never sent on the loop nor
by a network thread: it would wait there for the disk with everyone behind it. Before each
piece of a region is sent, whoever would send it asks ``zerocopy.region_resident`` (one
cachestat, on the loop for a small piece; in the network thread, ``warm_only``, for a large
one); a piece that is not resident has its reading started in the background and goes to
the cold-read threads (``Limits.cold_threads``), which wait for the disk on its behalf.
The worker awaits it as any threaded transfer, so the connection's responses stay in
order, and the next piece is asked about again (the pages may have arrived meanwhile). A
large region also has the disk read ``READ_AHEAD_MAX`` at most of what follows it, for a
consumer reading on (see ``network_threads.py`` for why, and Kafka's way).

Listener and principal. A connection knows the listener it was accepted on
(``listener``: its name picks the endpoints a response names, Kafka's rule) and who the
client is (``principal``, "User:<name>"; ``User:ANONYMOUS`` unless TLS client
authentication says otherwise). A connection on an SSL listener is the subclass
:class:`pybroker.net.tls_connection.TlsConnection`, which replaces the system calls only
(a network thread's receive included: ``_thread_receive``).

Threads. Every method runs on the event loop thread. The only work on other threads is
the transfer function a pool thread runs with the fd, the splice pipe and the view of a
frame buffer it was given; the loop does not touch those until the thread's result is
back on the loop (``_thread_returned``). While a thread holds the fd, :meth:`close` does not
close it: the socket is shut down (the thread's poll wakes, its send fails, its receive
ends) and the fd and pipe are closed when the last thread is back, so the fd number cannot
be reused by another socket or file while a thread still writes to it.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import socket
import struct
import time
from collections.abc import Callable, Coroutine, Generator, Sequence
from typing import Any, TypeVar

from pybroker._native import zerocopy
from pybroker._native.framebuffer import FrameBuffer
from pybroker.file_region import FileRegion
from pybroker.net import frame_pool
from pybroker.net.listeners import DEFAULT_LISTENER, Listener
from pybroker.net.network_threads import NetworkThreads
from pybroker.net.request_memory import RequestMemory
from pybroker.net.request_times import RequestTimes, api_key_of
from pybroker.security.acl import ANONYMOUS

log = logging.getLogger("pybroker.net")

T = TypeVar("T")

RECV_BUFFER = 64 * 1024
# Frames above this get their own buffer and are received into it directly. Below it the
# copy out of the scratch buffer costs less than a second recv syscall would.
LARGE_FRAME = 16 * 1024
# A large frame grows by at most this much per receive on the loop (and per network-thread
# hand-off below), so the memory bound is checked between steps of one frame too.
LOOP_READ_MAX = 1024 * 1024
THREAD_READ_MAX = 8 * 1024 * 1024
# A connection whose worker is behind reads at most this much at once: parsing 64 KiB of
# 40-byte requests holds the loop about 1 ms, which a pipelining client could make every
# other client wait for on each of its reads.
PIPELINED_READ = 4 * 1024
# What a small frame costs beyond its bytes (the bytearray and queue entry), charged so
# that a client pipelining tiny requests is bounded by what they cost, not by their bytes.
FRAME_OVERHEAD = 128
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
# Read ahead of a large region (THREAD_MIN_BYTES and more) at most this much of what
# follows it: a consumer's next fetch (max.partition.fetch.bytes, 1 MiB by default) is
# covered, and a huge region does not make the disk read as much again on speculation.
READ_AHEAD_MAX = 4 * 1024 * 1024
# Longest one connection holds the event loop answering requests that complete without
# suspending, inline in a receive callback or in its worker, before the loop serves others.
INLINE_SLICE_S = 0.0001
WORKER_SLICE_S = 0.0001

_SIZE = struct.Struct(">i")

Part = Any  # bytes-like or FileRegion
Dispatch = Callable[["Connection", Any], Coroutine[Any, Any, Sequence[Part] | None]]


class ConnectionClosed(Exception):
    """The socket is gone; the request being handled has nobody to answer to."""


class PeerGone(ConnectionClosed):
    """Raised by :meth:`Connection.wait`: the client went away while its request waited.
    The request gets no answer; the requests received before it are still handled."""


class CloseConnection(Exception):
    """Raised by the dispatcher for a request it cannot answer: log one line and close.
    A ``reported`` refusal was logged by the dispatcher already (once per client and API),
    so the close itself is logged at DEBUG only."""

    def __init__(self, reason: str, reported: bool = False) -> None:
        super().__init__(reason)
        self.reported = reported


class ReceiveScratch:
    """The buffer every connection of a server receives small frames into. Only the event
    loop thread uses it, one receive callback at a time, and nothing refers to it once the
    callback returns (complete frames are copied out, the rest into the connection)."""

    __slots__ = ("buf", "view")

    def __init__(self, size: int = RECV_BUFFER) -> None:
        self.buf = bytearray(size)
        self.view = memoryview(self.buf)


class SocketCloser:
    """Closes sockets a few per event-loop iteration. Closing a TCP socket costs the
    kernel's FIN transmission (on loopback the peer's receive too): about half of what a
    connection costs the broker in all. Thousands of clients disconnecting at once would
    otherwise be one iteration of hundreds of milliseconds with everyone else waiting."""

    __slots__ = ("_queue", "_scheduled")
    BATCH = 32

    def __init__(self) -> None:
        self._queue: collections.deque[Any] = collections.deque()
        self._scheduled = False

    def close(self, closeable: Any) -> None:
        """Close ``closeable`` (a socket, a splice pipe) soon, in arrival order."""
        self._queue.append(closeable)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._close_some)

    def _close_some(self) -> None:
        for _ in range(min(self.BATCH, len(self._queue))):
            _close_quietly(self._queue.popleft())
        if self._queue:
            asyncio.get_running_loop().call_soon(self._close_some)
        else:
            self._scheduled = False

    def flush(self) -> None:
        """Close everything queued now (shutdown)."""
        while self._queue:
            _close_quietly(self._queue.popleft())


def _close_quietly(closeable: Any) -> None:
    try:
        closeable.close()
    except OSError:
        pass


class Limits:
    """Per-server settings and shared parts every connection uses. ``cold_threads`` send
    regions that are not in the page cache; None (a Limits built without a server) sends
    every region as if it were resident."""

    __slots__ = ("max_request", "max_queued", "memory", "scratch", "threads", "closer",
                 "times", "cold_threads")

    def __init__(self, max_request: int, max_queued: int, memory: RequestMemory,
                 scratch: ReceiveScratch | None = None,
                 threads: NetworkThreads | None = None,
                 times: RequestTimes | None = None) -> None:
        self.max_request = max_request
        self.max_queued = max_queued
        self.memory = memory
        self.times = times or RequestTimes()
        self.scratch = scratch or ReceiveScratch()
        self.threads = threads
        self.cold_threads: NetworkThreads | None = None
        self.closer = SocketCloser()


def frame_charge(frame: Any) -> int:
    """What a received frame counts against the memory bounds."""
    if isinstance(frame, FrameBuffer):
        return len(frame)
    return len(frame) + FRAME_OVERHEAD


class Connection:
    """State of one accepted socket. Created and driven by :class:`pybroker.net.server.Server`."""

    __slots__ = ("sock", "fd", "peer", "listener", "principal", "last_active", "closed",
                 "max_frame", "_dispatch", "_limits",
                 "_on_close", "_loop", "_pending", "_large", "_large_pos", "_queue",
                 "_queued_bytes", "_charged", "_reading", "_handover",
                 "_write_waiter", "_write_blocked", "_draining", "_gone", "_memory_wait",
                 "_thread_users", "_receiving", "_pipe", "_worker", "_throttle")

    def __init__(self, sock: socket.socket, peer: str, dispatch: Dispatch, limits: Limits,
                 on_close: Callable[[Connection], None],
                 listener: Listener = DEFAULT_LISTENER) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        # the listener accepted on (its name picks the endpoints clients are told)
        self.listener = listener
        # Kafka's principal of the client ("User:name"), which the ACLs name; what an
        # unauthenticated (PLAINTEXT) connection is. A SASL or TLS layer sets it.
        self.principal = ANONYMOUS
        self._dispatch = dispatch
        self._limits = limits
        # the largest request frame taken: lower on a SASL listener until the client is
        # authenticated (sasl.server.max.receive.size), so an unknown client cannot make
        # the broker hold socket.request.max.bytes for it
        self.max_frame = limits.max_request
        self._on_close = on_close
        self._loop = asyncio.get_running_loop()
        self.last_active = time.monotonic()
        self._pending: bytearray | None = None  # the start of a small frame still arriving
        self._large: FrameBuffer | None = None  # a large frame still arriving
        self._large_pos = 0
        self._queue: collections.deque[Any] = collections.deque()
        self._queued_bytes = 0  # charge of the whole frames in _queue
        self._charged = 0  # charge of every frame received and not yet answered
        self._reading = False
        # (frame, awaitable giving its response | None, response | None, when it was
        # taken up): a request _serve_inline began and the worker finishes
        self._handover: tuple[Any, Any, Any, float] | None = None
        self._write_waiter: asyncio.Future[None] | None = None
        self._write_blocked = False  # a response waits for the socket: do not read
        self._draining = False  # stop reading, answer what is queued, then close
        self._gone: asyncio.Future[None] | None = None  # set once the peer is gone
        self._memory_wait = False  # paused by the broker-wide memory bound
        self.closed = False
        self._thread_users = 0  # network-thread transfers on this socket under way
        self._receiving = False  # a network thread is receiving the rest of _large
        self._pipe = _new_pipe()
        self._worker: asyncio.Task[None] | None = None  # running while there is work
        self._throttle: asyncio.TimerHandle | None = None  # muted for a quota until it fires
        self._update_reading()

    def switch_dispatch(self, dispatch: Dispatch) -> None:
        """Hand the requests after the one being handled to ``dispatch`` (a SASL
        authenticator's, once the client is authenticated: the broker's own)."""
        self._dispatch = dispatch

    # receive ---------------------------------------------------------------------------

    def _update_reading(self) -> None:
        """Read exactly when nothing holds this connection back."""
        want = not (self.closed or self._draining or self._receiving or self._write_blocked
                    or self._memory_wait or self._queued_bytes > self._limits.max_queued
                    or self._throttle is not None)
        if want and not self._reading:
            self._loop.add_reader(self.fd, self._on_readable)
            self._reading = True
        elif not want and self._reading:
            self._loop.remove_reader(self.fd)
            self._reading = False

    def throttle(self, ms: int) -> None:
        """Mute this connection for ``ms`` (a client over its quota, Kafka's throttled
        channel, KIP-219): the response being answered still goes out, but nothing more
        is read or answered until the time is up. A timer, not a sleep: the loop and
        the other connections carry on."""
        if ms <= 0 or self.closed:
            return
        until = self._loop.time() + ms / 1000
        if self._throttle is not None:
            if self._throttle.when() >= until:
                return
            self._throttle.cancel()
        self._throttle = self._loop.call_at(until, self._unthrottle)
        self._update_reading()

    def _unthrottle(self) -> None:
        if self._throttle is not None:
            self._throttle.cancel()
            self._throttle = None
        self._update_reading()
        if self._queue and not self.closed:
            self._kick()

    def memory_granted(self) -> None:
        self._memory_wait = False
        self._update_reading()

    def _on_readable(self) -> None:
        try:
            if self._large is not None:
                n = self._receive_large()
            else:
                n = self._receive_small()
        except (BlockingIOError, InterruptedError):
            return
        except MemoryError as exc:
            log.warning("connection %s: %s; closing", self.peer, exc)
            self.close()
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
            self._peer_gone()
            return
        self.last_active = time.monotonic()
        if self._queue:
            self._kick()
        if self.closed:  # _kick ran handlers that closed it
            return
        if not self._limits.memory.admit(self, self._charged):
            self._memory_wait = True
        elif self._large is not None and self._limits.threads is not None and \
                len(self._large) - self._large_pos >= THREAD_MIN_BYTES and \
                self._queued_bytes <= self._limits.max_queued:
            self._receive_in_thread()
        self._update_reading()

    def _receive_small(self) -> int:
        """One receive into the scratch buffer (after the start of a frame kept from the
        last one); complete frames are queued, a large one's start moves to its own
        buffer, the start of a small one is kept."""
        scratch = self._limits.scratch
        buf, view = scratch.buf, scratch.view
        have = 0
        if self._pending is not None:
            have = len(self._pending)
            view[:have] = self._pending
        room = len(buf) - have
        if self._queue:  # behind already: read no more than a slice of work at a time
            room = min(room, PIPELINED_READ)
        n = self.sock.recv_into(view[have:have + room])
        if n == 0:
            return 0
        end = have + n
        start = 0
        while end - start >= 4:
            size = _SIZE.unpack_from(buf, start)[0]
            if size < 0 or size > self.max_frame:
                log.warning("connection %s: request size %d outside 0..%d (%s), closing",
                            self.peer, size, self.max_frame,
                            "socket.request.max.bytes" if self.max_frame ==
                            self._limits.max_request else "sasl.server.max.receive.size")
                self.close()
                return n
            body = start + 4
            if end - body >= size:
                self._enqueue(bytearray(view[body:body + size]))
                start = body + size
                continue
            if size > LARGE_FRAME:
                self._start_large(size, view[body:end])
                start = end
            break
        self._pending = bytearray(view[start:end]) if start < end else None
        return n

    def _start_large(self, size: int, first: memoryview) -> None:
        frame = frame_pool.frames.take(size)
        have = len(first)
        frame.ensure(min(size, max(have, LOOP_READ_MAX)))
        with memoryview(frame) as target:
            target[:have] = first
        self._large, self._large_pos = frame, have
        self._charge(have)

    def _receive_large(self) -> int:
        frame = self._large
        assert frame is not None
        pos = self._large_pos
        frame.ensure(min(len(frame), pos + LOOP_READ_MAX))
        with memoryview(frame) as target:
            part = target[pos:pos + LOOP_READ_MAX]
            try:
                n = self.sock.recv_into(part)
            finally:
                part.release()
        if n:
            self._large_received(n)
        return n

    def _large_received(self, n: int) -> None:
        self._large_pos += n
        self._charge(n)
        if self._large is not None and self._large_pos == len(self._large):
            frame, self._large = self._large, None
            self._queue.append(frame)
            self._queued_bytes += len(frame)

    def _receive_in_thread(self) -> None:
        """A network thread receives more of ``_large`` while the loop serves others;
        reading stays paused until it is back (``_received_in_thread``)."""
        frame = self._large
        assert frame is not None
        pos = self._large_pos
        end = min(len(frame), pos + THREAD_READ_MAX)
        frame.ensure(end)
        with memoryview(frame) as target:
            part = target[pos:end]
        self._receiving = True
        done = self._in_thread(*self._thread_receive(part))
        done.add_done_callback(functools.partial(self._received_in_thread, part))

    def _thread_receive(self, part: memoryview) -> tuple[Any, ...]:
        """The blocking transfer a network thread runs to fill ``part``, with its
        arguments (a TLS connection decrypts instead)."""
        return (zerocopy.recv_wait, self.fd, part, THREAD_PATIENCE_MS, THREAD_SLICE_MS)

    def _received_in_thread(self, part: memoryview, done: asyncio.Future[int]) -> None:
        part.release()
        self._receiving = False
        exc = done.exception()
        if self.closed:
            return
        if exc is not None:
            log.info("connection %s: receive failed: %s", self.peer, exc)
            self.close()
            return
        # Short when the peer ended the stream or paused: reading on the loop sees which.
        n = done.result()
        if n:
            self.last_active = time.monotonic()
            self._large_received(n)
            if self._queue:
                self._kick()
            if self.closed:
                return
            if not self._limits.memory.admit(self, self._charged):
                self._memory_wait = True
        self._update_reading()

    def _charge(self, n: int) -> None:
        self._charged += n
        self._limits.memory.charge(n)

    def _release(self, frame: Any) -> None:
        """A request is answered (or dropped): its bytes stop counting; a large frame's
        buffer goes back to the pool if nothing exports it any more."""
        n = frame_charge(frame)
        self._charged -= n
        self._limits.memory.release(n)
        if isinstance(frame, FrameBuffer):
            frame_pool.frames.give(frame)

    def _enqueue(self, frame: bytearray) -> None:
        n = len(frame) + FRAME_OVERHEAD
        self._queue.append(frame)
        self._queued_bytes += n
        self._charge(n)

    def _dequeue(self) -> Any:
        frame = self._queue.popleft()
        self._queued_bytes -= (len(frame) if isinstance(frame, FrameBuffer)
                               else len(frame) + FRAME_OVERHEAD)
        return frame

    def _kick(self) -> None:
        """Frames were queued: with no worker running, answer those that complete at once
        right here (``_serve_inline``) and start a worker for the rest; a running worker
        gets to them in order."""
        if self._worker is not None or self._throttle is not None:
            return
        if self._queue and self._handover is None:
            self._serve_inline()
        if (self._handover is not None or self._queue and self._throttle is None) \
                and not self.closed:
            self._worker = self._loop.create_task(self._run())

    def _serve_inline(self) -> None:
        """Answer queued requests in the reader callback while no worker runs.

        Why: handing a request to the worker task costs a future, a loop iteration and a
        task step before the handler runs and another future after it; for a request
        whose handler finishes without suspending (a one-record produce) that was about
        3 us of a 26 us round trip (bench one-record produce p50, busy CPUs). At most
        ``INLINE_SLICE_S`` is spent here; the worker takes the rest in its turns. The
        first step of the dispatch coroutine runs here; if it finishes and its response
        (one bytes-like part) goes out in one ``sendmsg``, the request is done. Anything
        else is handed over, in order, to the worker: a handler that suspended (the
        worker resumes that same coroutine, ``_Resumed``), its exception, or a response
        the socket did not take whole. Only one request is ever handed over, and nothing
        more is answered here until the worker has finished it."""
        started = taken = time.monotonic()
        while self._queue and not self.closed and self._throttle is None:
            frame = self._dequeue()
            coro = self._dispatch(self, frame)
            if not hasattr(coro, "send"):  # an awaitable that is no coroutine: the worker's
                self._handover = (frame, coro, None, taken)
                return
            try:
                step = coro.send(None)
            except StopIteration as done:
                response = done.value
            except BaseException as exc:  # the worker raises it where _run handles it
                self._handover = (frame, _Raised(exc), None, taken)
                return
            else:
                self._handover = (frame, _Resumed(coro, step), None, taken)
                return
            if response:
                rest = self._send_now(response)
                if rest is not None:
                    self._handover = (frame, None, rest, taken)
                    return
            del response
            now = time.monotonic()
            self._limits.times.observe(api_key_of(frame), now - taken)
            self._release(frame)
            if now - started >= INLINE_SLICE_S:
                return
            taken = now

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
        """The worker: answers the queued requests in order, then ends (an idle
        connection has no task; ``_kick`` starts one when work arrives)."""
        frame: Any = None
        resumed_at = time.monotonic()
        ended = False  # ended by an error: the connection closes
        try:
            while (self._handover is not None or self._queue and self._throttle is None) \
                    and not self.closed:
                if self._handover is not None:  # begun by _serve_inline
                    frame, resumed, response, taken = self._handover
                    self._handover = None
                    if resumed is not None:
                        response = await resumed
                    del resumed
                else:
                    frame = self._dequeue()
                    taken = time.monotonic()
                    self._update_reading()
                    response = await self._dispatch(self, frame)
                if response and not self.closed:
                    await self.write(response)
                del response
                self.last_active = now = time.monotonic()
                if not self.closed:  # answered
                    self._limits.times.observe(api_key_of(frame), now - taken)
                self._release(frame)
                frame = None
                if now - resumed_at >= WORKER_SLICE_S and self._queue:
                    # Requests that complete without suspending would otherwise be
                    # answered back to back with every other connection waiting.
                    await asyncio.sleep(0)
                    resumed_at = time.monotonic()
        except CloseConnection as exc:
            log.log(logging.DEBUG if exc.reported else logging.WARNING,
                    "connection %s: %s; closing", self.peer, exc)
            ended = True
        except (ConnectionClosed, asyncio.CancelledError):
            ended = True
        except Exception:
            log.exception("connection %s: request handling failed, closing", self.peer)
            ended = True
        finally:
            if frame is not None:
                self._release(frame)
            if self._handover is not None:
                # A request _serve_inline began and this worker never took (it was
                # cancelled first): close its coroutine now, so what its first step took
                # (a partition's append lock, a fetch waiter) is let go at once, not at gc.
                frame, resumed, _, _ = self._handover
                self._handover = None
                if isinstance(resumed, _Resumed):
                    resumed.close()
                self._release(frame)
            self._worker = None
            if ended or self._draining:
                self.close()

    async def wait(self, waited: asyncio.Future[T]) -> T:
        """``await waited`` on the client's behalf, unless the client goes away first:
        then :class:`PeerGone` is raised and ``waited`` is left as it is (not cancelled:
        a coordinator's parked join completes for the group without this member's
        answer). For handlers that park a request: long polls, group joins."""
        gone = self._gone_future()
        if not gone.done():
            await asyncio.wait((waited, gone), return_when=asyncio.FIRST_COMPLETED)
        if waited.done():
            return waited.result()
        raise PeerGone()

    def _gone_future(self) -> asyncio.Future[None]:
        """Done once the peer has gone (``_peer_gone``) or the connection is closed."""
        if self._gone is None:
            self._gone = self._loop.create_future()
            if self.closed:
                self._gone.set_result(None)
        return self._gone

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
        """Send ``region`` where it waits for nobody: a small resident piece on the loop,
        a large one in a network thread, one not in the page cache in a cold-read thread
        (see network_threads.py). The residency test runs before each piece, so a region
        whose pages are read meanwhile moves back to the warm path."""
        offset, remaining = region.position, region.length
        threads, cold_threads = self._limits.threads, self._limits.cold_threads
        # A consumer fetching large regions reads on where this one ends: have the disk
        # read its next one meanwhile (once per region, not per piece).
        ahead = min(region.length, READ_AHEAD_MAX) if region.length >= THREAD_MIN_BYTES else 0
        while remaining > 0:
            if self.closed:
                raise ConnectionClosed()
            threaded = threads is not None and remaining >= THREAD_MIN_BYTES
            try:
                if threaded:
                    sent = await self._in_thread(zerocopy.send_region_wait, self.fd, region.fd,
                                                 offset, remaining, THREAD_PATIENCE_MS,
                                                 THREAD_SLICE_MS, self._pipe,
                                                 cold_threads is not None, ahead)
                elif cold_threads is not None and not zerocopy.region_resident(
                        region.fd, offset, remaining, ahead):
                    sent = zerocopy.COLD
                elif self._pipe is not None:
                    sent = self._pipe.splice(self.fd, region.fd, offset, remaining)
                else:
                    sent = zerocopy.sendfile(self.fd, region.fd, offset, remaining)
                if sent == zerocopy.COLD:
                    threaded = True
                    sent = await self._in_thread(zerocopy.send_region_wait, self.fd, region.fd,
                                                 offset, remaining, THREAD_PATIENCE_MS,
                                                 THREAD_SLICE_MS, self._pipe, pool=cold_threads)
            except OSError as exc:
                self._failed_send(exc)
            ahead = 0
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

    def _in_thread(self, fn: Callable[..., int], *args: Any,
                   pool: NetworkThreads | None = None) -> asyncio.Future[int]:
        """Run the blocking transfer ``fn(*args)`` on this socket in a thread of ``pool``
        (the network threads unless given). Until it returns the fd stays open whatever
        happens (see :meth:`close`)."""
        threads = pool or self._limits.threads
        assert threads is not None
        done: asyncio.Future[int] = self._loop.create_future()
        self._thread_users += 1
        threads.submit(self._loop, functools.partial(self._thread_returned, done), fn, args)
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
        """Wait until the socket takes more. Meanwhile this connection is not read: a
        client that does not read its answers must not make us queue more of them."""
        fut = self._write_waiter = self._loop.create_future()
        self._loop.add_writer(self.fd, _set_done, fut)
        self._write_blocked = True
        self._update_reading()
        try:
            await fut
        finally:
            self._write_waiter = None
            self._write_blocked = False
            if not self.closed:
                self._loop.remove_writer(self.fd)
                self._update_reading()
        if self.closed:
            raise ConnectionClosed()

    # lifecycle -------------------------------------------------------------------------

    def _peer_gone(self) -> None:
        """End of stream: answer what was received (requests parked on the client's
        behalf end at once), then close."""
        self.drain()
        if not self.closed:
            gone = self._gone_future()
            if not gone.done():
                gone.set_result(None)

    @property
    def idle(self) -> bool:
        """Nothing received and nothing being answered (``connections.max.idle.ms``)."""
        return not (self._worker is not None or self._charged or self._pending
                    or self._receiving or self._thread_users)

    def drain(self) -> asyncio.Task[None] | None:
        """Stop reading; the worker answers the requests already received, then closes
        (returned, to be awaited); with nothing to answer, close now (None)."""
        self._draining = True
        self._unthrottle()  # what is received is answered now
        self._update_reading()
        if self._worker is None and self._queue:
            self._kick()
        if self._worker is None:
            self.close()
        return self._worker

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._throttle is not None:
            self._throttle.cancel()
            self._throttle = None
        self._update_reading()
        self._limits.memory.forget(self)
        if self._write_waiter is not None:
            self._loop.remove_writer(self.fd)
        for waiter in (self._write_waiter, self._gone):
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
        while self._queue:
            self._release(self._dequeue())
        if self._large is not None:
            # Charged as it arrived; a network thread may still hold a view of it, so it
            # is left to the garbage collector rather than the pool.
            self._charged -= self._large_pos
            self._limits.memory.release(self._large_pos)
            self._large = None
        self._pending = None
        self._on_close(self)

    def _close_fds(self) -> None:
        """Hand the socket (and pipe) to the closer: nothing of this connection uses them
        any more, the reader and writer are removed and no thread holds the fd."""
        if self._pipe is not None:
            self._limits.closer.close(self._pipe)
        self._limits.closer.close(self.sock)


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

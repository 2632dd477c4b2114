"""The listening sockets and the set of live connections, on one asyncio (uvloop) loop.

One listening socket per listener (:mod:`pybroker.net.listeners`), all served at once;
each connection knows its listener. A connection on an SSL listener is a
:class:`~pybroker.net.tls_connection.TlsConnection` (its socket wrapped with the
listener's current context, :class:`~pybroker.net.tls.ServerTls`); the others are plain
:class:`~pybroker.net.connection.Connection` objects, to which TLS costs nothing. A
connection of a SASL listener is handed to the listener's ``on_accept`` hook
(:meth:`pybroker.security.sasl.SaslServer.accept`), which gives it a dispatch of its own
that authenticates the client before the broker's dispatch sees its requests.

The server knows framing and sockets only (see :mod:`pybroker.net.connection`); what a
frame means is the dispatcher's business (:meth:`pybroker.broker.broker.Broker.dispatch`).
Shutdown is in two steps: :meth:`Server.stop_accepting` closes the listeners, then
:meth:`Server.drain` lets every connection answer the requests it already received (up to
a deadline) and closes them.

Large transfers (file regions and received frames of ``THREAD_MIN_BYTES`` and more) run
in a pool of ``network_threads`` threads (``num.network.threads``) the server owns and its
connections share; 0 keeps everything on the loop thread. Regions whose pages are not in
the page cache go to a second pool, ``COLD_READ_THREADS`` cold-read threads, whatever
``num.network.threads`` says (``network_threads.py``: a read from disk never waits on the
loop or in a thread that serves warm data). The server also owns what its
connections share: the scratch receive buffer and the broker-wide request memory bound
(``queued.max.request.bytes``, :mod:`pybroker.net.request_memory`).

Admission, with Kafka's keys: at ``max.connections`` the server stops accepting (new
connections wait in the listen backlog, as Kafka's acceptor blocks) until one closes; a
client address at ``max.connections.per.ip`` (or its entry in
``max.connections.per.ip.overrides``) has its new connection closed at once; the three
change at run time (``set_connection_limits``: Kafka's dynamic broker configs). File
descriptors: at start the soft ``RLIMIT_NOFILE`` is raised to the hard one, and a new
connection is closed at once before the limit is reached (its descriptor number within a
tenth of the limit, at least ``FD_HEADROOM_MIN``: descriptors are numbered lowest first,
so every lower one is in use), keeping descriptors for segment files and draining the
backlog instead of leaving clients in it. When ``accept`` itself fails (EMFILE,
ENFILE, ENOBUFS, ENOMEM) the listener is left alone for ``ACCEPT_BACKOFF_S``: a full
backlog would otherwise wake the loop for nothing at full speed. A client address over its
connection creation rate (``connection_rate``: the client quotas' ``connection_creation_rate``
of IP entities, KIP-612) has its new connection closed after the throttle time it earned,
unread, as Kafka's acceptor does (a client refused at once would reconnect at once); past
the broker's ``max.connection.creation.rate`` (``accept_rate``) it stops accepting for the
throttle time, the last connection accepted left unread as long, as Kafka's acceptor
waits.
Refusals are logged once per ``REFUSAL_LOG_INTERVAL_S`` with a count.

``connections.max.idle.ms``: a connection that received nothing and had nothing to answer
for that long is closed (Kafka's idle connection reaper), so a client that stalls in the
middle of a frame does not hold its bytes forever.

Not thread-safe: every method runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from pybroker.net.connection import Connection, Dispatch, Limits, ReceiveScratch
from pybroker.net.listeners import Listener
from pybroker.net.network_threads import NetworkThreads
from pybroker.net.request_memory import RequestMemory
from pybroker.net.request_times import RequestTimes
from pybroker.net.tls import ServerTls
from pybroker.net.tls_connection import KTLS_AVAILABLE, TlsConnection

log = logging.getLogger("pybroker.net")

# Kafka's default num.network.threads. bench.single_node --threads N on 2 vCPUs, fetch of
# 4 MiB regions as a ratio of loopback: 0 threads 0.36-0.37, 2: 0.57-0.65, 3: 0.57-0.61,
# 4: 0.50-0.59 (CPU-bound: the broker's threads wait for a CPU 1.1-1.5 s per second);
# produce ingest of 1 MiB frames 0.27-0.38 with or without them. 2-4 are within the noise,
# so Kafka's value; the pool costs nothing when idle (threads blocked on a queue).
DEFAULT_NETWORK_THREADS = 3
# Threads that send regions not in the page cache (network_threads.py). They wait for the
# disk, not for a CPU, and the disk is already reading every cold region in the background
# from the moment it was found cold: two let a second cold reader go on while one waits,
# and a transfer gives its thread up after connection.THREAD_SLICE_MS, so more cold readers
# take turns rather than queue behind one.
COLD_READ_THREADS = 2
# Accepts per readable event: bounded so one accept storm cannot starve the loop.
ACCEPT_BATCH = 16
ACCEPT_BACKOFF_S = 0.5
REFUSAL_LOG_INTERVAL_S = 10.0
# Descriptors kept free for segment files, checkpoints and the like: a tenth of the limit,
# at least 64.
FD_HEADROOM_MIN = 64
_ACCEPT_RESOURCE_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def raise_open_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open file limit from %d to %d: %s", soft, hard,
                        exc)
    return soft


def parse_ip_overrides(text: str) -> dict[str, int]:
    """Kafka's ``max.connections.per.ip.overrides``: ``host:N,host:N``; host names are
    resolved once, here."""
    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        host, sep, count = item.rpartition(":")
        if not sep or not count.strip().isdigit():
            raise ValueError(f"max.connections.per.ip.overrides: not HOST:COUNT: {item!r}")
        host = host.strip().strip("[]")
        try:
            address = socket.getaddrinfo(host, None)[0][4][0]
        except OSError:
            address = host
        out[str(address)] = int(count)
    return out


class _RateLimitedLog:
    """One log line per interval for a repeated condition, with how often it happened."""

    def __init__(self, interval_s: float) -> None:
        self._interval = interval_s
        self._last: dict[str, float] = {}
        self._counts: Counter[str] = Counter()

    def __call__(self, key: str, level: int, message: str, *args: object) -> None:
        self._counts[key] += 1
        now = time.monotonic()
        if now - self._last.get(key, -self._interval) < self._interval:
            return
        count = self._counts.pop(key)
        self._last[key] = now
        suffix = f" ({count} times in the last {self._interval:.0f} s)" if count > 1 else ""
        log.log(level, message + suffix, *args)


class _Acceptor:
    """One listener's socket (None until bound, and once closed), its TLS, and what
    prepares each of its new connections before it is read (SASL)."""

    __slots__ = ("listener", "tls", "on_accept", "sock")

    def __init__(self, listener: Listener, tls: ServerTls | None,
                 on_accept: Callable[[Connection], None] | None) -> None:
        self.listener = listener
        self.tls = tls
        self.on_accept = on_accept
        self.sock: socket.socket | None = None

    def bind(self, backlog: int) -> None:
        host, port = self.listener.host, self.listener.port
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(backlog)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.sock = sock
        log.info("listener %s (%s) on %s:%d%s", self.listener.name,
                 self.listener.security_protocol, *sock.getsockname()[:2],
                 "" if self.tls is None else
                 f"; fetch over TLS {'uses kTLS' if KTLS_AVAILABLE else 'copies (no kTLS)'}")

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class Server:
    def __init__(self, dispatch: Dispatch, listeners: Sequence[Listener], *,
                 tls: Mapping[str, ServerTls] | None = None,
                 on_accept: Mapping[str, Callable[[Connection], None]] | None = None,
                 max_request_bytes: int, max_queued_bytes: int,
                 queued_max_request_bytes: int = 256 * 1024 * 1024,
                 max_connections: int = 2**31 - 1, max_connections_per_ip: int = 2**31 - 1,
                 max_connections_per_ip_overrides: str = "",
                 connections_max_idle_ms: int = 600_000, backlog: int = 1024,
                 network_threads: int = DEFAULT_NETWORK_THREADS,
                 connection_rate: Callable[[str], int] | None = None,
                 accept_rate: Callable[[Listener], int] | None = None) -> None:
        if network_threads < 0:
            raise ValueError(f"num.network.threads must be >= 0, not {network_threads}")
        if queued_max_request_bytes < max_request_bytes:
            raise ValueError(f"queued.max.request.bytes ({queued_max_request_bytes}) must be "
                             f"at least socket.request.max.bytes ({max_request_bytes})")
        self._dispatch = dispatch
        tls, on_accept = tls or {}, on_accept or {}
        self._acceptors = [_Acceptor(listener, tls.get(listener.name),
                                     on_accept.get(listener.name))
                           for listener in listeners]
        for acceptor in self._acceptors:
            if acceptor.listener.tls and acceptor.tls is None:
                raise ValueError(f"listener {acceptor.listener.name}: no TLS settings")
        self._backlog = backlog
        self._network_threads = network_threads
        self.memory = RequestMemory(queued_max_request_bytes)
        self.request_times = RequestTimes()
        self._limits = Limits(max_request_bytes, max_queued_bytes, self.memory,
                              ReceiveScratch(), times=self.request_times)
        self._max_connections = max_connections
        self._max_per_ip = max_connections_per_ip
        self._per_ip_overrides = parse_ip_overrides(max_connections_per_ip_overrides)
        self._idle_s = connections_max_idle_ms / 1000 if connections_max_idle_ms > 0 else 0.0
        self._accepting = False
        self._resume_accepting: asyncio.TimerHandle | None = None
        self._idle_sweep: asyncio.TimerHandle | None = None
        self._fd_limit = 0
        self._per_ip: Counter[str] = Counter()
        # ip -> ms to hold a new connection before closing it, 0 to take it
        self._connection_rate = connection_rate
        self._throttled: dict[socket.socket, asyncio.TimerHandle] = {}  # closed when due
        # listener -> ms to stop accepting after a connection accepted on it, 0 to go on
        self._accept_rate = accept_rate
        self._refusals = _RateLimitedLog(REFUSAL_LOG_INTERVAL_S)
        self.connections: set[Connection] = set()
        self.accepted = 0
        self.refused = 0

    @property
    def network_threads(self) -> NetworkThreads | None:
        """The pool of ``num.network.threads`` (None: 0 threads, or not started)."""
        return self._limits.threads

    @property
    def cold_read_threads(self) -> NetworkThreads | None:
        """The pool that sends regions not in the page cache (None: not started)."""
        return self._limits.cold_threads

    @property
    def addresses(self) -> dict[str, tuple[str, int]]:
        """Listener name -> the bound (host, port), in the listeners' order."""
        out = {}
        for acceptor in self._acceptors:
            assert acceptor.sock is not None
            host, port = acceptor.sock.getsockname()[:2]
            out[acceptor.listener.name] = (host, port)
        return out

    def start(self) -> dict[str, tuple[str, int]]:
        """Bind and listen on every listener; returns :attr:`addresses` (port 0 picks a
        free one)."""
        try:
            for acceptor in self._acceptors:
                acceptor.bind(self._backlog)
        except OSError:
            self.stop_accepting()
            raise
        self._fd_limit = raise_open_file_limit()
        if self._network_threads and self._limits.threads is None:
            self._limits.threads = NetworkThreads(self._network_threads)
        if self._limits.cold_threads is None:
            self._limits.cold_threads = NetworkThreads(COLD_READ_THREADS, "pybroker-cold")
        log.info("network threads: %d; open file limit %d; queued.max.request.bytes %d",
                 self._network_threads, self._fd_limit, self.memory.limit)
        self._set_accepting(True)
        if self._idle_s:
            self._schedule_idle_sweep()
        return self.addresses

    # accept -------------------------------------------------------------------------------

    def _set_accepting(self, on: bool) -> None:
        if on == self._accepting:
            return
        loop = asyncio.get_running_loop()
        for acceptor in self._acceptors:
            if acceptor.sock is None:
                continue
            if on:
                loop.add_reader(acceptor.sock.fileno(), self._accept, acceptor)
            else:
                loop.remove_reader(acceptor.sock.fileno())
        self._accepting = on

    def set_connection_limits(self, max_connections: int, max_connections_per_ip: int,
                              max_connections_per_ip_overrides: str) -> None:
        """New admission limits (Kafka's dynamic ``max.connections*``), for the next
        connection accepted; connections already open stay."""
        self._per_ip_overrides = parse_ip_overrides(max_connections_per_ip_overrides)
        self._max_connections = max_connections
        self._max_per_ip = max_connections_per_ip
        if any(acceptor.sock is not None for acceptor in self._acceptors):  # listening
            self._maybe_accept()

    def _back_off(self, seconds: float = ACCEPT_BACKOFF_S) -> None:
        """Leave the listeners alone for a while (a full backlog stays readable)."""
        self._set_accepting(False)
        if self._resume_accepting is None:
            self._resume_accepting = asyncio.get_running_loop().call_later(
                seconds, self._resume_after_backoff)

    def _resume_after_backoff(self) -> None:
        self._resume_accepting = None
        self._maybe_accept()

    def _maybe_accept(self) -> None:
        if self._resume_accepting is None and len(self.connections) < self._max_connections:
            self._set_accepting(True)

    def _accept(self, acceptor: _Acceptor) -> None:
        listener = acceptor.sock
        assert listener is not None
        for _ in range(ACCEPT_BATCH):
            if len(self.connections) >= self._max_connections:
                self._refusals("max.connections", logging.WARNING,
                               "max.connections %d reached: new connections wait",
                               self._max_connections)
                self._set_accepting(False)  # a close resumes accepting
                return
            try:
                sock, addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _ACCEPT_RESOURCE_ERRORS:
                    self._refusals("accept", logging.WARNING,
                                   "accept failed: %s; retrying in %.1f s", exc,
                                   ACCEPT_BACKOFF_S)
                    self._back_off()
                else:
                    log.warning("accept failed: %s", exc)
                return
            ip = str(addr[0]) if isinstance(addr, tuple) else str(addr)
            if self._refused(sock, ip) or self._throttled_connection(sock, ip):
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)
            conn: Connection
            if acceptor.tls is None:
                conn = Connection(sock, peer, self._dispatch, self._limits, self._closed,
                                  acceptor.listener)
            else:
                try:
                    tls_sock = acceptor.tls.context().wrap_socket(
                        sock, server_side=True, do_handshake_on_connect=False)
                except (OSError, ValueError) as exc:
                    log.warning("connection %s (listener %s): TLS set-up failed: %s", peer,
                                acceptor.listener.name, exc)
                    sock.close()
                    continue
                conn = TlsConnection(tls_sock, peer, self._dispatch, self._limits,
                                     self._closed, acceptor.listener, acceptor.tls)
            if acceptor.on_accept is not None:  # (nothing is read before the loop's next turn)
                acceptor.on_accept(conn)
            self.accepted += 1
            self._per_ip[ip] += 1
            self.connections.add(conn)
            pause_ms = self._accept_rate(acceptor.listener) if self._accept_rate else 0
            if pause_ms:
                self._refusals("creation rate", logging.INFO,
                               "max.connection.creation.rate reached: accepting again "
                               "in %d ms", pause_ms)
                conn.throttle(pause_ms)
                self._back_off(pause_ms / 1000)
                return

    def _throttled_connection(self, sock: socket.socket, ip: str) -> bool:
        """Hold a connection over its address's creation rate, unread, for its throttle
        time, then close it (Kafka's ``DelayedCloseSocket``)."""
        throttle_ms = self._connection_rate(ip) if self._connection_rate is not None else 0
        if not throttle_ms:
            return False
        self._refusals(f"rate {ip}", logging.INFO, "closing a connection from %s in %d ms: "
                       "over its connection_creation_rate quota", ip, throttle_ms)
        self.refused += 1
        self._throttled[sock] = asyncio.get_running_loop().call_later(
            throttle_ms / 1000, self._close_throttled, sock)
        return True

    def _close_throttled(self, sock: socket.socket) -> None:
        self._throttled.pop(sock).cancel()
        sock.close()

    def _refused(self, sock: socket.socket, ip: str) -> bool:
        """Close a new connection over a limit at once (with a rate-limited log line)."""
        limit = self._per_ip_overrides.get(ip, self._max_per_ip)
        if self._per_ip[ip] >= limit:
            self._refusals(f"ip {ip}", logging.INFO,
                           "refused a connection from %s: max.connections.per.ip %d", ip, limit)
        elif sock.fileno() >= self._fd_limit - max(FD_HEADROOM_MIN, self._fd_limit // 10):
            self._refusals("fd", logging.WARNING,
                           "refused a connection: %d files open, the limit is %d",
                           sock.fileno() + 1, self._fd_limit)
        else:
            return False
        self.refused += 1
        sock.close()
        return True

    def _closed(self, conn: Connection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            ip = conn.peer.rpartition(":")[0]
            self._per_ip[ip] -= 1
            if self._per_ip[ip] <= 0:
                del self._per_ip[ip]
            self._maybe_accept()

    # idle connections ----------------------------------------------------------------------

    def _schedule_idle_sweep(self) -> None:
        self._idle_sweep = asyncio.get_running_loop().call_later(
            min(self._idle_s / 4, 30.0), self._close_idle)

    def _close_idle(self) -> None:
        deadline = time.monotonic() - self._idle_s
        for conn in [c for c in self.connections if c.last_active < deadline and c.idle]:
            log.info("connection %s: idle for %.0f s (connections.max.idle.ms), closing",
                     conn.peer, time.monotonic() - conn.last_active)
            conn.close()
        self._schedule_idle_sweep()

    # shutdown -------------------------------------------------------------------------------

    def stop_accepting(self) -> None:
        for timer in (self._resume_accepting, self._idle_sweep):
            if timer is not None:
                timer.cancel()
        self._resume_accepting = self._idle_sweep = None
        self._set_accepting(False)
        for acceptor in self._acceptors:
            acceptor.close()
        for sock in list(self._throttled):
            self._close_throttled(sock)

    async def drain(self, timeout: float) -> None:
        """Answer in-flight requests on every connection (up to ``timeout`` s), then close."""
        workers = [worker for conn in list(self.connections)
                   if (worker := conn.drain()) is not None]
        if workers:
            _, late = await asyncio.wait(workers, timeout=timeout)
            if late:
                log.warning("%d connections still busy at shutdown, closing them", len(late))
        for conn in list(self.connections):
            conn.close()
        self._limits.closer.flush()
        if self._limits.threads is not None:
            await self._limits.threads.stop(timeout=1.0)
            self._limits.threads = None
        if self._limits.cold_threads is not None:
            await self._limits.cold_threads.stop(timeout=1.0)
            self._limits.cold_threads = None

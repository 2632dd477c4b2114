"""A client connection on an SSL listener: :class:`Connection` with its bytes through TLS.

Design. The server wraps the accepted socket in a non-blocking ``ssl.SSLSocket`` and
this subclass overrides only the system calls: the handshake runs on the loop first
(``do_handshake`` until it stops wanting to read or write), then the base class's
receive path runs unchanged on the SSLSocket (``recv_into``: one TLS record's plaintext
at most, ``SSLWantReadError`` meaning "nothing yet"), and sends go through ``send``.
The plaintext class is untouched: a PLAINTEXT connection pays nothing for TLS. (An
``SSLObject`` with memory BIOs, uvloop's design, would add a copy between the BIOs and
the socket and the BIO bookkeeping; the SSLSocket does the same work in OpenSSL.)

Two things differ from a plain socket:
- Decrypted bytes can wait inside OpenSSL while the socket has nothing to read (a record
  read in part because the receive asked for less), so readiness of the fd is not
  enough: whenever reading is on and ``pending()`` is not zero, a read is scheduled.
- OpenSSL writes a buffer whole or not at all (``SSL_write`` without partial writes):
  after ``SSLWantWriteError`` the same bytes are offered again once the socket is
  writable (the buffer may move, its content may not change).

File regions (fetch) cannot be sent with sendfile/splice: their bytes must be encrypted
in user space. They are read with ``preadv`` into a buffer of at most
``REGION_CHUNK`` and written through TLS: the copying fallback. A chunk not in the page
cache is read by a cold-read thread, never on the loop (``network_threads.py``). Kernel TLS (kTLS, which
lets sendfile encrypt in the kernel) needs the negotiated keys handed to the socket
(``TCP_ULP`` "tls" and ``SOL_TLS`` crypto info), which Python's ``ssl`` module does
not expose, and this machine's kernel has no ``tls`` module anyway: ``KTLS_AVAILABLE``
says False and the copying path is the one that runs.

Large frames (produce) are decrypted by the network threads, as plaintext ones are
received by them: once ``THREAD_MIN_BYTES`` of a frame are missing, a thread runs
``tlsread.recv_wait`` (``SSL_read`` straight into the frame's buffer, the GIL released
for the whole transfer): on the loop, a TLS producer's reads and their decryption would
wait behind everything else the loop does (appends, responses, other connections) and
hold it up in turn (BENCHMARKS.md, TLS against plaintext). OpenSSL lets one thread
at a time use a session, so while a thread holds it the loop does not touch it: a
response asks the thread to stop after the record in hand and waits for it
(``_session_free``), and reading stays off (the base class's rule for a threaded
receive), so ``pending()`` is not asked either. The rest of the frame goes to a thread
again once the response is out, so a pipelining producer's answers do not wait for the
next frame. Where ``tlsread`` cannot reach the session (``AVAILABLE`` False: a CPython whose
``_ssl`` objects it does not know), the loop decrypts everything, as with
``num.network.threads=0``.

Failures: a handshake that fails (a plaintext client, a wrong CA, no certificate where
``ssl.client.auth=required``, a subject no mapping rule accepts) or is not done within
``ssl.handshake.timeout.ms`` is one log line and a closed connection; nobody else is
affected.

Not thread-safe: the event loop thread only.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import ssl
from collections.abc import Callable, Sequence
from typing import Any

from pybroker._native import tlsread, zerocopy
from pybroker.file_region import FileRegion
from pybroker.net.connection import (
    LOOP_READ_MAX,
    READ_AHEAD_MAX,
    THREAD_MIN_BYTES,
    THREAD_PATIENCE_MS,
    THREAD_SLICE_MS,
    Connection,
    ConnectionClosed,
    Dispatch,
    Limits,
    Part,
)
from pybroker.net.listeners import Listener
from pybroker.net.tls import ServerTls, peer_principal

log = logging.getLogger("pybroker.net")

# File regions go through TLS in reads of at most this much: 16 TLS records per write,
# and the buffer a connection holds while one is sent.
REGION_CHUNK = 256 * 1024
# Python's ssl cannot install negotiated keys in the kernel (see the module docstring).
KTLS_AVAILABLE = False
_NONE, _READ, _WRITE = 0, 1, 2  # what the handshake waits for
_WOULD_BLOCK = (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError,
                InterruptedError)


class TlsConnection(Connection):
    __slots__ = ("_tls", "_handshaking", "_handshake_watch", "_handshake_timer",
                 "_pending_read", "_session_waiter", "_session_wanted")

    def __init__(self, sock: ssl.SSLSocket, peer: str, dispatch: Dispatch, limits: Limits,
                 on_close: Callable[[Connection], None], listener: Listener,
                 tls: ServerTls) -> None:
        # set before the base class's __init__, whose _update_reading must not read yet
        self._tls = tls
        self._handshaking = True
        self._handshake_watch = _NONE
        self._pending_read: Any = None
        self._session_waiter: asyncio.Future[None] | None = None  # a send waits for a thread
        self._session_wanted = bytearray(1)  # set: the thread stops after its record
        super().__init__(sock, peer, dispatch, limits, on_close, listener)
        self._handshake_timer = self._loop.call_later(tls.handshake_timeout_s,
                                                      self._handshake_timed_out)
        self._watch(_READ)  # the client speaks first (ClientHello)

    # handshake -------------------------------------------------------------------------

    def _handshake(self) -> None:
        sock: ssl.SSLSocket = self.sock  # type: ignore[assignment]
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self._watch(_READ)
            return
        except ssl.SSLWantWriteError:
            self._watch(_WRITE)
            return
        except OSError as exc:  # ssl.SSLError included: a plaintext client, a wrong CA
            log.info("connection %s (listener %s): TLS handshake failed: %s; closing",
                     self.peer, self.listener.name, exc)
            self.close()
            return
        self._watch(_NONE)
        self._handshake_timer.cancel()
        principal = peer_principal(sock, self._tls.mapper)
        if principal is None:
            log.warning("connection %s (listener %s): no ssl.principal.mapping.rules rule "
                        "applies to the certificate subject; closing", self.peer,
                        self.listener.name)
            self.close()
            return
        self.principal = principal
        self._handshaking = False
        cipher = sock.cipher()
        log.debug("connection %s (listener %s): %s, %s, principal %s", self.peer,
                  self.listener.name, sock.version(), cipher[0] if cipher else "?",
                  principal)
        self._update_reading()

    def _watch(self, watch: int) -> None:
        """Go on with the handshake when the socket is readable (_READ), writable
        (_WRITE), or never (_NONE)."""
        if self._handshake_watch == watch:
            return
        if self._handshake_watch == _READ:
            self._loop.remove_reader(self.fd)
        elif self._handshake_watch == _WRITE:
            self._loop.remove_writer(self.fd)
        if watch == _READ:
            self._loop.add_reader(self.fd, self._handshake)
        elif watch == _WRITE:
            self._loop.add_writer(self.fd, self._handshake)
        self._handshake_watch = watch

    def _handshake_timed_out(self) -> None:
        log.info("connection %s (listener %s): TLS handshake not done in %.1f s "
                 "(ssl.handshake.timeout.ms); closing", self.peer, self.listener.name,
                 self._tls.handshake_timeout_s)
        self.close()

    # receive ---------------------------------------------------------------------------

    def _update_reading(self) -> None:
        if self._handshaking:
            return
        super()._update_reading()
        if self._reading and self._pending_read is None and \
                self.sock.pending():  # type: ignore[attr-defined]
            self._pending_read = self._loop.call_soon(self._read_pending)

    def _read_pending(self) -> None:
        self._pending_read = None
        if self._reading:
            self._on_readable()

    def _receive_small(self) -> int:
        try:
            return super()._receive_small()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise BlockingIOError() from None

    def _receive_large(self) -> int:
        """Up to ``LOOP_READ_MAX`` of a large frame per readiness, as on a plain socket:
        one ``SSL_read`` gives one TLS record (16 KiB at most), and returning to the loop
        after each would be 64 loop iterations (and memory checks) per MiB. One record
        only when a network thread can take the rest (the base class hands it over
        right after)."""
        assert self._large is not None
        threaded = self._threads_decrypt() and \
            len(self._large) - self._large_pos > THREAD_MIN_BYTES
        budget = 1 if threaded else LOOP_READ_MAX
        total = 0
        while self._large is not None and total < budget:
            try:
                n = super()._receive_large()
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                if total:
                    break
                raise BlockingIOError() from None
            if n == 0:
                break  # end of stream: reported by this read or the next
            total += n
        return total

    def _receive_in_thread(self) -> None:
        """A network thread decrypts the rest of the frame, unless a response waits for
        the TLS session: then the loop reads this time and the response goes first."""
        if self._threads_decrypt():
            super()._receive_in_thread()

    def _threads_decrypt(self) -> bool:
        """Whether a network thread may take this connection's large frame now."""
        return tlsread.AVAILABLE and self._limits.threads is not None and \
            self._session_waiter is None

    def _thread_receive(self, part: memoryview) -> tuple[Any, ...]:
        self._session_wanted[0] = 0
        return (tlsread.recv_wait, self.sock, part, THREAD_PATIENCE_MS, THREAD_SLICE_MS,
                self._session_wanted)

    def _received_in_thread(self, part: memoryview, done: asyncio.Future[int]) -> None:
        super()._received_in_thread(part, done)
        if self._session_waiter is not None and not self._session_waiter.done():
            self._session_waiter.set_result(None)

    async def _session_free(self) -> None:
        """Wait until no network thread uses the TLS session (OpenSSL's ``SSL`` takes
        one thread at a time: a send must not run during a thread's decryption). The
        thread is asked to stop after the record in hand; the rest of its frame is
        received after the send."""
        self._session_wanted[0] = 1
        waiter = self._session_waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._session_waiter = None

    # send ------------------------------------------------------------------------------

    def _send_now(self, parts: Sequence[Part]) -> Sequence[Part] | None:
        if len(parts) != 1 or isinstance(parts[0], FileRegion) or self._receiving:
            return parts
        view = memoryview(parts[0]).cast("B")
        try:
            sent = self.sock.send(view)
        except OSError:  # wants to wait, or an error the worker's write reports
            return parts
        zerocopy.count_copied(sent)
        return None if sent == len(view) else [view[sent:]]

    async def _send_buffers(self, buffers: list[Any], flags: int = 0) -> None:
        data = buffers[0] if len(buffers) == 1 else b"".join(buffers)
        await self._send_tls(memoryview(data).cast("B"))

    async def _send_tls(self, data: memoryview) -> None:
        """All of ``data`` through TLS (offered again, whole, while OpenSSL waits)."""
        while data:
            if self.closed:
                raise ConnectionClosed()
            if self._receiving:
                await self._session_free()
                continue
            try:
                sent = self.sock.send(data)
            except _WOULD_BLOCK:
                await self._writable()
                continue
            except OSError as exc:
                self._failed_send(exc)
            zerocopy.count_copied(sent)
            data = data[sent:]

    async def _send_region(self, region: FileRegion) -> None:
        """The copying fallback: read the region in chunks, write each through TLS. A
        chunk not in the page cache is read by a cold-read thread (the loop must not
        wait for the disk), with the rest of the region read ahead meanwhile."""
        offset, remaining = region.position, region.length
        chunk = memoryview(bytearray(min(remaining, REGION_CHUNK)))
        cold_threads = self._limits.cold_threads
        ahead = min(remaining, READ_AHEAD_MAX)
        while remaining > 0:
            piece = chunk[:remaining]
            try:
                if cold_threads is not None and not zerocopy.region_resident(
                        region.fd, offset, len(piece), ahead):
                    n = await self._in_thread(os.preadv, region.fd, [piece], offset,
                                              pool=cold_threads)
                else:
                    n = os.preadv(region.fd, [piece], offset)
            except OSError as exc:
                self._failed_send(exc)
            if n == 0:
                self._failed_send(OSError(errno.ENODATA, "file ends before the region"))
            await self._send_tls(chunk[:n])
            ahead = 0
            offset += n
            remaining -= n

    # lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        if self.closed:
            return
        self._handshake_timer.cancel()
        self._watch(_NONE)
        if self._pending_read is not None:
            self._pending_read.cancel()
            self._pending_read = None
        if self._session_waiter is not None and not self._session_waiter.done():
            self._session_waiter.set_result(None)
        super().close()

"""The listening socket and the set of live connections, on one asyncio (uvloop) loop.

The server knows framing and sockets only (see :mod:`pybroker.net.connection`); what a
frame means is the dispatcher's business (:meth:`pybroker.broker.broker.Broker.dispatch`).
Shutdown is in two steps: :meth:`Server.stop_accepting` closes the listener, then
:meth:`Server.drain` lets every connection answer the requests it already received (up to
a deadline) and closes them.

Large transfers (file regions and received frames of ``THREAD_MIN_BYTES`` and more) run
in a pool of ``network_threads`` threads (``num.network.threads``) the server owns and its
connections share; 0 keeps everything on the loop thread.

Not thread-safe: every method runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from pybroker.net.connection import Connection, Dispatch
from pybroker.net.network_threads import NetworkThreads

log = logging.getLogger("pybroker.net")

# Kafka's default num.network.threads. bench.single_node --threads N on 2 vCPUs, fetch of
# 4 MiB regions as a ratio of loopback: 0 threads 0.36-0.37, 2: 0.57-0.65, 3: 0.57-0.61,
# 4: 0.50-0.59 (CPU-bound: the broker's threads wait for a CPU 1.1-1.5 s per second);
# produce ingest of 1 MiB frames 0.27-0.38 with or without them. 2-4 are within the noise,
# so Kafka's value; the pool costs nothing when idle (threads blocked on a queue).
DEFAULT_NETWORK_THREADS = 3


class Server:
    def __init__(self, dispatch: Dispatch, host: str, port: int, *,
                 max_request_bytes: int, max_queued_bytes: int, backlog: int = 1024,
                 network_threads: int = DEFAULT_NETWORK_THREADS) -> None:
        self._dispatch = dispatch
        self._host, self._port = host, port
        self._max_request = max_request_bytes
        self._max_queued = max_queued_bytes
        self._backlog = backlog
        if network_threads < 0:
            raise ValueError(f"num.network.threads must be >= 0, not {network_threads}")
        self._network_threads = network_threads
        self._threads: NetworkThreads | None = None
        self._listener: socket.socket | None = None
        self.connections: set[Connection] = set()
        self.accepted = 0

    @property
    def address(self) -> tuple[str, int]:
        assert self._listener is not None
        host, port = self._listener.getsockname()[:2]
        return host, port

    def start(self) -> tuple[str, int]:
        """Bind and listen; returns the bound (host, port) (port 0 picks a free one)."""
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self._host, self._port))
        listener.listen(self._backlog)
        listener.setblocking(False)
        self._listener = listener
        if self._network_threads and self._threads is None:
            self._threads = NetworkThreads(self._network_threads)
        log.info("network threads: %d", self._network_threads)
        asyncio.get_running_loop().add_reader(listener.fileno(), self._accept)
        return self.address

    def _accept(self) -> None:
        assert self._listener is not None
        for _ in range(64):  # bounded so one accept storm cannot starve the loop
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and friends: log, keep listening
                log.warning("accept failed: %s", exc)
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)
            self.accepted += 1
            conn = Connection(sock, peer, self._dispatch, self._max_request,
                              self._max_queued, self.connections.discard, self._threads)
            self.connections.add(conn)

    def stop_accepting(self) -> None:
        if self._listener is not None:
            asyncio.get_running_loop().remove_reader(self._listener.fileno())
            self._listener.close()
            self._listener = None

    async def drain(self, timeout: float) -> None:
        """Answer in-flight requests on every connection (up to ``timeout`` s), then close."""
        workers = [conn.drain() for conn in list(self.connections)]
        if workers:
            _, late = await asyncio.wait(workers, timeout=timeout)
            if late:
                log.warning("%d connections still busy at shutdown, closing them", len(late))
        for conn in list(self.connections):
            conn.close()
        if self._threads is not None:
            await self._threads.stop(timeout=1.0)
            self._threads = None

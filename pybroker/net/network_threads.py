"""The process's network threads: small pools that run blocking bulk transfers.

Connections (``connection.py``) hand file regions of ``THREAD_MIN_BYTES`` and more, and
the rest of large received frames, to these threads, which move the bytes with the
native ``send_region_wait``/``recv_wait`` (syscall and poll with the GIL released) while
the event loop serves everyone else. Kafka has ``num.network.threads`` for the same
reason; unlike Kafka's, these own no connection, only transfers.

Cold reads. A region whose pages are not in the page cache makes its sendfile wait for
the disk, milliseconds per MiB, and a thread waiting for the disk serves nobody else:
Kafka's network processor sends with ``transferTo`` on its selector thread, so a cold
read there stalls every other connection of that processor. Here no thread that serves
warm data waits for the disk: the loop asks (``zerocopy.region_resident``: one cachestat
on Linux 6.5+) before sending a small region itself, a network thread asks before sending
a large one (``send_region_wait(warm_only=True)``, the test on the thread, off the loop),
and a region that is not resident goes, with its background reading already started
(``POSIX_FADV_WILLNEED``), to a second pool of the same class, the cold-read threads
(``server.COLD_READ_THREADS``), which waits for the disk on its behalf. Warm transfers keep
flowing through the loop and the network threads meanwhile; a connection's own responses
stay in order because its worker awaits each transfer, whichever pool runs it.

Use: each thread adds the wall time of every transfer it runs to its own slot of
``busy_s`` (no two threads write one slot, so no lock); ``busy_seconds()`` is their sum,
the time the pool was moving bytes (Kafka's network processors report the opposite,
their idle share).
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from typing import Any


class NetworkThreads:
    """The process's ``num.network.threads`` threads for blocking bulk transfers.

    Connections submit one transfer at a time per direction; a thread runs it with the
    GIL released and reports back with ``loop.call_soon_threadsafe(callback, result,
    error)``, after dropping its references to the arguments (so a received frame's
    buffer is not still referenced when the loop looks at it to recycle it).
    Thread-safe: ``submit`` may be called from any thread.
    """

    def __init__(self, count: int, name: str = "pybroker-net") -> None:
        self.count = count
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.busy_s = [0.0] * count
        self._threads = [threading.Thread(target=self._work, args=(i,),
                                          name=f"{name}-{i}", daemon=True)
                         for i in range(count)]
        for thread in self._threads:
            thread.start()

    def submit(self, loop: asyncio.AbstractEventLoop,
               callback: Callable[[Any, BaseException | None], None],
               fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._jobs.put((loop, callback, fn, args))

    def close(self) -> None:
        """The threads end once the transfers already submitted are done."""
        for _ in range(self.count):
            self._jobs.put(None)

    async def stop(self, timeout: float) -> None:
        """``close``, then wait (up to ``timeout`` s, without blocking the loop) until the
        threads have ended and the loop has run their last callbacks: a connection closed
        while a thread used its socket closes its fd in that callback, which would never
        run if the loop stopped first. A thread's transfer ends within a slice
        (``connection.THREAD_SLICE_MS``) once its socket is shut down, so this is short."""
        self.close()
        deadline = time.monotonic() + timeout
        while any(t.is_alive() for t in self._threads) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0)  # the callbacks they scheduled

    def busy_seconds(self) -> float:
        """Wall time the threads have spent in transfers, all together."""
        return sum(self.busy_s)

    def _work(self, slot: int) -> None:
        while (job := self._jobs.get()) is not None:
            loop, callback, fn, args = job
            del job
            result, error = None, None
            started = time.monotonic()
            try:
                result = fn(*args)
            except BaseException as exc:  # handed to the loop, which raises it there
                error = exc
            self.busy_s[slot] += time.monotonic() - started
            del fn, args
            try:
                loop.call_soon_threadsafe(callback, result, error)
            except RuntimeError:  # the loop is closed: the process is exiting
                pass
            del loop, callback, result, error

"""The broker-wide bound on memory held by requests (``queued.max.request.bytes``).

What is counted: the bytes of every request frame a connection has received and not yet
answered, whole frames waiting in a queue, frames being handled and the received part of
a large frame still arriving, plus a fixed overhead per small frame (a pipelining client's
40-byte requests cost more in objects than in bytes). A frame's size prefix reserves
nothing: a large frame is charged as its bytes arrive, because its buffer grows with them
(``pybroker._native.framebuffer``).

Past the bound, connections stop being read instead of allocating: a connection that
already holds charged bytes pauses (``Connection`` asks :meth:`RequestMemory.admit` after
each receive) and waits in arrival order; as answered requests release memory the waiting
connections resume. A connection holding nothing may always read (one receive, at most a
large read's worth), so a client that waits for its answers before sending more, a
consumer or a canary, is never stopped by others' backlog; that is the overdraft one
connection can cause.

Kafka's memory pool allocates a frame's whole declared size before reading it, so frames
in progress can always complete. Here partial frames hold only what arrived, and if the
whole bound is held by partial frames of paused connections nothing would be released
again. The breaker handles that: while connections wait and nothing was released for
``BREAKER_S``, the longest-waiting connection is let read once more (it pauses again if
still over), so frames still complete, one read at a time.

Not thread-safe: the event loop thread only.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Protocol

# How long the waiting connections may see no memory released before one of them reads
# anyway (frames complete although partial frames of paused connections hold the bound).
BREAKER_S = 0.1


class MemoryWaiter(Protocol):
    def memory_granted(self) -> None:
        """May read again (it asks ``admit`` again after its next receive)."""


class RequestMemory:
    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError(f"queued.max.request.bytes must be positive, not {limit}")
        self.limit = limit
        self.used = 0
        self.peak = 0
        self._waiting: collections.OrderedDict[MemoryWaiter, None] = collections.OrderedDict()
        self._released = 0  # bytes released so far: the breaker's sign of progress
        self._breaker: asyncio.TimerHandle | None = None
        self._released_at_arm = 0

    @property
    def over(self) -> bool:
        return self.used >= self.limit

    def charge(self, n: int) -> None:
        self.used += n
        if self.used > self.peak:
            self.peak = self.used

    def release(self, n: int) -> None:
        self.used -= n
        self._released += n
        if self._waiting and self.used < self.limit:
            self._grant_while_under()

    def admit(self, waiter: MemoryWaiter, holding: int) -> bool:
        """Whether a connection that holds ``holding`` charged bytes may read on; if not,
        it is queued and told ``memory_granted`` when it may."""
        if holding == 0 or self.used < self.limit:
            return True
        self._waiting[waiter] = None
        if self._breaker is None:
            self._arm_breaker()
        return False

    def forget(self, waiter: MemoryWaiter) -> None:
        """A closed connection leaves the queue."""
        if self._waiting:
            self._waiting.pop(waiter, None)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _grant_while_under(self) -> None:
        # Each granted connection reads at most once before asking again, so granting all
        # of them while under the bound overshoots by at most one read each.
        while self._waiting and self.used < self.limit:
            waiter, _ = self._waiting.popitem(last=False)
            waiter.memory_granted()

    def _arm_breaker(self) -> None:
        self._released_at_arm = self._released
        self._breaker = asyncio.get_running_loop().call_later(BREAKER_S, self._break)

    def _break(self) -> None:
        self._breaker = None
        if not self._waiting:
            return
        if self._released == self._released_at_arm:
            waiter, _ = self._waiting.popitem(last=False)
            waiter.memory_granted()
        if self._waiting:
            self._arm_breaker()

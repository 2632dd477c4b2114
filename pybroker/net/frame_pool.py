"""Free large-frame buffers, shared by every connection of the process.

A frame above ``LARGE_FRAME`` is received into a ``bytearray`` of its own (see
``connection.py``). A fresh one costs a zero-fill and a page fault per 4 KiB, about a fifth
of the broker's CPU on 1 MiB produce batches, so answered frames come back here and the
next large frame of about their size is received into one of them. The pool is the
process's and not each connection's because producers often open a connection per task
(Spark writes) and pipeline several requests, so a per-connection pool of one or two
buffers is mostly cold or too small.

Only the event loop thread takes and gives buffers (network threads receive into a
buffer they were handed, and hand it back before it is recycled).
"""

from __future__ import annotations

# What the pool may keep: enough for a few pipelined producers of 1 MiB batches, little
# next to the page cache those batches go to.
MAX_POOL_BYTES = 32 * 1024 * 1024
MAX_POOL_BUFFERS = 64


class FramePool:
    def __init__(self, max_bytes: int = MAX_POOL_BYTES,
                 max_buffers: int = MAX_POOL_BUFFERS) -> None:
        self._free: list[bytearray] = []
        self._bytes = 0
        self._max_bytes = max_bytes
        self._max_buffers = max_buffers

    def take(self, size: int) -> bytearray:
        """A ``bytearray`` of ``size`` bytes (contents undefined), recycled if one fits.

        A free buffer fits when ``size`` is at least half its allocation: CPython resizes
        a bytearray within its allocation then, without a copy or a realloc. The smallest
        that fits is taken. A new buffer gets 1/8 headroom so that batches of a producer
        that vary a little fit it later."""
        best = -1
        for i, free in enumerate(self._free):
            alloc = free.__alloc__()
            if alloc // 2 <= size < alloc and (
                    best < 0 or alloc < self._free[best].__alloc__()):
                best = i
        if best < 0:
            frame = bytearray(size + (size >> 3))
            del frame[size:]
            return frame
        frame = self._free.pop(best)
        self._bytes -= frame.__alloc__()
        have = len(frame)
        if have > size:
            del frame[size:]
        elif have < size:
            frame += bytes(size - have)
        return frame

    def give(self, frame: bytearray) -> None:
        """Keep an answered frame's buffer, if the pool has room. The caller guarantees
        nothing else refers to it."""
        alloc = frame.__alloc__()
        if len(self._free) < self._max_buffers and self._bytes + alloc <= self._max_bytes:
            self._free.append(frame)
            self._bytes += alloc

    @property
    def free_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._free)


frames = FramePool()

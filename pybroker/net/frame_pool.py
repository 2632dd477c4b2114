"""Free large-frame buffers, shared by every connection of the process.

A frame above ``LARGE_FRAME`` is received into a ``FrameBuffer`` of its own (see
``connection.py`` and ``pybroker._native.framebuffer``), whose mapped memory grows with
the bytes received. Fresh pages cost a zero-fill and a page fault per 4 KiB, about a
fifth of the broker's CPU on 1 MiB produce batches, so answered frames come back here and
the next large frame is received into one of them. The pool is the process's and not each
connection's because producers often open a connection per task (Spark writes) and
pipeline several requests, so a per-connection pool of one or two buffers is mostly cold
or too small.

A buffer is given back only when nothing exports it (``FrameBuffer.exports == 0``), and
the pool keeps at most ``MAX_POOL_BYTES`` of mapped memory.

Only the event loop thread takes and gives buffers (network threads receive into a
view they were handed, and drop it before the buffer is recycled).
"""

from __future__ import annotations

from pybroker._native.framebuffer import FrameBuffer

# What the pool may keep: enough for a few pipelined producers of 1 MiB batches, little
# next to the page cache those batches go to.
MAX_POOL_BYTES = 32 * 1024 * 1024
MAX_POOL_BUFFERS = 64


class FramePool:
    def __init__(self, max_bytes: int = MAX_POOL_BYTES,
                 max_buffers: int = MAX_POOL_BUFFERS) -> None:
        self._free: list[FrameBuffer] = []
        self._bytes = 0
        self._max_bytes = max_bytes
        self._max_buffers = max_buffers

    def take(self, size: int) -> FrameBuffer:
        """A ``FrameBuffer`` of ``length`` ``size`` (contents undefined), recycled if the
        pool has one: the smallest whose mapping holds ``size``, else the largest (it
        grows as the frame arrives). Nothing is mapped for a new one until bytes come."""
        best = -1
        for i, free in enumerate(self._free):
            capacity = free.capacity
            if best < 0:
                best = i
                continue
            best_capacity = self._free[best].capacity
            if capacity >= size and (best_capacity < size or capacity < best_capacity):
                best = i
            elif best_capacity < size and capacity > best_capacity:
                best = i
        if best < 0:
            return FrameBuffer(size)
        frame = self._free.pop(best)
        self._bytes -= frame.capacity
        frame.length = size
        return frame

    def give(self, frame: FrameBuffer) -> None:
        """Keep an answered frame's buffer, if nothing exports it and the pool has room."""
        capacity = frame.capacity
        if frame.exports or not capacity:
            return
        if len(self._free) < self._max_buffers and self._bytes + capacity <= self._max_bytes:
            self._free.append(frame)
            self._bytes += capacity

    @property
    def free_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._free)


frames = FramePool()

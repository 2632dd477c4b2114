"""Large request frames are received into recycled buffers, never into one still in use,
and the buffers are the process's: a later connection's frames reuse an earlier one's.

A real Connection on a real socket pair; the dispatcher is the server's real interface
(``dispatch(conn, frame) -> parts``). It checks every frame arrives intact, records which
buffers were used, and keeps a view of some frames alive as a handler might.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct

from pybroker.net.connection import LARGE_FRAME, Connection
from pybroker.net.frame_pool import FramePool


def test_large_frames_reuse_buffers_that_nothing_holds():
    async def main():
        sizes = [LARGE_FRAME + 1 + i * 997 for i in range(12)] + [3 * LARGE_FRAME] * 6 + \
            [64, 100, 1 << 20, (1 << 20) - 5000, 1 << 20]
        payloads = [os.urandom(n) for n in sizes]
        seen: list[int] = []
        kept: list[memoryview] = []  # views a handler kept: their buffers must not be reused
        kept_ids: set[int] = set()
        done = asyncio.get_running_loop().create_future()

        async def dispatch(conn, frame):
            i = len(seen)
            assert bytes(frame) == payloads[i], f"frame {i} corrupted"
            assert id(frame) not in kept_ids, "a buffer still referenced was reused"
            seen.append(id(frame))
            if i % 5 == 4:
                kept.append(memoryview(frame))
                kept_ids.add(id(frame))
            if len(seen) == len(payloads):
                done.set_result(None)
            return [struct.pack(">i", 4) + struct.pack(">i", i)]

        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        conn = Connection(ours, "test", dispatch, 1 << 24, 1 << 24, lambda c: None)
        data = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
        loop = asyncio.get_running_loop()
        sender = loop.run_in_executor(None, theirs.sendall, data)
        replies = loop.run_in_executor(None, _read_replies, theirs, len(payloads))
        await asyncio.wait_for(done, 30)
        await sender
        assert await replies == list(range(len(payloads)))
        conn.close()
        theirs.close()
        large = [i for i, n in enumerate(sizes) if n > LARGE_FRAME]
        assert len({seen[i] for i in large}) < len(large), "no buffer was ever recycled"
        return kept

    asyncio.run(main())


def test_a_later_connection_receives_into_an_earlier_ones_buffer():
    """Producers that open a connection per task (Spark) must not pay a fresh zero-filled
    buffer for every frame: the second connection's 1 MiB frame lands in the buffer the
    first connection's frame used."""
    async def one_connection(payload: bytes) -> int:
        used = []  # the allocation of the buffer the frame arrived in
        done = asyncio.get_running_loop().create_future()

        async def dispatch(conn, frame):
            assert bytes(frame) == payload
            used.append(frame.__alloc__())
            done.set_result(None)
            return [struct.pack(">ii", 4, 0)]

        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        conn = Connection(ours, "test", dispatch, 1 << 24, 1 << 24, lambda c: None)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, theirs.sendall, struct.pack(">i", len(payload)) + payload)
        await asyncio.wait_for(done, 30)
        assert await loop.run_in_executor(None, _read_replies, theirs, 1) == [0]
        conn.close()
        theirs.close()
        return used[0]

    async def main():
        # A new buffer's allocation is its frame's size plus 1/8: the second frame's buffer
        # has the first one's allocation only if it is the same buffer.
        first = await one_connection(os.urandom(1 << 20))
        second = await one_connection(os.urandom((1 << 20) - 777))
        assert first == second, "the second connection did not reuse the first one's buffer"

    asyncio.run(main())


def test_pool_takes_the_smallest_fitting_buffer_and_keeps_within_its_bounds():
    pool = FramePool(max_bytes=4 << 20, max_buffers=3)
    small, large = pool.take(300_000), pool.take(1 << 20)
    pool.give(large)
    pool.give(small)
    assert len(pool) == 2
    again = pool.take(250_000)
    assert again is small and len(again) == 250_000
    assert pool.take(1 << 22) is not large  # too big for any free buffer: a new one
    assert pool.take(100_000) is not large  # under half its allocation: not that one
    assert len(pool) == 1
    pool.give(pool.take(3 << 20))  # 3 MiB more would pass 4 MiB with the 1 MiB kept
    assert len(pool) == 1 and pool.free_bytes == large.__alloc__()


def _read_replies(sock: socket.socket, count: int) -> list[int]:
    got = []
    buf = b""
    while len(got) < count:
        chunk = sock.recv(65536)
        assert chunk
        buf += chunk
        while len(buf) >= 8:
            got.append(struct.unpack(">i", buf[4:8])[0])
            buf = buf[8:]
    return got

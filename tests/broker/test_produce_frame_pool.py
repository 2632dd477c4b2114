"""Large request frames are received into recycled buffers, never into one still
exported, and the buffers are the process's: a later connection's frames reuse an earlier
one's.

A real Connection on a real socket pair; the dispatcher is the server's real interface
(``dispatch(conn, frame) -> parts``). It checks every frame arrives intact, records which
buffers were used, and keeps a view of some frames alive as a handler might.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct

from pybroker.net.connection import LARGE_FRAME, Connection, Limits
from pybroker.net.frame_pool import FramePool
from pybroker.net.request_memory import RequestMemory


def _connection(sock: socket.socket, dispatch) -> Connection:
    return Connection(sock, "test", dispatch, Limits(1 << 24, 1 << 24, RequestMemory(1 << 30)),
                      lambda c: None)


def test_large_frames_reuse_buffers_that_nothing_holds():
    async def main():
        sizes = [LARGE_FRAME + 1 + i * 997 for i in range(12)] + [3 * LARGE_FRAME] * 6 + \
            [64, 100, 1 << 20, (1 << 20) - 5000, 1 << 20]
        payloads = [os.urandom(n) for n in sizes]
        seen: list[int] = []
        kept: list[memoryview] = []  # views a handler kept: their buffers must not be reused
        kept_frames: list[object] = []
        done = asyncio.get_running_loop().create_future()

        async def dispatch(conn, frame):
            i = len(seen)
            assert bytes(frame) == payloads[i], f"frame {i} corrupted"
            assert not any(frame is k for k in kept_frames), "an exported buffer was reused"
            seen.append(id(frame))
            if i % 5 == 4:
                kept.append(memoryview(frame))
                kept_frames.append(frame)
            if len(seen) == len(payloads):
                done.set_result(None)
            return [struct.pack(">i", 4) + struct.pack(">i", i)]

        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        conn = _connection(ours, dispatch)
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
            used.append(frame)
            done.set_result(None)
            return [struct.pack(">ii", 4, 0)]

        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        conn = _connection(ours, dispatch)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, theirs.sendall, struct.pack(">i", len(payload)) + payload)
        await asyncio.wait_for(done, 30)
        assert await loop.run_in_executor(None, _read_replies, theirs, 1) == [0]
        conn.close()
        theirs.close()
        return used[0]

    async def main():
        first = await one_connection(os.urandom(1 << 20))
        second = await one_connection(os.urandom((1 << 20) - 777))
        assert first is second, "the second connection did not reuse the first one's buffer"

    asyncio.run(main())


def test_pool_takes_the_smallest_buffer_that_holds_the_frame_and_keeps_within_bounds():
    pool = FramePool(max_bytes=4 << 20, max_buffers=3)
    small, large = pool.take(300_000), pool.take(1 << 20)
    small.ensure(300_000)
    large.ensure(1 << 20)
    pool.give(large)
    pool.give(small)
    assert len(pool) == 2 and pool.free_bytes == small.capacity + large.capacity
    again = pool.take(250_000)
    assert again is small and len(again) == 250_000
    grows = pool.take(1 << 22)  # none holds 4 MiB: the largest, to grow as bytes arrive
    assert grows is large and len(grows) == 1 << 22 and grows.capacity < 1 << 22
    assert len(pool) == 0
    pool.give(small)
    with memoryview(large):
        pool.give(large)  # exported: not kept
    assert len(pool) == 1
    huge = pool.take(8 << 20)
    assert huge is small
    huge.ensure(8 << 20)
    pool.give(huge)  # more than the pool may keep
    assert len(pool) == 0 and pool.free_bytes == 0


def test_a_declared_size_maps_nothing_until_bytes_arrive():
    pool = FramePool()
    frame = pool.take(100 * 1024 * 1024)
    assert len(frame) == 100 * 1024 * 1024 and frame.capacity == 0
    frame.ensure(70_000)
    with memoryview(frame) as view:
        assert len(view) == frame.capacity < 100_000  # the mapped part only
        view[:3] = b"abc"
    frame.ensure(len(frame))  # grows in place or moves: the bytes come along
    with memoryview(frame) as view:
        assert bytes(view[:3]) == b"abc" and len(view) == len(frame)


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

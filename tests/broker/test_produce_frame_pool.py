"""Large request frames are received into recycled buffers, never into one still in use.

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

"""A connection answers its requests one at a time and in order, whatever each handler
does: return at once, suspend (an awaited write), raise. A real Connection on a real
socket pair with the server's dispatch interface; requests pipelined in one send and
sent one by one (the worker idle between them)."""

from __future__ import annotations

import asyncio
import socket
import struct

from pybroker.net.connection import CloseConnection, Connection, Limits
from pybroker.net.request_memory import RequestMemory


def frame(kind: bytes, i: int) -> bytes:
    body = kind + struct.pack(">i", i)
    return struct.pack(">i", len(body)) + body


def reply(i: int) -> list[bytes]:
    return [struct.pack(">i", 4) + struct.pack(">i", i)]


async def dispatch(conn, data):
    """b"F": answer at once; b"S": suspend first (twice); b"N": no response; b"X": close."""
    kind, i = bytes(data[:1]), struct.unpack(">i", data[1:5])[0]
    if kind == b"S":
        await asyncio.sleep(0.002)
        await asyncio.sleep(0)
    elif kind == b"N":
        return None
    elif kind == b"X":
        raise CloseConnection(f"request {i} asked to close")
    return reply(i)


def read_all(sock: socket.socket) -> list[int]:
    got, buf = [], b""
    try:
        while chunk := sock.recv(65536):
            buf += chunk
    except ConnectionResetError:  # closed with our unread requests still in its buffer
        pass
    while len(buf) >= 8:
        got.append(struct.unpack(">i", buf[4:8])[0])
        buf = buf[8:]
    return got


def run(script: list[tuple[bytes, int]], pipelined: bool) -> list[int]:
    async def main() -> list[int]:
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        closed = asyncio.get_running_loop().create_future()
        Connection(ours, "test", dispatch, Limits(1 << 20, 1 << 20, RequestMemory(1 << 30)),
                   lambda c: closed.done() or closed.set_result(None))
        loop = asyncio.get_running_loop()
        if pipelined:
            await loop.run_in_executor(None, theirs.sendall,
                                       b"".join(frame(k, i) for k, i in script))
        else:
            for kind, i in script:
                try:
                    await loop.run_in_executor(None, theirs.sendall, frame(kind, i))
                except OSError:  # closed by an earlier request: the rest is never read
                    break
                await asyncio.sleep(0.005)  # the worker is idle again before the next
        try:
            await loop.run_in_executor(None, theirs.shutdown, socket.SHUT_WR)
        except OSError:
            pass
        got = await loop.run_in_executor(None, read_all, theirs)
        await asyncio.wait_for(closed, 10)
        theirs.close()
        return got

    return asyncio.run(main())


SCRIPT = [(b"F", 0), (b"S", 1), (b"F", 2), (b"N", 3), (b"F", 4), (b"S", 5), (b"S", 6),
          (b"F", 7)]


def test_pipelined_requests_are_answered_in_order():
    assert run(SCRIPT, pipelined=True) == [0, 1, 2, 4, 5, 6, 7]


def test_requests_one_by_one_are_answered_in_order():
    assert run(SCRIPT, pipelined=False) == [0, 1, 2, 4, 5, 6, 7]


def test_a_request_that_closes_ends_the_answers_there():
    script = [(b"F", 0), (b"S", 1), (b"X", 2), (b"F", 3)]
    assert run(script, pipelined=True) == [0, 1]
    assert run(script, pipelined=False) == [0, 1]

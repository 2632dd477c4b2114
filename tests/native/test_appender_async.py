"""Appender.append_async: the event loop's append, completed through an eventfd.

Real files and real rings throughout; the loops are asyncio's and uvloop's.
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
import tempfile

import pytest
import uvloop

from pybroker._native.appender import Appender
from tests.native.test_appender import KINDS, file_bytes, run_child

LOOPS = {"asyncio": asyncio.run, "uvloop": uvloop.run}


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("kind", KINDS)
def test_matches_a_reference_model(kind, loop):
    """Random appends, sequential and many at once to several files, against models."""
    rnd = random.Random(7)

    async def main():
        files = [tempfile.TemporaryFile() for _ in range(4)]
        models = [bytearray() for _ in files]
        appenders = [Appender(f.fileno(), kind=kind) for f in files]
        for _ in range(30):
            jobs = []
            for i in rnd.sample(range(4), rnd.randint(1, 4)):
                position = rnd.randint(0, len(models[i]) + 100)
                buffers = [os.urandom(rnd.choice([rnd.randint(0, 3000), rnd.randint(30000, 70000)])) for _ in range(rnd.randint(1, 3))]
                data = b"".join(buffers)
                end = position + len(data)
                models[i].extend(b"\0" * max(0, end - len(models[i])))
                models[i][position:end] = data
                jobs.append(appenders[i].append_async(
                    [rnd.choice([b, bytearray(b), memoryview(b)]) for b in buffers], position))
            written = await asyncio.gather(*jobs)
            assert all(n >= 0 for n in written)
        for f, model in zip(files, models, strict=True):
            assert file_bytes(f.fileno()) == bytes(model)
            f.close()

    LOOPS[loop](main())


def test_writes_through_one_appender_keep_their_order():
    """Overlapping writes through one Appender land in call order (one at a time)."""
    async def main():
        with tempfile.TemporaryFile() as f:
            a = Appender(f.fileno(), kind="io_uring")
            await asyncio.gather(*(a.append_async([bytes([65 + i]) * 70000], 0)
                                   for i in range(10)))
            assert file_bytes(f.fileno()) == b"J" * 70000

    asyncio.run(main())


def test_a_cancelled_append_still_lands_before_the_next():
    """Cancelling the waiter does not cancel the kernel's write; the next write through
    the Appender waits for it, and a synchronous append meanwhile is refused."""
    async def main():
        with tempfile.TemporaryFile() as f:
            a = Appender(f.fileno(), kind="io_uring")
            task = asyncio.ensure_future(a.append_async([b"first" * 20000], 0))
            await asyncio.sleep(0)  # queued; submitted on the next loop iteration
            assert a.writing
            with pytest.raises(BlockingIOError):
                a.append([b"x"], 0)
            task.cancel()
            assert await a.append_async([b"second"], 0) == 6
            assert not a.writing
            assert file_bytes(f.fileno()) == b"second" + (b"first" * 20000)[6:]
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())


def test_loops_one_after_another():
    """The ring belongs to the thread; each new loop on it takes over the eventfd."""
    async def main(path, text):
        fd = os.open(path, os.O_RDWR | os.O_CREAT)
        try:
            return await Appender(fd, kind="io_uring").append_async([text], 0)
        finally:
            os.close(fd)

    with tempfile.TemporaryDirectory() as d:
        for i, run in enumerate([asyncio.run, uvloop.run, asyncio.run]):
            assert run(main(os.path.join(d, f"f{i}"), b"loop %d" % i)) == 6
            with open(os.path.join(d, f"f{i}"), "rb") as f:
                assert f.read() == b"loop %d" % i


def test_errors_and_short_writes(tmp_path):
    """A failed write raises its errno's OSError; a short one (RLIMIT_FSIZE) is continued
    synchronously, which then fails with EFBIG, everything up to the limit written."""
    path = tmp_path / "limited"
    out = run_child(f"""
        import asyncio, os, resource, signal
        from pybroker._native.appender import Appender
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100000, 100000))
        async def main():
            fd = os.open({str(path)!r}, os.O_RDWR | os.O_CREAT)
            a = Appender(fd, kind="io_uring")
            assert await a.append_async([b"a" * 60000, b"b" * 30000], 0) == 90000
            try:
                await a.append_async([b"c" * 5000, b"d" * 70000], 90000)
            except OSError as e:
                print(e.errno)
            ro = os.open({str(path)!r}, os.O_RDONLY)
            try:
                await Appender(ro, kind="io_uring").append_async([b"x" * 70000], 0)
            except OSError as e:
                print(e.errno)
        asyncio.run(main())
    """)
    assert out.split() == [str(errno.EFBIG), str(errno.EBADF)]
    assert path.read_bytes() == b"a" * 60000 + b"b" * 30000 + b"c" * 5000 + b"d" * 5000


def test_a_forked_child_sets_up_its_own_ring(tmp_path):
    """The child of a process that used append_async gets a ring and eventfd of its own."""
    async def append(fd, position):
        return await Appender(fd, kind="io_uring").append_async([b"p" * 70000], position)

    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        assert asyncio.run(append(fd, 0)) == 70000
        pid = os.fork()
        if pid == 0:
            ok = False
            try:
                ok = asyncio.run(append(fd, 70000)) == 70000
            finally:
                os._exit(0 if ok else 1)
        assert os.waitpid(pid, 0)[1] == 0
        assert asyncio.run(append(fd, 140000)) == 70000
        assert file_bytes(fd) == b"p" * 210000
    finally:
        os.close(fd)

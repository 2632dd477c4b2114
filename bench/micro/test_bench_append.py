"""Appending 1 MiB buffers to a file: Appender (io_uring, pwritev) versus os.write().

    python3 -m pytest bench/micro/test_bench_append.py --benchmark-only -p no:cacheprovider

Each round writes 32 MiB sequentially to a fresh, empty file (page cache, no fsync),
so all three measure the same thing; the target is Appender >= 70% of os.write()'s
throughput measured in the same run (the machine is shared: only ratios mean anything).
Both Appender paths run in this process (``Appender(fd, kind=...)``).
"""

import os

import pytest

from pybroker._native.appender import Appender

CHUNK = 1 << 20
CHUNKS = 32


@pytest.fixture
def target(tmp_path):
    fd = os.open(tmp_path / "00000000000000000000.log", os.O_RDWR | os.O_CREAT)
    yield fd
    os.close(fd)


def run(benchmark, fd, write):
    data = os.urandom(CHUNK)

    def setup():
        os.ftruncate(fd, 0)

    def rounds():
        for i in range(CHUNKS):
            write(data, i * CHUNK)

    benchmark.extra_info["MiB_per_round"] = CHUNK * CHUNKS >> 20
    benchmark.pedantic(rounds, setup=setup, rounds=30, warmup_rounds=2)
    assert os.fstat(fd).st_size == CHUNK * CHUNKS


def test_append_os_write(benchmark, target):
    os.lseek(target, 0, os.SEEK_SET)

    def write(data, position):
        if position == 0:
            os.lseek(target, 0, os.SEEK_SET)
        os.write(target, data)

    run(benchmark, target, write)


@pytest.mark.parametrize("kind", ["io_uring", "pwritev"])
def test_append_appender(benchmark, target, kind):
    a = Appender(target, kind=kind)

    def write(data, position):
        a.append([data], position)

    run(benchmark, target, write)

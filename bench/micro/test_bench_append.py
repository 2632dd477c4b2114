"""Appending 1 MiB buffers to a file: Appender (io_uring, pwritev) versus os.write().

    python3 -m pytest bench/micro/test_bench_append.py --benchmark-only -p no:cacheprovider -s

Each round writes 32 MiB sequentially to a freshly truncated file (page cache, no
fsync), so all three measure the same thing. The target is Appender >= 70% of
os.write()'s throughput in the same run. The machine is shared and noisy, and dirty
pages left by one test slow the next, so besides one pytest-benchmark table row per
path, ``test_append_ratio`` interleaves the three paths round by round (order rotated)
and prints each path's throughput as a share of os.write()'s (median and best rounds);
the shares are also in ``--benchmark-json`` as extra_info.
"""

import os
import statistics
import time

import pytest

from pybroker._native.appender import Appender

CHUNK = 1 << 20
CHUNKS = 32
DATA = os.urandom(CHUNK)


@pytest.fixture
def target(tmp_path):
    fd = os.open(tmp_path / "00000000000000000000.log", os.O_RDWR | os.O_CREAT)
    yield fd
    os.close(fd)


def os_write_round(fd):
    os.lseek(fd, 0, os.SEEK_SET)
    for _ in range(CHUNKS):
        os.write(fd, DATA)


def appender_round(appender):
    def write_round(fd):
        for i in range(CHUNKS):
            appender.append([DATA], i * CHUNK)

    return write_round


def one_round(fd, write_round):
    os.ftruncate(fd, 0)
    write_round(fd)
    assert os.fstat(fd).st_size == CHUNK * CHUNKS


def test_append_os_write(benchmark, target):
    benchmark.pedantic(
        os_write_round, args=(target,), setup=lambda: os.ftruncate(target, 0), rounds=30
    )


@pytest.mark.parametrize("kind", ["io_uring", "pwritev"])
def test_append_appender(benchmark, target, kind):
    write_round = appender_round(Appender(target, kind=kind))
    benchmark.pedantic(
        write_round, args=(target,), setup=lambda: os.ftruncate(target, 0), rounds=30
    )


def test_append_ratio(benchmark, target):
    paths = {
        "os.write": os_write_round,
        "io_uring": appender_round(Appender(target, kind="io_uring")),
        "pwritev": appender_round(Appender(target, kind="pwritev")),
    }
    times = {name: [] for name in paths}

    def interleaved():
        for r in range(40):
            names = list(paths)[r % 3 :] + list(paths)[: r % 3]
            for name in names:
                start = time.perf_counter()
                one_round(target, paths[name])
                times[name].append(time.perf_counter() - start)

    benchmark.pedantic(interleaved, rounds=1)
    mib = CHUNK * CHUNKS / (1 << 20)
    for name in paths:
        median, best = statistics.median(times[name]), min(times[name])
        benchmark.extra_info[f"{name}_MiB_s_median"] = round(mib / median)
        print(f"\n{name:9} median {mib / median:7.0f} MiB/s  best {mib / best:7.0f} MiB/s", end="")
        for stat, pick in (("median", statistics.median), ("best", min)):
            share = pick(times["os.write"]) / pick(times[name])
            benchmark.extra_info[f"{name}_vs_write_{stat}"] = round(share, 3)
            print(f"  {stat} {share:6.1%} of os.write", end="")
    print()

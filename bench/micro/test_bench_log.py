"""Partition log benchmarks: appending 1 MiB batches, and recovering a 1 GiB segment.

    python3 -m pytest bench/micro/test_bench_log.py --benchmark-only -p no:cacheprovider -s

Also per-call costs on a log of 100k small batches: append, read at the tail, catch-up read.

Append (target: >= 70% of plain sequential write() in the same run). Each round appends
32 validated 1 MiB batches through ``Log.append`` (offsets stamped in place, Appender
write, index entry) into a fresh segment (the previous ones deleted, untimed) and
writes the same 32 MiB with ``os.write`` to a plain file truncated to empty (untimed):
both write to the page cache without writeback throttling. Rounds of the two alternate
(order rotated) because the machine is shared and noisy; the ratio of medians is printed
and stored in ``extra_info``. The append path is the process's (``PYBROKER_APPEND``);
``test_log_append_paths`` runs the comparison in two child processes, one per path
(io_uring, pwritev), and prints them side by side.

Recovery (target: >= 1 GB/s). A 1 GiB segment of 1 MiB batches is built once in a
temporary directory (page-cached, as after a crash of the broker but not of the
machine) and reopened as after an unclean stop: ``scan_log`` validates every batch
(CRC32C) and the indexes are rebuilt. Deleted afterwards.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time

import pytest

from pybroker._native.appender import append_implementation
from pybroker._native.records import encode_batch, validate_batch
from pybroker.log.log import Log
from pybroker.log.log_config import LogConfig

MIB = 1 << 20
BATCHES = 32
ROUNDS = 30
CONFIG = LogConfig.from_properties({"max.message.bytes": 2 * MIB, "file.delete.delay.ms": 0,
                                    "segment.bytes": 2**31 - 1})
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def one_mib_batch() -> bytearray:
    """An uncompressed batch of 1 KiB records, 1 MiB in all (within a few bytes)."""
    per_record = len(encode_batch([b"x" * 1000] * 2)) - len(encode_batch([b"x" * 1000]))
    values = [os.urandom(1000) for _ in range(MIB // per_record)]
    batch = bytearray(encode_batch(values))
    assert abs(len(batch) - MIB) < 2 * per_record
    return batch


def append_round(log: Log, batch: bytearray, info) -> None:
    for _ in range(BATCHES):
        log.append(batch, info)


def fresh_segment(log: Log) -> None:
    """Untimed: roll, then drop the old segments (unlinked: their page cache goes, as
    ftruncate does for the plain file), so each round writes to an empty segment."""
    log.roll()
    log.high_watermark = log.log_end_offset
    log.delete_records_before(log.log_end_offset)


def write_round(fd: int, batch: bytearray) -> None:
    for _ in range(BATCHES):
        os.write(fd, batch)


def measure_ratio(directory: str) -> dict[str, float]:
    """Interleaved rounds of Log.append and os.write; MB/s medians and their ratio."""
    batch = one_mib_batch()
    info = validate_batch(batch)
    log = Log(os.path.join(directory, "bench-0"), CONFIG)
    fd = os.open(os.path.join(directory, "plain.log"), os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    times: dict[str, list[float]] = {"append": [], "write": []}
    try:
        for r in range(ROUNDS):
            for name in (("append", "write") if r % 2 else ("write", "append")):
                if name == "append":
                    fresh_segment(log)
                    start = time.perf_counter()
                    append_round(log, batch, info)
                else:
                    os.ftruncate(fd, 0)
                    os.lseek(fd, 0, os.SEEK_SET)
                    start = time.perf_counter()
                    write_round(fd, batch)
                times[name].append(time.perf_counter() - start)
    finally:
        log.close()
        os.close(fd)
        shutil.rmtree(os.path.join(directory, "bench-0"), ignore_errors=True)
        os.unlink(os.path.join(directory, "plain.log"))
    mb = BATCHES * len(batch) / 1e6
    append_mbs = mb / statistics.median(times["append"])
    write_mbs = mb / statistics.median(times["write"])
    return {"append_MB_s": round(append_mbs), "write_MB_s": round(write_mbs),
            "ratio": round(append_mbs / write_mbs, 3),
            "ratio_best": round(min(times["write"]) / min(times["append"]), 3)}


def test_log_append_vs_write(benchmark, tmp_path):
    result = benchmark.pedantic(measure_ratio, args=(str(tmp_path),), rounds=1)
    benchmark.extra_info.update(result, append_path=append_implementation())
    print(f"\n{append_implementation()}: Log.append {result['append_MB_s']} MB/s, "
          f"os.write {result['write_MB_s']} MB/s, ratio {result['ratio']:.1%} "
          f"(best rounds {result['ratio_best']:.1%})")


def test_log_append_paths(benchmark, tmp_path):
    """The same comparison in one child process per append path, side by side."""
    results = {}

    def run_both():
        for path in ("io_uring", "pwritev"):
            directory = tmp_path / path
            directory.mkdir()
            code = (f"import json, sys; sys.path.insert(0, {ROOT!r}); "
                    f"from bench.micro.test_bench_log import measure_ratio; "
                    f"print(json.dumps(measure_ratio({str(directory)!r})))")
            done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                                  text=True, cwd=ROOT, timeout=600,
                                  env=dict(os.environ, PYBROKER_APPEND=path))
            assert done.returncode == 0, done.stderr
            results[path] = done.stdout.strip().splitlines()[-1]

    benchmark.pedantic(run_both, rounds=1)
    for path, line in results.items():
        benchmark.extra_info[path] = line
        print(f"\n{path:9} {line}", end="")
    print()


@pytest.fixture(scope="module")
def gib_segment(tmp_path_factory):
    """A partition directory holding one 1 GiB segment (built once, removed after)."""
    directory = str(tmp_path_factory.mktemp("recovery") / "big-0")
    batch = one_mib_batch()
    info = validate_batch(batch)
    log = Log(directory, CONFIG)
    while log.segments.active.size < 1 << 30:
        log.append(batch, info)
    log.close()
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_log_recovery_1gib(benchmark, gib_segment):
    size = sum(os.path.getsize(os.path.join(gib_segment, n)) for n in os.listdir(gib_segment)
               if n.endswith(".log"))
    opened: list[Log] = []

    def recover():
        log = Log(gib_segment, CONFIG, clean=False, recovery_point=0)
        opened.append(log)
        return log

    def close_last():
        while opened:
            opened.pop().close()

    benchmark.pedantic(recover, setup=close_last, rounds=5, warmup_rounds=1)
    log = opened[-1]
    assert log.log_end_offset > 1000 and log.segments.active.offset_index.entries > 1000
    close_last()
    gbs = size / benchmark.stats.stats.median / 1e9
    benchmark.extra_info.update(bytes=size, GB_s_median=round(gbs, 2))
    print(f"\nrecovery of {size / 2**30:.2f} GiB: median {gbs:.2f} GB/s "
          f"(best {size / benchmark.stats.stats.min / 1e9:.2f} GB/s)")


@pytest.fixture(scope="module")
def small_log(tmp_path_factory):
    """A log of 100k batches of ten 100-byte records (~1.1 KiB each), ~110 MB."""
    log = Log(str(tmp_path_factory.mktemp("small") / "small-0"), CONFIG)
    batch = bytearray(encode_batch([b"x" * 100] * 10))
    info = validate_batch(batch)
    for _ in range(100_000):
        log.append(batch, info)
    yield log, batch, info
    log.close()
    shutil.rmtree(log.directory, ignore_errors=True)


def test_log_append_small_batch(benchmark, small_log):
    """Per-call cost of appending a ~1.1 KiB batch (Python + one write)."""
    log, batch, info = small_log
    benchmark.extra_info["append_path"] = append_implementation()
    benchmark(log.append, batch, info)


def test_log_read_at_tail(benchmark, small_log):
    """A caught-up consumer: append one batch, read from its offset (1 MiB budget)."""
    log, batch, info = small_log

    def append_then_read():
        offset = log.log_end_offset
        log.append(batch, info)
        return log.read(offset, MIB, max_offset=log.log_end_offset)

    assert benchmark(append_then_read).size == len(batch)


def test_log_read_catch_up(benchmark, small_log):
    """A consumer far behind: 1 MiB of whole batches from an offset in an old part."""
    log, _, _ = small_log
    offsets = iter(range(0, 10**9, 7919))

    def read():
        return log.read(next(offsets) % (log.log_end_offset // 2), MIB)

    assert MIB - 2048 < benchmark(read).size <= MIB

"""Log compaction's native core: building the offset map and copying surviving records.

A 60 MB changelog of 600k records (100-byte values, 100k keys, batches of 100 records),
cleaned with a 128 MiB map as the broker's default; the baseline, measured in the same
run (shared machine), is the recovery scan over the same bytes (one CRC pass, the least
any reader of the log does). Run:
python -m pytest bench/micro/test_bench_cleaner.py --benchmark-only -s
"""

from __future__ import annotations

import importlib
import time

cleaner = importlib.import_module("pybroker._native.cleaner")
records = importlib.import_module("pybroker._native.records")

PER_BATCH, BATCHES, KEYS = 100, 6000, 100_000
NOW = int(time.time() * 1000)
LOG = b"".join(
    records.encode_batch([b"v" * 100] * PER_BATCH,
                         [b"key-%07d" % ((b * PER_BATCH + i) % KEYS) for i in range(PER_BATCH)],
                         [NOW] * PER_BATCH, base_offset=b * PER_BATCH)
    for b in range(BATCHES))
CHUNK = 512 * 1024  # log.cleaner.io.buffer.size
OFFSETS = cleaner.OffsetMap(128 << 20)


def _chunks(step):
    view, position = memoryview(LOG), 0
    while position < len(LOG):
        position += step(view[position:position + CHUNK])


def build_map():
    OFFSETS.clear()
    _chunks(lambda chunk: OFFSETS.add_batches(chunk, 0)[0])


def clean():
    _chunks(lambda chunk: OFFSETS.clean_batches(chunk, NOW, 86_400_000, {}, 1 << 62).consumed)


def _report(benchmark, name, baseline):
    ours = benchmark.stats.stats.min
    info = {"MB/s": len(LOG) / ours / 1e6, "scan_log MB/s": len(LOG) / baseline / 1e6,
            "ratio to scan_log": baseline / ours}
    benchmark.extra_info.update(info)
    print(f"\n{name}: " + ", ".join(f"{k} {v:.2f}" for k, v in info.items()))


def test_build_offset_map(benchmark, best_seconds):
    scan = best_seconds(records.scan_log, LOG, 0, len(LOG), 0, 4096, rounds=5)
    benchmark.pedantic(build_map, rounds=5)
    assert OFFSETS.size == KEYS
    _report(benchmark, "offset map over 60 MB", scan)


def test_copy_surviving_records(benchmark, best_seconds):
    build_map()
    scan = best_seconds(records.scan_log, LOG, 0, len(LOG), 0, 4096, rounds=5)
    benchmark.pedantic(clean, rounds=5)
    _report(benchmark, "clean 60 MB (1 in 6 records survive)", scan)

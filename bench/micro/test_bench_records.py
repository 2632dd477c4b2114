"""Record batch v2: validation, recovery scan and columnar encoding throughput.

Targets (issue 2): validating an uncompressed 1 MiB batch of 1 KiB records at >= 5 GB/s;
the recovery scan >= 1 GB/s. Baselines measured in the same run (shared machine):
the `crc32c` package over the same bytes (the least any validator has to do) and a plain
memory copy. Run: python -m pytest bench/micro/test_bench_records.py --benchmark-only -s
"""

from __future__ import annotations

import importlib
import os

import crc32c as package

records = importlib.import_module("pybroker._native.records")

VALUES = [os.urandom(1024) for _ in range(1024)]
BATCH = records.encode_batch(VALUES, [b"key-%d" % i for i in range(1024)])




def _report(benchmark, nbytes, name, **baselines):
    ours = benchmark.stats.stats.min
    info = {"GB/s": nbytes / ours / 1e9}
    for label, seconds in baselines.items():
        info[f"{label} GB/s"] = nbytes / seconds / 1e9
        info[f"ratio to {label}"] = seconds / ours
    benchmark.extra_info.update(info)
    print(f"\n{name}: " + ", ".join(f"{k} {v:.2f}" for k, v in info.items()))


def test_validate_1mib_batch_of_1kib_records(benchmark, best_seconds):
    assert records.validate_batch(BATCH).records_count == 1024
    crc_only = best_seconds(package.crc32c, BATCH)
    copy = best_seconds(bytearray, BATCH)
    benchmark(records.validate_batch, BATCH)
    _report(benchmark, len(BATCH), "validate 1 MiB / 1 KiB records",
            crc32c_package=crc_only, memcpy=copy)


def test_validate_1mib_lz4_batch(benchmark):
    batch = records.encode_batch([v[:512] * 2 for v in VALUES], compression=3)
    benchmark(records.validate_batch, batch)
    _report(benchmark, len(BATCH), "validate lz4 batch (uncompressed bytes/s)")


def test_scan_64mib_segment(benchmark, best_seconds):
    # 64 batches of 1 MiB, offsets assigned; recovery cost is one CRC pass per batch.
    segment = bytearray()
    for i in range(64):
        b = bytearray(BATCH)
        records.stamp_batch(b, 0, i * 1024, 0)
        segment += b
    scan = records.scan_log(segment, 0, len(segment), 0, 4096)
    assert scan.error is None and scan.batch_count == 64
    crc_only = best_seconds(package.crc32c, segment, rounds=10)
    benchmark(records.scan_log, segment, 0, len(segment), 0, 4096)
    _report(benchmark, len(segment), "scan_log 64 MiB of 1 MiB batches", crc32c_package=crc_only)


def test_scan_16mib_segment_of_small_batches(benchmark):
    small = records.encode_batch(VALUES[:16])
    segment = bytearray()
    offset = 0
    while len(segment) < 16 << 20:
        b = bytearray(small)
        records.stamp_batch(b, 0, offset, 0)
        offset += 16
        segment += b
    benchmark(records.scan_log, segment, 0, len(segment), 0, 4096)
    _report(benchmark, len(segment), "scan_log 16 MiB of 16 KiB batches")


def test_encode_columns_1mib(benchmark, best_seconds):
    import array

    offsets = array.array("i", range(0, 1025 * 1024, 1024))
    data = b"".join(VALUES)
    timestamps = array.array("q", [1_700_000_000_000] * 1024)
    join = best_seconds(b"".join, VALUES)
    benchmark(records.encode_batch_columns, 1024, (offsets, data), None, timestamps)
    _report(benchmark, len(data), "encode_batch_columns 1024 x 1 KiB", bytes_join=join)

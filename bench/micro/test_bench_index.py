"""Offset index lookup through the Python API, per call (target: under 1 microsecond).

    python3 -m pytest bench/micro/test_bench_index.py --benchmark-only -p no:cacheprovider

A full 10 MiB offset index (Kafka's default segment.index.bytes: 1,310,720 entries),
memory-mapped like the log maps it. Warm: a target in the last 8 KiB of entries, where
consumers and followers read. Cold: a target at the start, the whole binary search.
"""

import mmap
import struct

import pytest

from pybroker._native import index

ENTRIES = 10 * 1024 * 1024 // 8


@pytest.fixture(scope="module")
def offset_index(tmp_path_factory):
    path = tmp_path_factory.mktemp("index") / "00000000000000000000.index"
    path.write_bytes(b"".join(struct.pack(">II", i * 4, i * 800) for i in range(ENTRIES)))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
        yield m


@pytest.mark.parametrize("where", ["warm", "cold"])
def test_offset_index_lookup(benchmark, offset_index, where):
    target = (ENTRIES - 10) * 4 + 1 if where == "warm" else 41
    result = benchmark(index.offset_index_lookup, offset_index, ENTRIES, target)
    assert result[0] == target - 1

"""Index search against a plain-Python bisect oracle, on hypothesis-generated indexes.

The native search goes warm tail first and resolves repeated keys to their first slot;
the oracle does neither trick, so agreement checks both.
"""

import bisect
import mmap
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker._native import index

U32 = st.integers(0, 2**32 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
# Sizes straddle the warm tail: 8192 bytes is 1024 offset entries, 682 time entries.
SEEDS = st.integers(0, 2**32 - 1)
SIZES = st.sampled_from([0, 1, 2, 3, 7, 100, 682, 683, 684, 1024, 1025, 1026, 3000])


def sorted_keys(draw, lo, hi, size):
    """Non-decreasing keys in [lo, hi], with runs of repeats likely.

    Drawn from a seeded Random rather than element by element (or through st.randoms,
    which records every call): indexes of thousands of entries are needed to cross the
    warm-tail boundary, and hypothesis stays fast by drawing only a seed and the shape.
    """
    rnd = random.Random(draw(SEEDS))
    span = draw(st.sampled_from([3 * size, hi - lo]))  # dense (many repeats) or sparse
    base = draw(st.integers(lo, hi - min(span, hi - lo)))
    keys = sorted(base + rnd.randint(0, span) for _ in range(size))
    if size and draw(st.booleans()):
        start = rnd.randrange(size)  # a longer run of equal keys: duplicates of the floor
        end = min(size, start + rnd.randint(1, 6))
        keys[start:end] = [keys[start]] * (end - start)
    return keys


@st.composite
def offset_indexes(draw):
    size = draw(SIZES)
    keys = sorted_keys(draw, 0, 2**32 - 1, size)
    rnd = random.Random(draw(SEEDS))
    return [(k, rnd.randint(0, 2**32 - 1)) for k in keys]


@st.composite
def time_indexes(draw):
    size = draw(SIZES)
    keys = sorted_keys(draw, -(2**63), 2**63 - 1, size)
    offsets = sorted_keys(draw, 0, 2**32 - 1, size)
    return list(zip(keys, offsets, strict=True))


def pack_offset(entries, slack=3):
    """Entries followed by zeroed preallocated space, as a real index file looks."""
    return b"".join(struct.pack(">II", *e) for e in entries) + bytes(8 * slack)


def pack_time(entries, slack=3):
    return b"".join(struct.pack(">qI", *e) for e in entries) + bytes(12 * slack)


def oracle_floor(entries, target):
    keys = [k for k, _ in entries]
    above = bisect.bisect_right(keys, target)
    if above == 0:
        return None
    return entries[bisect.bisect_left(keys, keys[above - 1])]


def oracle_ceiling(entries, target):
    keys = [k for k, _ in entries]
    slot = bisect.bisect_left(keys, target)
    return entries[slot] if slot < len(entries) else None


def targets_for(entries, key):
    """Keys present (both ends and the warm-tail boundary), their neighbours, random ones."""
    some = entries[:20] + entries[-20:] + entries[-1030:-1020] + entries[-690:-680]
    near = sorted({k + d for k, _ in some for d in (-1, 0, 1)})
    return st.one_of(st.sampled_from(near), key) if near else key


@st.composite
def position_indexes(draw):
    """Offset indexes read by their position column (positions grow with the offsets)."""
    size = draw(SIZES)
    positions = sorted_keys(draw, 0, 2**32 - 1, size)
    offsets = sorted_keys(draw, 0, 2**32 - 1, size)
    return list(zip(offsets, positions, strict=True))


@settings(deadline=None)  # a shared 2-core machine: never fail on timing
@given(position_indexes(), st.data())
def test_position_floor_matches_oracle(entries, data):
    buf = pack_offset(entries)
    by_position = [(position, offset) for offset, position in entries]
    for _ in range(20):
        target = data.draw(targets_for(by_position, U32))
        target = min(max(target, -1), 2**32)
        floor = oracle_floor(by_position, target)
        expected = floor[0] if floor else 0
        assert index.offset_index_position_floor(buf, len(entries), target) == expected


@settings(deadline=None)  # a shared 2-core machine: never fail on timing
@given(offset_indexes(), st.data())
def test_offset_lookup_matches_oracle(entries, data):
    buf = pack_offset(entries)
    for _ in range(20):
        target = data.draw(targets_for(entries, U32))
        target = min(max(target, -1), 2**32)
        expected = oracle_floor(entries, target) or (0, 0)
        assert index.offset_index_lookup(buf, len(entries), target) == expected


@settings(deadline=None)  # a shared 2-core machine: never fail on timing
@given(time_indexes(), st.data())
def test_time_lookups_match_oracle(entries, data):
    buf = pack_time(entries)
    for _ in range(20):
        target = data.draw(targets_for(entries, I64))
        target = min(max(target, -(2**63)), 2**63 - 1)
        assert index.time_index_lookup(buf, len(entries), target) == oracle_ceiling(entries, target)
        assert index.time_index_floor(buf, len(entries), target) == oracle_floor(entries, target)


@settings(deadline=None)  # a shared 2-core machine: never fail on timing
@given(offset_indexes(), time_indexes(), st.data())
def test_entries_below_matches_oracle(offsets, times, data):
    obuf, tbuf = pack_offset(offsets), pack_time(times)
    for _ in range(10):
        target = data.draw(st.integers(0, 2**32))
        expected = bisect.bisect_left([k for k, _ in offsets], target)
        assert index.offset_index_entries_below(obuf, len(offsets), target) == expected
        expected = bisect.bisect_left([o for _, o in times], target)
        assert index.time_index_entries_below(tbuf, len(times), target) == expected


def test_edges():
    one = struct.pack(">II", 10, 4096)
    assert index.offset_index_lookup(one, 1, 9) == (0, 0)  # before the first entry
    assert index.offset_index_lookup(one, 1, 10) == (10, 4096)
    assert index.offset_index_lookup(one, 1, 2**40) == (10, 4096)
    assert index.offset_index_lookup(one, 0, 10) == (0, 0)  # empty
    assert index.offset_index_lookup(b"", 0, 10) == (0, 0)
    dup = struct.pack(">IIIIII", 1, 0, 5, 100, 5, 200)
    assert index.offset_index_lookup(dup, 3, 6) == (5, 100)  # first of the repeated floor
    t = struct.pack(">qIqI", -5, 0, 1_700_000_000_000, 3)
    assert index.time_index_lookup(t, 2, -6) == (-5, 0)
    assert index.time_index_lookup(t, 2, 0) == (1_700_000_000_000, 3)
    assert index.time_index_lookup(t, 2, 1_700_000_000_001) is None
    assert index.time_index_floor(t, 2, -6) is None
    assert index.time_index_floor(t, 2, 2**63 - 1) == (1_700_000_000_000, 3)


def test_entries_must_fit_the_buffer():
    with pytest.raises(ValueError):
        index.offset_index_lookup(bytes(15), 2, 0)
    with pytest.raises(ValueError):
        index.time_index_lookup(bytes(12), -1, 0)
    with pytest.raises(TypeError):
        index.offset_index_lookup("not a buffer", 0, 0)


def test_over_a_memory_mapped_index_file(tmp_path):
    """The real use: a preallocated index file, mmapped, filled entry by entry."""
    path = tmp_path / "00000000000000000000.index"
    entries = [(i * 3, i * 4096) for i in range(5000)]
    path.write_bytes(pack_offset(entries, slack=1000))
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        for target in (0, 1, 2, 3, 4, 2999, 3000, 14997, 14998, 10**9):
            assert index.offset_index_lookup(m, 5000, target) == oracle_floor(entries, target)
        # the mmap is not pinned after a call: it can be closed or resized
    assert m.closed

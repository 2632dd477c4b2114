"""The native cleaner against a model: a dict of key -> latest record.

A log of batches (keys from a small set so that they repeat, tombstones, keyless records,
compressed batches, idempotent producers) is built with the record encoder, mapped and
cleaned by ``pybroker._native.cleaner``; what survives must be exactly the latest record
of each key (tombstones kept on the first cleaning, gone once their delete horizon has
passed), each with its original offset, timestamp, value and headers, in batches that
pass the log's recovery scan (CRC, offsets).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker._native.cleaner import OffsetMap, Transactions, siphash128
from pybroker._native.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    decode_records,
    encode_batch,
    encode_control_batch,
    read_batch_header,
    scan_log,
)

NOW = 1_700_000_000_000
RETENTION = 1000

record = st.tuples(
    st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b"d", b"e" * 40])),  # key
    st.one_of(st.none(), st.binary(max_size=30)),                                 # value
    st.lists(st.tuples(st.sampled_from(["h", "trace"]), st.binary(max_size=5)), max_size=2),
)
batch = st.tuples(st.lists(record, min_size=1, max_size=8),
                  st.sampled_from([0, 0, 0, 1, 2, 3, 4]),  # codec: none, gzip, snappy, lz4, zstd
                  st.sampled_from([-1, -1, 7, 9]))         # producer id


def build_log(batches) -> tuple[bytes, list]:
    """The log bytes and the records written, as (offset, timestamp, key, value, headers)."""
    out, written, offset = [], [], 0
    for i, (records, codec, pid) in enumerate(batches):
        keys = [k for k, _, _ in records]
        values = [v for _, v, _ in records]
        headers = [[(k, v) for k, v in h] for _, _, h in records]
        timestamps = [NOW - 100_000 + 10 * (offset + j) for j in range(len(records))]
        out.append(encode_batch(values, keys, timestamps, headers, base_offset=offset,
                                producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                                base_sequence=offset if pid >= 0 else -1, compression=codec,
                                partition_leader_epoch=i))
        for j, (k, v, h) in enumerate(records):
            written.append((offset + j, timestamps[j], k, v, [(a, b) for a, b in h]))
        offset += len(records)
    return b"".join(out), written


def batches_of(data: bytes):
    position = 0
    while position < len(data):
        info = read_batch_header(data, position)
        yield info, data[position:position + info.size]
        position += info.size


def records_of(data: bytes) -> list:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers)
            for _, raw in batches_of(data) for r in decode_records(raw)]


def clean(data: bytes, now: int, producers=None, memory: int = 1 << 20):
    offsets = OffsetMap(memory)
    consumed, full = offsets.add_batches(data, 0)
    assert consumed == len(data) and not full
    end = read_batch_header(data, 0).base_offset  # (overwritten below)
    for info, _ in batches_of(data):
        end = info.last_offset + 1
    cleaned = offsets.clean_batches(data, now, RETENTION, producers or {}, end)
    assert cleaned.consumed == len(data)
    scan = scan_log(cleaned.data, 0, len(cleaned.data), 0, 4096)
    assert scan.error is None and scan.valid_end == len(cleaned.data)
    return cleaned


def latest(written):
    last = {}
    for rec in written:
        if rec[2] is not None:
            last[rec[2]] = rec
    return last


def test_siphash_reference_vector():
    # SipHash-2-4-128 of the empty message under key 00..0f (the paper's vectors)
    lo, hi = siphash128(bytes(range(16)), b"")
    assert (lo.to_bytes(8, "little") + hi.to_bytes(8, "little")).hex() == \
        "a3817f04ba25a8e66df67214c7550293"


def test_offset_map_full_and_updates():
    offsets = OffsetMap(24 * 10, load_factor=0.5)
    assert offsets.max_size == 5
    for i in range(5):
        assert offsets.put(b"k%d" % i, i)
    assert not offsets.put(b"new", 99)          # full: a new key does not go in
    assert offsets.put(b"k1", 100)              # an update still does
    assert offsets.get(b"k1") == 100 and offsets.get(b"new") == -1
    offsets.clear()
    assert offsets.size == 0 and offsets.get(b"k1") == -1 and offsets.latest_offset == -1


@settings(max_examples=150, deadline=None)
@given(st.lists(batch, min_size=1, max_size=12))
def test_compaction_matches_model(batches):
    data, written = build_log(batches)
    first = clean(data, NOW)
    expected = sorted(latest(written).values())
    assert records_of(first.data) == expected
    # every surviving batch keeps its base offset and last offset (producer sequences)
    originals = {info.base_offset: info for info, _ in batches_of(data)}
    for info, _ in batches_of(first.data):
        assert originals[info.base_offset].last_offset == info.last_offset
        assert info.producer_id == originals[info.base_offset].producer_id
        assert info.compression == originals[info.base_offset].compression or \
            info.records_count == 0
    # cleaning again before the horizon changes nothing; after it, tombstones go
    assert records_of(clean(first.data, NOW + RETENTION - 1).data) == expected
    after = records_of(clean(first.data, NOW + RETENTION).data)
    assert after == [r for r in expected if r[3] is not None]


@settings(max_examples=60, deadline=None)
@given(st.lists(batch, min_size=2, max_size=10))
def test_last_batch_of_each_producer_kept(batches):
    data, _ = build_log(batches)
    last_of = {}
    for info, _ in batches_of(data):
        if info.producer_id >= 0:
            last_of[info.producer_id] = info.last_offset
    kept = {info.last_offset: info for info, _ in batches_of(clean(data, NOW, last_of).data)}
    for pid, last in last_of.items():
        assert last in kept and kept[last].producer_id == pid


def test_full_map_keeps_what_it_did_not_cover():
    data, written = build_log([([(b"k%d" % i, b"v", [])], 0, -1) for i in range(20)]
                              + [([(b"k0", b"new", [])], 0, -1)])
    offsets = OffsetMap(24 * 12, load_factor=0.5)   # room for 6 keys
    consumed, full = offsets.add_batches(data, 0)
    assert full and offsets.latest_offset == 5
    cleaned = offsets.clean_batches(data, NOW, RETENTION, {}, offsets.latest_offset + 1)
    # k0 at offset 0 is superseded only by offset 20, which the map did not reach
    assert [r[0] for r in records_of(cleaned.data)] == list(range(21))


def test_an_empty_batch_stays_only_while_its_producer_needs_it():
    data, _ = build_log([([(b"a", b"1", [])], 0, 7), ([(b"a", b"2", [])], 0, -1),
                         ([(b"b", b"3", [])], 0, -1)])
    kept = clean(data, NOW, {7: 0}).data
    assert [(i.base_offset, i.records_count) for i, _ in batches_of(kept)] == \
        [(0, 0), (1, 1), (2, 1)]
    # producer 7 wrote again elsewhere: its empty batch goes
    again = clean(kept, NOW, {7: 99}).data
    assert [(i.base_offset, i.records_count) for i, _ in batches_of(again)] == [(1, 1), (2, 1)]


@settings(max_examples=80, deadline=None)
@given(st.lists(batch, min_size=1, max_size=10), st.integers(0, 80))
def test_records_before_the_dirty_section_go_only_when_superseded(batches, first_dirty):
    data, written = build_log(batches)
    first_dirty = min(first_dirty, len(written))
    offsets = OffsetMap(1 << 20)
    consumed, _ = offsets.add_batches(data, first_dirty)
    assert consumed == len(data)
    offsets.latest_offset = max(offsets.latest_offset, len(written) - 1)
    cleaned = offsets.clean_batches(data, NOW, RETENTION, {}, len(written))
    dirty_latest = latest([r for r in written if r[0] >= first_dirty])
    expected = [r for r in written
                if r[2] is not None and (r[2] not in dirty_latest or
                                         dirty_latest[r[2]][0] == r[0])]
    assert records_of(cleaned.data) == expected


# a transaction: its records (as a batch), codec, whether it aborts, plain batches written
# between its data and its marker
transaction = st.tuples(st.lists(record, min_size=1, max_size=6),
                        st.sampled_from([0, 0, 1, 4]), st.booleans(),
                        st.lists(st.lists(record, min_size=1, max_size=3), max_size=2))


def build_transactional_log(transactions):
    """Each transaction by its own producer (100, 101, ...), then a last plain batch (the
    end of the round, always kept). Returns the log bytes, the records written as
    ``build_log`` but those aborted, the aborted transactions (producer id, first offset,
    marker offset) and the markers (offset -> the offsets of its transaction's records)."""
    parts, written, aborted, markers, offset = [], [], [], {}, 0

    def add(records, codec=0, pid=-1):
        nonlocal offset
        timestamps = [NOW - 100_000 + 10 * (offset + j) for j in range(len(records))]
        parts.append(encode_batch(
            [v for _, v, _ in records], [k for k, _, _ in records], timestamps,
            [list(h) for _, _, h in records], base_offset=offset, producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
            compression=codec, transactional=pid >= 0))
        written.extend((offset + j, timestamps[j], k, v, list(h))
                       for j, (k, v, h) in enumerate(records))
        offset += len(records)

    for i, (records, codec, aborts, between) in enumerate(transactions):
        pid, first = 100 + i, offset
        add(records, codec, pid)
        for plain in between:
            add(plain)
        parts.append(encode_control_batch(pid, 0, CONTROL_ABORT if aborts else CONTROL_COMMIT,
                                          1, NOW - 1000, base_offset=offset))
        if aborts:
            aborted.append((pid, first, offset))
            written = [r for r in written if not first <= r[0] < first + len(records)]
        markers[offset] = set(range(first, first + len(records)))
        offset += 1
    add([(b"end", b"end", [])])
    return b"".join(parts), written, aborted, markers


def clean_transactional(data, aborted, now):
    offsets = OffsetMap(1 << 20)
    consumed, full = offsets.add_batches(data, 0, Transactions(aborted))
    assert consumed == len(data) and not full
    end = [info.last_offset + 1 for info, _ in batches_of(data)][-1]
    transactions = Transactions(aborted)
    cleaned = offsets.clean_batches(data, now, RETENTION, {}, end, transactions)
    assert cleaned.consumed == len(data)
    scan = scan_log(cleaned.data, 0, len(cleaned.data), 0, 4096)
    assert scan.error is None and scan.valid_end == len(cleaned.data)
    return cleaned.data, transactions.kept_markers()


@settings(max_examples=120, deadline=None)
@given(st.lists(transaction, min_size=1, max_size=6))
def test_transactions_match_model(transactions):
    """Aborted records go without shadowing anything; a marker stays while a record of
    its transaction does, and goes once its delete horizon, set by the first cleaning
    that finds the transaction empty, has passed."""
    data, written, aborted, markers = build_transactional_log(transactions)
    first, kept = clean_transactional(data, aborted, NOW)
    data_records = [r for r in records_of(first) if r[0] not in markers]
    assert data_records == sorted(latest(written).values())
    assert kept == sorted(markers)  # the first cleaning keeps every marker
    assert _control_offsets(first) == set(markers)
    # past the horizons: the markers whose transaction had records in the first cleaning
    # (no horizon set) stay, the others go
    survived = {r[0] for r in data_records}
    left = {marker for marker, offsets in markers.items() if offsets & survived}
    again, kept = clean_transactional(first, aborted, NOW + RETENTION)
    assert _control_offsets(again) == left
    assert kept == sorted(left)


def _control_offsets(data):
    return {info.base_offset for info, _ in batches_of(data) if info.is_control}

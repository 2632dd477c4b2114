"""Record batch v2 core: golden bytes, every validation rule, stamping, scans, lookups.

Golden vectors are independent of this code: the varint table follows Kafka's
ByteUtilsTest values and the fixed batch was produced by kafka-python's pure-Python
builder (same bytes as ours; partitionLeaderEpoch 0 as that builder writes it).
"""

from __future__ import annotations

import array
import importlib
import mmap
import struct
import zlib

import cramjam
import crc32c as oracle
import pytest
import zstandard

from pybroker.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordValidationError,
    UnsupportedCompressionError,
)

records = importlib.import_module("pybroker._native.records")

VARINTS = [
    (0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"), (-65, "8101"),
    (8191, "fe7f"), (-8192, "ff7f"), (8192, "808001"), (-8193, "818001"),
    (1048575, "feff7f"), (-1048576, "ffff7f"), (1048576, "80808001"),
    (134217727, "feffff7f"), (-134217728, "ffffff7f"), (134217728, "8080808001"),
    (2**31 - 1, "feffffff0f"), (-2**31, "ffffffff0f"),
]
VARLONGS = VARINTS + [
    (2**31, "8080808010"), (2**63 - 1, "feffffffffffffffff01"),
    (-2**63, "ffffffffffffffffff01"),
]
# One record (key null, value b"v", no headers, timestamp 1000) from kafka-python.
GOLDEN_BATCH = bytes.fromhex(
    "0000000000000000" "00000039" "00000000" "02" "ae59b08f" "0000" "00000000"
    "00000000000003e8" "00000000000003e8" "ffffffffffffffff" "ffff" "ffffffff" "00000001"
    "0e" "00" "00" "00" "01" "02" "76" "00")


@pytest.mark.parametrize("value,encoded", VARINTS)
def test_varint_table(value, encoded):
    assert records._encode_varint(value).hex() == encoded
    assert records._decode_varint(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


@pytest.mark.parametrize("value,encoded", VARLONGS)
def test_varlong_table(value, encoded):
    assert records._encode_varint(value, long=True).hex() == encoded
    assert records._decode_varint(bytes.fromhex(encoded), long=True) == (
        value, len(encoded) // 2)


@pytest.mark.parametrize("data", ["80", "8080", "ffffffffff01", ""])
def test_varint_truncated_or_overlong(data):
    with pytest.raises(ValueError):
        records._decode_varint(bytes.fromhex(data))


def test_golden_batch():
    info = records.validate_batch(GOLDEN_BATCH)
    assert info.crc == 0xAE59B08F
    assert (info.base_offset, info.size, info.records_count, info.first_timestamp,
            info.max_timestamp, info.producer_id, info.compression) == (
        0, len(GOLDEN_BATCH), 1, 1000, 1000, -1, 0)
    assert records.decode_records(GOLDEN_BATCH) == [(0, 1000, None, b"v", [])]
    assert records.encode_batch([b"v"], timestamps=[1000],
                                partition_leader_epoch=0) == GOLDEN_BATCH


# ---- validation rules ----

def simple_batch(n=3, **kw) -> bytearray:
    return bytearray(records.encode_batch([b"a"] * n, timestamps=[5] * n, **kw))


def fix_crc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, 17, oracle.crc32c(bytes(buf[21:])))
    return bytes(buf)


def set_length(buf: bytearray) -> None:
    struct.pack_into(">i", buf, 8, len(buf) - 12)


# Records of simple_batch(3): "0e 00 00 <od> 01 02 61 00" each, from byte 61.
def record_byte(i: int, field: int) -> int:
    return 61 + 8 * i + field


@pytest.mark.parametrize("mutate,error,reason", [
    (lambda b: b.__setitem__(16, 1), CorruptRecordError, "magic"),
    (lambda b: b.__setitem__(20, b[20] ^ 1), CorruptRecordError, "CRC32C"),
    (lambda b: struct.pack_into(">i", b, 8, 48), CorruptRecordError, "batchLength"),
    (lambda b: struct.pack_into(">i", b, 8, len(b) - 11), CorruptRecordError, "truncated"),
    (lambda b: b.extend(b"\x00"), CorruptRecordError, "batchLength"),
    (lambda b: b.__delitem__(slice(60, None)), CorruptRecordError, "truncated"),
])
def test_damaged_header(mutate, error, reason):
    buf = simple_batch()
    mutate(buf)
    with pytest.raises(error, match=reason):
        records.validate_batch(bytes(buf))


@pytest.mark.parametrize("mutate,error,reason", [
    (lambda b: struct.pack_into(">i", b, 57, 4), InvalidRecordError, "recordsCount"),
    (lambda b: struct.pack_into(">i", b, 23, 1), InvalidRecordError, "recordsCount"),
    (lambda b: (struct.pack_into(">ii", b, 53, 0, 0), struct.pack_into(">i", b, 23, -1)),
     InvalidRecordError, "recordsCount"),
    (lambda b: struct.pack_into(">h", b, 21, 0x20), InvalidRecordError, "control"),
    (lambda b: struct.pack_into(">h", b, 21, 5), UnsupportedCompressionError, "codec"),
    (lambda b: b.__setitem__(record_byte(1, 3), 4), InvalidRecordError, "offsetDelta"),
    (lambda b: b.__setitem__(record_byte(0, 3), 2), InvalidRecordError, "offsetDelta"),
    (lambda b: b.__setitem__(record_byte(2, 0), 0x10), InvalidRecordError, "past the end"),
    (lambda b: b.__setitem__(record_byte(0, 0), 0x10), InvalidRecordError, "length does"),
    (lambda b: b.__setitem__(record_byte(1, 4), 0x03), InvalidRecordError, "below -1"),
    (lambda b: b.__setitem__(record_byte(1, 5), 0x7e), InvalidRecordError, "past the end"),
    (lambda b: b.__setitem__(record_byte(1, 7), 0x01), InvalidRecordError, "header"),
    (lambda b: (b.extend(b"\x00"), set_length(b)), InvalidRecordError, "left after"),
])
def test_broken_rule_with_valid_crc(mutate, error, reason):
    buf = simple_batch()
    assert bytes(buf[61:69]).hex() == "0e00000001026100"
    mutate(buf)
    with pytest.raises(error, match=reason):
        records.validate_batch(fix_crc(buf))


def test_control_batches_decode_from_the_log():
    buf = simple_batch()
    struct.pack_into(">h", buf, 21, 0x30)
    batch = fix_crc(buf)
    with pytest.raises(InvalidRecordError):
        records.validate_batch(batch)
    assert len(records.decode_records(batch)) == 3
    assert records.read_batch_header(batch).is_control


def compressed(section: bytes, codec: int, count: int) -> bytes:
    buf = bytearray(records.encode_batch([b"a"] * count, timestamps=[5] * count))
    buf[61:] = section
    struct.pack_into(">h", buf, 21, codec)
    set_length(buf)
    return fix_crc(buf)


def records_section(n: int) -> bytes:
    return bytes(simple_batch(n)[61:])


def test_snappy_raw_and_xerial_both_accepted():
    raw = bytes(cramjam.snappy.compress_raw(records_section(100)))
    assert records.validate_batch(compressed(raw, 2, 100)).records_count == 100
    xerial = records.encode_batch([b"a"] * 100, compression=2)
    assert xerial[61:69] == b"\x82SNAPPY\x00"
    assert records.validate_batch(xerial).records_count == 100


def test_zstd_without_content_size_accepted():
    section = zstandard.ZstdCompressor(write_content_size=False).compress(records_section(50))
    assert zstandard.frame_content_size(section) == -1
    assert len(records.decode_records(compressed(section, 4, 50))) == 50


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_garbage_compressed_section(codec):
    with pytest.raises(CorruptRecordError):
        records.validate_batch(compressed(b"\x00not compressed at all" * 3, codec, 3))


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decompression_bound(codec):
    batch = records.encode_batch([bytes(1000)] * 100, compression=codec)
    assert records.validate_batch(batch).records_count == 100
    with pytest.raises(InvalidRecordError, match="exceed"):
        records.validate_batch(batch, max_decompressed_size=50_000)


def test_zstd_without_content_size_near_the_bound():
    # Block headers allow up to 128 KiB per compressed block: above the limit, the
    # stepped path must still accept output that fits and refuse output that does not.
    section = records_section(12_000)
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(section)
    batch = compressed(frame, 4, 12_000)
    assert records.validate_batch(batch, max_decompressed_size=len(section)).records_count == 12_000
    with pytest.raises(InvalidRecordError, match="exceed"):
        records.validate_batch(batch, max_decompressed_size=len(section) - 1)
    with pytest.raises(CorruptRecordError, match="truncated"):
        records.validate_batch(compressed(frame[:-3], 4, 12_000))


def zero_value_record_head(value_len: int) -> bytes:
    """One record up to its value of ``value_len`` zeros (its header count, 0, follows)."""
    body = b"\x00\x00\x00" + records._encode_varint(-1) + records._encode_varint(value_len)
    return records._encode_varint(len(body) + value_len + 1) + body


def zeros_frame(head: bytes, section_bytes: int) -> bytes:
    """A zstd frame (no content size) of ``head`` then zeros, ``section_bytes`` in all."""
    c = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    parts = [c.compress(head)]
    zeros, left = bytes(1 << 20), section_bytes - len(head)
    while left:
        parts.append(c.compress(zeros[:min(left, len(zeros))]))
        left -= min(left, len(zeros))
    return b"".join(parts) + c.flush()


def test_default_decompression_bound():
    cap = records.MAX_DECOMPRESSED_SIZE
    # A record's value running past the cap: well-formed as far as the cap, where
    # decompression stops.
    bomb = zeros_frame(zero_value_record_head(cap), cap + 1)
    assert len(bomb) < 100_000
    with pytest.raises(InvalidRecordError, match="exceed"):
        records.validate_batch(compressed(bomb, 4, 1))
    # A well-formed record filling the cap exactly is accepted.
    head = zero_value_record_head(cap - 13)
    assert len(head) == 12
    exact = zeros_frame(head, cap)
    assert records.validate_batch(compressed(exact, 4, 1)).records_count == 1


def test_bad_records_stop_decompression():
    # Zeros are no record: refused at the first one, as Kafka does (INVALID_RECORD), not
    # after inflating the whole frame.
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(
        bytes(records.MAX_DECOMPRESSED_SIZE + 1))
    with pytest.raises(InvalidRecordError, match="record length does not match .* byte 0"):
        records.validate_batch(compressed(bomb, 4, 1))


def test_compressed_record_framing_checked():
    gz = zlib.compressobj(wbits=31)
    section = gz.compress(records_section(3)[:-1] + b"\x05") + gz.flush()
    with pytest.raises(InvalidRecordError):
        records.validate_batch(compressed(section, 1, 3))


def test_validate_never_writes(tmp_path):
    batch = records.encode_batch([b"x" * 100] * 10, compression=3)
    p = tmp_path / "b"
    p.write_bytes(batch)
    with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert records.validate_batch(m).records_count == 10
    assert records.validate_batch(memoryview(batch)).crc == records.validate_batch(batch).crc


# ---- header peek and stamping ----

def test_read_batch_header_at_position():
    a, b = simple_batch(2), simple_batch(5, base_offset=2)
    buf = bytes(a + b)
    info = records.read_batch_header(buf, len(a))
    assert (info.base_offset, info.records_count, info.last_offset) == (2, 5, 6)
    with pytest.raises(CorruptRecordError):
        records.read_batch_header(buf, len(buf) - 60)
    with pytest.raises(ValueError):
        records.read_batch_header(buf, len(buf) + 1)


def test_stamp_offsets_and_epoch_keeps_crc():
    buf = simple_batch()
    crc = records.validate_batch(bytes(buf)).crc
    records.stamp_batch(buf, 0, 1234, 7)
    info = records.validate_batch(bytes(buf))
    assert (info.base_offset, info.partition_leader_epoch, info.crc) == (1234, 7, crc)
    assert [r.offset for r in records.decode_records(bytes(buf))] == [1234, 1235, 1236]


def test_stamp_log_append_time_recomputes_crc():
    seg = bytearray(b"\x00" * 10) + simple_batch(4)
    records.stamp_batch(seg, 10, 50, 1, log_append_time=99_000)
    batch = bytes(seg[10:])
    info = records.validate_batch(batch)
    assert (info.timestamp_type, info.max_timestamp, info.first_timestamp) == (1, 99_000, 5)
    assert [r.timestamp for r in records.decode_records(batch)] == [99_000] * 4


def test_stamp_needs_writable_buffer_and_room():
    with pytest.raises(BufferError):
        records.stamp_batch(bytes(simple_batch()), 0, 1, 1)
    short = simple_batch()[:-1]
    records.stamp_batch(short, 0, 1, 1)      # header only: fine without the CRC
    with pytest.raises(CorruptRecordError):
        records.stamp_batch(short, 0, 1, 1, log_append_time=5)


# ---- segment scans and lookups ----

def segment(batch_sizes, interval=None, ts_step=10):
    """Batches of `n` records each, offsets assigned, timestamps rising per batch."""
    out = bytearray()
    offset = 0
    for i, n in enumerate(batch_sizes):
        b = bytearray(records.encode_batch([b"v" * 200] * n,
                                           timestamps=[ts_step * i + j for j in range(n)]))
        records.stamp_batch(b, 0, offset, 0)
        offset += n
        out += b
    return out


def kafka_index(seg, interval):
    """Kafka's LogSegment.recover rule, written out in Python as the reference."""
    pos, last_entry, max_ts, max_off, oidx, tidx, last_ts = 0, 0, -1, -1, [], [], -1
    while pos < len(seg):
        info = records.read_batch_header(seg, pos)
        if info.max_timestamp > max_ts:
            max_ts, max_off = info.max_timestamp, info.last_offset
        if pos - last_entry > interval:
            oidx.append(struct.pack(">II", info.last_offset, pos))
            if max_ts > last_ts:
                tidx.append(struct.pack(">qI", max_ts, max_off))
                last_ts = max_ts
            last_entry = pos
        pos += info.size
    return b"".join(oidx), b"".join(tidx)


def test_scan_builds_kafkas_indexes():
    seg = segment([1, 3, 7, 2, 9, 1, 1, 4] * 5)
    for interval in (0, 100, 1000, 4096, 1 << 30):
        scan = records.scan_log(seg, 0, len(seg), 0, interval)
        assert scan.error is None and scan.valid_end == len(seg)
        assert scan.batch_count == 40 and scan.next_offset == 28 * 5
        assert (scan.offset_index, scan.time_index) == kafka_index(seg, interval)
    assert scan.max_timestamp == 39 * 10 + 3
    assert scan.offset_of_max_timestamp == 28 * 5 - 1


def test_scan_stops_at_torn_tail_and_zero_tail():
    seg = segment([2, 2, 2])
    ends = [records.scan_log(seg, 0, len(seg), 0, 4096).valid_end]
    first = records.read_batch_header(seg).size
    torn = records.scan_log(seg[:-5], 0, len(seg) - 5, 0, 4096)
    assert torn.valid_end == 2 * first and torn.next_offset == 4
    assert "truncated" in torn.error
    zeros = seg + bytes(4096)
    scan = records.scan_log(zeros, 0, len(zeros), 0, 4096)
    assert scan.valid_end == ends[0] and scan.error is not None


def test_scan_rejects_offsets_going_backwards():
    seg = segment([2, 2]) + segment([2])
    scan = records.scan_log(seg, 0, len(seg), 0, 4096)
    assert scan.batch_count == 2 and "out of order" in scan.error
    assert records.scan_log(segment([2]), 0, 100, 5, 4096).error is not None


def test_scan_from_a_position_of_an_mmap(tmp_path):
    seg = segment([3, 3, 3])
    first = records.read_batch_header(seg).size
    p = tmp_path / "00000000000000000000.log"
    p.write_bytes(seg)
    with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        scan = records.scan_log(m, first, len(seg), 0, 4096)
        assert (scan.batch_count, scan.next_offset, scan.valid_end) == (2, 9, len(seg))
    with pytest.raises(ValueError):
        records.scan_log(seg, 10, len(seg) + 1, 0, 4096)


def test_find_position():
    seg = segment([2, 3, 4])
    sizes = [records.read_batch_header(seg).size]
    sizes.append(records.read_batch_header(seg, sizes[0]).size)
    assert records.find_position(seg, 0, len(seg), 0)[0] == 0
    pos, info = records.find_position(seg, 0, len(seg), 4)
    assert (pos, info.base_offset, info.last_offset) == (sizes[0], 2, 4)
    assert records.find_position(seg, 0, len(seg), 5)[0] == sum(sizes)
    assert records.find_position(seg, 0, len(seg), 9) is None
    assert records.find_position(seg, 0, len(seg) - 1, 8) is None     # incomplete batch
    with pytest.raises(CorruptRecordError):
        records.find_position(seg[:sizes[0]] + bytes(100), 0, sizes[0] + 100, 5)


@pytest.mark.parametrize("codec", [0, 2, 4])
def test_find_timestamp(codec):
    seg = bytearray()
    for i, base in enumerate((0, 3)):
        b = bytearray(records.encode_batch([b"x"] * 3, timestamps=[100 * i + t for t in
                                                                  (5, 50, 20)],
                                           compression=codec))
        records.stamp_batch(b, 0, base, 0)
        seg += b
    first = records.read_batch_header(seg).size
    assert records.find_timestamp(seg, 0, len(seg), 0) == (0, 0, 5)
    assert records.find_timestamp(seg, 0, len(seg), 21) == (0, 1, 50)
    assert records.find_timestamp(seg, 0, len(seg), 51) == (first, 3, 105)
    assert records.find_timestamp(seg, 0, len(seg), 106) == (first, 4, 150)
    assert records.find_timestamp(seg, 0, len(seg), 151) is None
    records.stamp_batch(seg, first, 3, 0, log_append_time=777)
    assert records.find_timestamp(seg, 0, len(seg), 151) == (first, 3, 777)


# ---- columnar encoder ----

def test_encode_columns_from_arrow():
    import pyarrow as pa

    values = pa.array([b"a", None, b"ccc", b""], type=pa.binary())
    keys = pa.array(["k0", "k1", None, "k3"], type=pa.string())
    ts = pa.array([10, 30, 20, 40], type=pa.int64())
    headers = pa.array([[], [{"key": "h", "value": b"1"}], [], [{"key": "x", "value": None},
                                                               {"key": "y", "value": b""}]],
                       type=pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))
    hk, hv = headers.values.field("key"), headers.values.field("value")

    def col(arr):
        validity, offsets, data = arr.buffers()
        return (offsets, data, validity, arr.offset)

    batch = records.encode_batch_columns(
        4, col(values), col(keys), ts.buffers()[1],
        (headers.buffers()[1], col(hk), col(hv)), compression=3, base_offset=10)
    assert records.decode_records(batch) == [
        (10, 10, b"k0", b"a", []), (11, 30, b"k1", None, [("h", b"1")]),
        (12, 20, None, b"ccc", []), (13, 40, b"k3", b"", [("x", None), ("y", b"")])]
    sliced = values.slice(1, 2)
    batch = records.encode_batch_columns(
        2, (sliced.buffers()[1][4:], sliced.buffers()[2], sliced.buffers()[0], sliced.offset))
    assert [r.value for r in records.decode_records(batch)] == [None, b"ccc"]


def test_encode_columns_rejects_bad_buffers():
    offsets = array.array("i", [0, 1, 2])
    with pytest.raises(ValueError, match="entries"):
        records.encode_batch_columns(3, (offsets, b"ab"))
    with pytest.raises(ValueError, match="offsets"):
        records.encode_batch_columns(2, (array.array("i", [0, 2, 1]), b"ab"))
    with pytest.raises(ValueError, match="offsets"):
        records.encode_batch_columns(2, (array.array("i", [0, 1, 3]), b"ab"))
    with pytest.raises(ValueError, match="aligned"):
        records.encode_batch_columns(2, (memoryview(b"\x00" + offsets.tobytes())[1:], b"ab"))
    with pytest.raises(ValueError):
        records.encode_batch_columns(0, (array.array("i", [0]), b""))
    with pytest.raises(ValueError, match="null"):
        records.encode_batch([b"a"], headers=[[(None, b"x")]])
    with pytest.raises(UnsupportedCompressionError):
        records.encode_batch([b"a"], compression=5)


def test_encode_batch_fields():
    batch = records.encode_batch([b"a", b"b"], [None, b"k"], [7, 3], base_offset=40,
                                 producer_id=9, producer_epoch=2, base_sequence=11,
                                 transactional=True, partition_leader_epoch=4)
    info = records.validate_batch(batch)
    assert (info.base_offset, info.producer_id, info.producer_epoch, info.base_sequence,
            info.is_transactional, info.partition_leader_epoch, info.first_timestamp,
            info.max_timestamp, info.last_offset_delta) == (40, 9, 2, 11, True, 4, 7, 7, 1)


@pytest.mark.parametrize("compression", [0, 1, 2, 3, 4])
def test_keys_required_names_every_record_without_one(compression):
    """A compacted topic's rule (validate_batch's keyless_error): each record without a key
    is one record error, compressed or not; an empty key is a key."""
    batch = records.encode_batch([b"a", b"b", b"c", b"d"], keys=[None, b"", None, b"k"],
                                 compression=compression)
    assert records.validate_batch(batch).records_count == 4  # keys optional by default
    with pytest.raises(RecordValidationError) as refused:
        records.validate_batch(batch, keyless_error="no key here")
    assert refused.value.code == 87
    assert refused.value.record_errors == [(0, "no key here"), (2, "no key here")]
    assert str(refused.value) == (
        "One or more records have been rejected due to 2 record errors in total, and only "
        "showing the first three errors at most: [RecordError(batchIndex=0, message='no key "
        "here'), RecordError(batchIndex=2, message='no key here')]")
    keyed = records.encode_batch([b"a"], keys=[b"k"], compression=compression)
    assert records.validate_batch(keyed, keyless_error="no key here").records_count == 1


def test_broken_framing_wins_over_missing_keys():
    batch = bytearray(records.encode_batch([b"a", b"b"], keys=[None, None]))
    batch[-1] = 5  # the last record's header count: past its end
    struct.pack_into(">I", batch, 17, oracle.crc32c(bytes(batch[21:])))
    with pytest.raises(InvalidRecordError):
        records.validate_batch(bytes(batch), keyless_error="no key")

"""The resumable record walker against the whole-buffer validation, byte for byte.

``RecordWalker`` checks a records section fed in pieces (a compressed batch decompressed a
chunk at a time); ``validate_batch`` of an uncompressed batch checks the same section in one
buffer (``pb_validate_records``). For any section, well-formed or damaged, and any way of
cutting it into pieces (every single cut position included), both must give the same
verdict: success, or the same error class and message, at the same byte, and, keys being
required (a compacted topic), the same records found without a key. Compressed
batches, validated through the walker a piece of output at a time, must agree as well,
for every codec, with pieces small enough that records straddle them.

Sections are records built here from their fields (not by the encoder under test), then
damaged: bytes changed, cut short, inserted, or raw varint bytes spliced in where a length
goes.
"""

from __future__ import annotations

import importlib
import os
import struct
from unittest import mock

import crc32c as oracle
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker._native import compression
from pybroker.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaError,
    RecordValidationError,
)

records = importlib.import_module("pybroker._native.records")

EXAMPLES = int(os.environ.get("PB_FUZZ_EXAMPLES", "150"))
fuzz = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def varint(value: int) -> bytes:
    u = (value << 1) ^ (value >> 63)
    u &= (1 << 64) - 1
    out = bytearray()
    while u >= 0x80:
        out.append(u & 0x7F | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def field(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def record(attributes: int, ts_delta: int, offset_delta: int, key: bytes | None,
           value: bytes | None, headers: list[tuple[bytes | None, bytes | None]]) -> bytes:
    body = (bytes([attributes]) + varint(ts_delta) + varint(offset_delta) + field(key)
            + field(value) + varint(len(headers))
            + b"".join(field(k) + field(v) for k, v in headers))
    return varint(len(body)) + body


def mostly(strategy: st.SearchStrategy, rarely: st.SearchStrategy) -> st.SearchStrategy:
    """``strategy``, and one draw in 40 ``rarely`` (a fault that would hide the others)."""
    return st.integers(0, 39).flatmap(lambda i: rarely if i == 0 else strategy)


maybe_bytes = st.none() | st.binary(max_size=40) | st.binary(min_size=200, max_size=3000)
records_fields = st.lists(st.tuples(
    st.integers(0, 255), st.integers(-2**63, 2**63 - 1), mostly(st.just(True), st.just(False)),
    maybe_bytes, maybe_bytes,
    st.lists(st.tuples(mostly(st.binary(max_size=8), st.none()), maybe_bytes), max_size=3)),
    min_size=1, max_size=8)
# Bytes that make lengths interesting where they land: -1, -2, long and overlong varints.
varint_junk = st.sampled_from([b"\x01", b"\x03", b"\x00", b"\x80", b"\xff\xff\xff\xff\x0f",
                               b"\xff\xff\xff\xff\xff\x01", b"\x80\x80\x80\x80\x80\x80",
                               b"\xfe\xff\xff\xff\x07"])


@st.composite
def sections(draw) -> tuple[bytes, int]:
    fields = draw(records_fields)
    section = bytearray()
    for i, (attr, ts, right_offset, key, value, headers) in enumerate(fields):
        section += record(attr, ts, i if right_offset or i == 0 else i + 1, key, value,
                          headers)
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "junk", "none"]))
        at = draw(st.integers(0, len(section)))
        if kind == "flip" and at < len(section):
            section[at] = draw(st.integers(0, 255))
        elif kind == "cut":
            del section[at:]
        elif kind == "insert":
            section[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif kind == "junk":
            section[at:at + 1] = draw(varint_junk)
    count = draw(st.sampled_from([len(fields), len(fields), max(1, len(fields) - 1),
                                  len(fields) + 1]))
    return bytes(section), count


def whole_verdict(section: bytes, count: int) -> tuple[type, object] | None:
    """What validate_batch says of an uncompressed batch with this section, keys required,
    positions made section-relative (the batch header is 61 bytes)."""
    batch = bytearray(records.encode_batch([b""] * count)[:61]) + section
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, oracle.crc32c(bytes(batch[21:])))
    try:
        records.validate_batch(batch, keyless_error="no key")
    except RecordValidationError as exc:
        assert {why for _, why in exc.record_errors} == {"no key"}
        return RecordValidationError, [index for index, _ in exc.record_errors]
    except KafkaError as exc:
        message, _, position = str(exc).rpartition(" (at byte ")
        return type(exc), f"{message} (at byte {int(position[:-1]) - 61})"
    return None


def walker_verdict(pieces: list[bytes], count: int) -> tuple[type, object] | None:
    walker = records.RecordWalker(count, keys_required=True)
    try:
        for piece in pieces:
            walker.feed(piece)
        walker.finish()
    except KafkaError as exc:
        return type(exc), str(exc)
    if walker.keyless:
        return RecordValidationError, walker.keyless
    return None


def cut(section: bytes, positions: list[int]) -> list[bytes]:
    edges = [0, *sorted(set(positions)), len(section)]
    return [section[a:b] for a, b in zip(edges, edges[1:], strict=False)]


@fuzz
@given(sections())
def test_every_single_cut_agrees_with_the_whole(case):
    section, count = case
    expected = whole_verdict(section, count)
    assert walker_verdict([section], count) == expected
    for at in range(len(section) + 1):
        assert walker_verdict(cut(section, [at]), count) == expected, at


@fuzz
@given(sections(), st.data())
def test_many_cuts_agree_with_the_whole(case, data):
    section, count = case
    positions = data.draw(st.lists(st.integers(0, len(section)), max_size=40))
    assert walker_verdict(cut(section, positions), count) == whole_verdict(section, count)


@fuzz
@given(sections())
def test_byte_by_byte_agrees_with_the_whole(case):
    section, count = case
    pieces = [section[i:i + 1] for i in range(len(section))]
    assert walker_verdict(pieces, count) == whole_verdict(section, count)


def test_verdict_stays_and_later_pieces_are_ignored():
    walker = records.RecordWalker(1)
    with pytest.raises(InvalidRecordError, match="at byte 0"):
        walker.feed(b"\x00\x00")
    with pytest.raises(InvalidRecordError, match="at byte 0"):
        walker.feed(record(0, 0, 0, None, b"v", []))
    with pytest.raises(InvalidRecordError, match="at byte 0"):
        walker.finish()


def test_large_value_passes_through_without_being_held():
    value_len = 64 << 20
    body = b"\x00" + varint(0) + varint(0) + varint(-1) + varint(value_len)
    head = varint(len(body) + value_len + 1) + body  # the record up to its value
    walker = records.RecordWalker(1)
    walker.feed(head)
    zeros = bytes(1 << 20)
    for _ in range(64):
        walker.feed(zeros)
    walker.feed(b"\x00")  # no headers
    walker.finish()
    assert walker.position == len(head) + value_len + 1


# ---- through the codecs, output in small pieces ------------------------------------------

CODECS = [compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]


def compressed_batch(section: bytes, codec: int, count: int) -> bytes:
    batch = bytearray(records.encode_batch([b""] * count)[:61])
    batch += compression.compress(codec, section)
    struct.pack_into(">h", batch, 21, codec)
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, oracle.crc32c(bytes(batch[21:])))
    return bytes(batch)


def batch_verdict(batch: bytes) -> tuple[type, object] | None:
    """validate_batch's verdict, keys required (whole_verdict's terms)."""
    try:
        records.validate_batch(batch, keyless_error="no key")
    except RecordValidationError as exc:
        return RecordValidationError, [index for index, _ in exc.record_errors]
    except KafkaError as exc:
        return type(exc), str(exc)
    return None


@fuzz
@given(sections(), st.sampled_from(CODECS), st.sampled_from([1, 7, 64, 4096]))
def test_compressed_batches_agree_with_the_whole(case, codec, piece_bytes):
    section, count = case
    with mock.patch.object(compression, "CHUNK_BYTES", piece_bytes), \
            mock.patch.object(compression, "_XERIAL_BLOCK", max(piece_bytes, 16)):
        batch = compressed_batch(section, codec, count)
        assert batch_verdict(batch) == whole_verdict(section, count)


@fuzz
@given(sections(), st.sampled_from(CODECS), st.data())
def test_damaged_compressed_bytes(case, codec, data):
    """Damaged compressed bytes: the verdict of the whole section when it decompresses;
    otherwise an error (the codec's, or a bad record met before it), never anything else."""
    section, count = case
    with mock.patch.object(compression, "CHUNK_BYTES", 64):
        batch = bytearray(compressed_batch(section, codec, count))
        at = data.draw(st.integers(61, len(batch) - 1))
        if data.draw(st.booleans()):
            batch[at] ^= 1 << data.draw(st.integers(0, 7))
        else:
            del batch[at:]
        struct.pack_into(">i", batch, 8, len(batch) - 12)
        struct.pack_into(">I", batch, 17, oracle.crc32c(bytes(batch[21:])))
        try:
            whole = compression.decompress(codec, memoryview(batch)[61:], 1 << 26)
        except (CorruptRecordError, InvalidRecordError) as exc:
            got = batch_verdict(bytes(batch))
            assert got is not None and got[0] in (CorruptRecordError, InvalidRecordError)
            if got[0] is CorruptRecordError:
                assert got[1] == str(exc)
            return
        assert batch_verdict(bytes(batch)) == whole_verdict(bytes(whole), count)


# ---- what validation holds, and the codecs' framing in pieces ------------------------------

def one_record_section(value_len: int) -> bytes:
    return record(0, 0, 0, None, bytes(value_len), [])


@pytest.mark.parametrize("codec", [compression.GZIP, compression.LZ4, compression.ZSTD])
def test_validation_holds_a_piece_not_the_section(codec):
    import tracemalloc

    batch = compressed_batch(one_record_section(24 << 20), codec, 1)
    tracemalloc.start()
    try:
        assert records.validate_batch(batch).records_count == 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * compression.CHUNK_BYTES, peak


@pytest.mark.parametrize("content_size", [True, False])
def test_zstd_frame_must_be_whole_and_alone(content_size):
    import zstandard

    section = record(0, 0, 0, None, os.urandom(1000) * 300, [])
    frame = zstandard.ZstdCompressor(write_content_size=content_size).compress(section)
    for bad, why in [(frame[:-1], "truncated"), (frame[:-40], "truncated"),
                     (frame + b"\x00", "bytes after"), (frame + frame, "bytes after")]:
        with pytest.raises(CorruptRecordError, match=why):
            list(compression.decompress_chunks(compression.ZSTD, bad, 1 << 26))
    assert b"".join(compression.decompress_chunks(compression.ZSTD, frame, 1 << 26)) == section


def test_zstd_stated_size_over_the_limit_refused_before_any_work():
    import zstandard

    frame = zstandard.ZstdCompressor().compress(bytes(1000))
    with pytest.raises(InvalidRecordError, match="exceed 999 bytes"):
        next(compression.decompress_chunks(compression.ZSTD, frame, 999))


def test_lz4_frame_must_be_whole_and_alone():
    import lz4.frame

    section = one_record_section(3 << 20)
    # 4 MiB blocks: a block's output leaves the decoder over several pieces
    frame = lz4.frame.compress(section, block_size=lz4.frame.BLOCKSIZE_MAX4MB)
    assert b"".join(compression.decompress_chunks(compression.LZ4, frame, 1 << 26)) == section
    for bad, why in [(frame[:-1], "truncated"), (frame + b"\x00", "bytes after")]:
        with pytest.raises(CorruptRecordError, match=why):
            list(compression.decompress_chunks(compression.LZ4, bad, 1 << 26))


def test_gzip_members_in_pieces():
    section = one_record_section(3 << 20)
    first = compression.gzip_compress(section[:1000])
    second = compression.gzip_compress(section[1000:])
    members = first + second
    assert b"".join(compression.decompress_chunks(compression.GZIP, members, 1 << 26)) == section
    with pytest.raises(CorruptRecordError, match="truncated"):
        list(compression.decompress_chunks(compression.GZIP, members[:-1], 1 << 26))
    with pytest.raises(CorruptRecordError, match="gzip"):
        list(compression.decompress_chunks(compression.GZIP, members + b"\x00" * 20, 1 << 26))

"""Kafka's compression codecs for the records section of a record batch v2.

A compressed batch keeps its 61-byte header in the clear and compresses only the
records that follow (``attributes & 7``: 1 gzip, 2 snappy, 3 lz4, 4 zstd). The broker
validates such a batch by decompressing it once into a scratch buffer and walking the
records natively (``records.validate_batch``); the stored bytes are never recompressed.

Formats accepted, as the Kafka clients write them:
- gzip: RFC 1952 members (Java ``GZIPOutputStream``), several members allowed.
- snappy: the xerial block framing of the Java client (16-byte header ``\\x82SNAPPY\\x00``,
  version, compat, then blocks of ``i32 length + raw snappy``) or one raw snappy block
  (librdkafka).
- lz4: one LZ4 frame (Kafka >= 0.10 writes correct frame header checksums).
- zstd: one zstd frame, with or without the content size in its header.

Decompression bombs: every decompressor here stops once the output passes ``limit``
bytes (``records.DEFAULT_MAX_DECOMPRESSED``, 64 MiB: a default-sized 1 MiB batch would need
a 64:1 ratio to reach it, which real record data does not; callers may pass a larger
limit). Output is never materialised beyond ``limit`` plus one bounded step.

Errors: damaged compressed bytes raise ``CorruptRecordError``; output over the limit
raises ``InvalidRecordError``.
"""

from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame  # type: ignore[import-untyped]
import zstandard

from pybroker.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaError,
    UnsupportedCompressionError,
)

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024          # the Java client's block size
# zstd frames without a content size whose block headers allow more than `limit` are fed
# this much input at a time: one step expands at most ~32768x (RLE blocks).
_ZSTD_STEP = 2048


def _too_large(limit: int) -> KafkaError:
    return InvalidRecordError(f"decompressed records exceed {limit} bytes")


def gzip_decompress(data, limit: int) -> bytes:
    out = []
    total = 0
    rest = data
    while True:
        d = zlib.decompressobj(31)
        try:
            chunk = d.decompress(rest, limit + 1 - total)
        except zlib.error as e:
            raise CorruptRecordError(f"gzip: {e}") from None
        total += len(chunk)
        out.append(chunk)
        if total > limit:
            raise _too_large(limit)
        if not d.eof:
            raise CorruptRecordError("gzip: truncated stream")
        rest = d.unused_data
        if not rest:
            return b"".join(out)


def _snappy_raw_len(block) -> int:
    try:
        return cramjam.snappy.decompress_raw_len(block)
    except cramjam.DecompressionError as e:
        raise CorruptRecordError(f"snappy: {e}") from None


def snappy_decompress(data, limit: int):
    mv = memoryview(data)
    blocks = []
    if len(mv) >= 16 and mv[:8] == _XERIAL_MAGIC:
        pos = 16
        while pos < len(mv):
            if len(mv) - pos < 4:
                raise CorruptRecordError("snappy: truncated xerial block length")
            (n,) = struct.unpack_from(">i", mv, pos)
            pos += 4
            if n < 0 or n > len(mv) - pos:
                raise CorruptRecordError("snappy: xerial block runs past the data")
            blocks.append(mv[pos:pos + n])
            pos += n
    else:
        blocks.append(mv)
    sizes = [_snappy_raw_len(b) for b in blocks]
    total = sum(sizes)
    if total > limit:
        raise _too_large(limit)
    out = bytearray(total)
    view = memoryview(out)
    pos = 0
    for block, size in zip(blocks, sizes, strict=True):
        try:
            n = cramjam.snappy.decompress_raw_into(block, view[pos:pos + size])
        except cramjam.DecompressionError as e:
            raise CorruptRecordError(f"snappy: {e}") from None
        if n != size:
            raise CorruptRecordError("snappy: block shorter than its declared length")
        pos += size
    return out


def _stepped(name: str, d, mv: memoryview, step: int, limit: int) -> bytes:
    """Feed `mv` to the streaming decompressor `d` `step` bytes at a time, refusing output
    past `limit` after each step; the frame must end exactly at the end of `mv`."""
    out = []
    total = 0
    for pos in range(0, len(mv), step):
        chunk = d.decompress(mv[pos:pos + step])
        total += len(chunk)
        if total > limit:
            raise _too_large(limit)
        out.append(chunk)
        if d.eof:
            if pos + step < len(mv) or d.unused_data:
                raise CorruptRecordError(f"{name}: bytes after the frame")
            return b"".join(out)
    raise CorruptRecordError(f"{name}: truncated frame")


def lz4_decompress(data, limit: int) -> bytes:
    # LZ4 cannot expand more than ~255:1, so steps of limit/256 input bytes bound every
    # step's output without max_length (which allocates `limit` up front, 5x slower).
    try:
        return _stepped("lz4", lz4.frame.LZ4FrameDecompressor(), memoryview(data),
                        max(65536, limit // 256), limit)
    except RuntimeError as e:
        raise CorruptRecordError(f"lz4: {e}") from None


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_BLOCK_MAX = 128 * 1024


def _zstd_output_bound(mv: memoryview) -> int:
    """Upper bound of a zstd frame's output from its block headers (RFC 8878 3.1.1).

    Raw and RLE blocks state their size, a compressed block yields at most 128 KiB. Also
    checks that the frame is complete and alone. A few header reads per MiB.
    """
    if len(mv) < 6 or mv[:4] != _ZSTD_MAGIC:
        raise CorruptRecordError("zstd: not a zstd frame")
    fhd = mv[4]
    single_segment = (fhd >> 5) & 1
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 3]
    pos += (single_segment, 2, 4, 8)[fhd >> 6]
    bound = 0
    while True:
        if len(mv) - pos < 3:
            raise CorruptRecordError("zstd: truncated frame")
        header = mv[pos] | mv[pos + 1] << 8 | mv[pos + 2] << 16
        kind, size = (header >> 1) & 3, header >> 3
        if kind == 3:
            raise CorruptRecordError("zstd: reserved block type")
        pos += 3 + (1 if kind == 1 else size)
        bound += _ZSTD_BLOCK_MAX if kind == 2 else size
        if header & 1:
            break
    pos += 4 if fhd & 4 else 0
    if pos != len(mv):
        raise CorruptRecordError("zstd: truncated frame or bytes after it")
    return bound


def zstd_decompress(data, limit: int) -> bytes:
    try:
        size = zstandard.frame_content_size(data)
        if size >= 0:
            # The frame says its size: one bounded call, which also fails on a short frame.
            if size > limit:
                raise _too_large(limit)
            return zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
        mv = memoryview(data)
        d = zstandard.ZstdDecompressor().decompressobj()
        if _zstd_output_bound(mv) <= limit:
            out = d.decompress(mv)
            if not d.eof:
                raise CorruptRecordError("zstd: truncated frame")
            return out
        # Could exceed the limit: small steps, each expanding at most ~32768:1 (RLE blocks).
        return _stepped("zstd", d, mv, _ZSTD_STEP, limit)
    except zstandard.ZstdError as e:
        raise CorruptRecordError(f"zstd: {e}") from None


def gzip_compress(data) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def snappy_compress(data) -> bytes:
    # xerial framing: what the Java client writes and every client reads.
    mv = memoryview(data)
    parts = [_XERIAL_HEADER]
    for pos in range(0, len(mv), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(mv[pos:pos + _XERIAL_BLOCK]))
        parts.append(struct.pack(">i", len(block)))
        parts.append(block)
    return b"".join(parts)


def lz4_compress(data) -> bytes:
    # Independent blocks, no content checksum: the frame Kafka's Java LZ4 stream expects.
    return lz4.frame.compress(bytes(data), block_linked=False, content_checksum=False)


def zstd_compress(data) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(data)


_DECOMPRESS = {GZIP: gzip_decompress, SNAPPY: snappy_decompress, LZ4: lz4_decompress,
               ZSTD: zstd_decompress}
_COMPRESS = {GZIP: gzip_compress, SNAPPY: snappy_compress, LZ4: lz4_compress,
             ZSTD: zstd_compress}


def decompress(codec: int, data, limit: int):
    """Decompressed records section (a bytes-like object) of a batch using ``codec``."""
    try:
        fn = _DECOMPRESS[codec]
    except KeyError:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}") from None
    return fn(data, limit)


def compress(codec: int, data) -> bytes:
    """Compressed records section for a batch using ``codec`` (1..4)."""
    try:
        fn = _COMPRESS[codec]
    except KeyError:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}") from None
    return fn(data)

"""Kafka's compression codecs for the records section of a record batch v2.

A compressed batch keeps its 61-byte header in the clear and compresses only the
records that follow (``attributes & 7``: 1 gzip, 2 snappy, 3 lz4, 4 zstd); the stored
bytes are never recompressed. ``decompress_chunks`` yields the records section a piece of
at most ``CHUNK_BYTES`` at a time, so the broker validates a batch (``records.
validate_batch`` feeding a native ``RecordWalker``) holding one piece, whatever it inflates
to, and stops at the first bad record as Kafka's streaming validation does; ``decompress``
joins the pieces for readers that want the whole section (tools, fetch decoding).

Formats accepted, as the Kafka clients write them:
- gzip: RFC 1952 members (Java ``GZIPOutputStream``), several members allowed.
- snappy: the xerial block framing of the Java client (16-byte header ``\\x82SNAPPY\\x00``,
  version, compat, then blocks of ``i32 length + raw snappy``) or one raw snappy block
  (librdkafka).
- lz4: one LZ4 frame (Kafka >= 0.10 writes correct frame header checksums).
- zstd: one zstd frame, with or without the content size in its header.
Anything after the frame (or after the last gzip member or xerial block) is refused.

Memory per batch: a piece, plus what the codec must keep to decode what follows: gzip's
32 KiB window; an lz4 block (64 KiB to 4 MiB); the frame's zstd window (up to 128 MiB by
zstd's default limit, also the Java client's, but never more pages than the output so far);
a whole snappy block, which the format cannot decode in parts (the Java client's are
32 KiB; librdkafka's single raw block at most ~21x its compressed size). Every library
here decodes with the GIL released, one piece per call, and the input is fed in steps so
that no call copies more than a step of it.

Decompression bombs: past ``limit`` bytes of output (``records.DEFAULT_MAX_DECOMPRESSED``,
64 MiB: a default-sized 1 MiB batch would need a 64:1 ratio to reach it, which real record
data does not; callers may pass a larger limit) decompression stops with
``InvalidRecordError``. A zstd frame that states a larger size, or snappy blocks that do, are
refused before any work.

Errors: damaged compressed bytes raise ``CorruptRecordError``; output over the limit
raises ``InvalidRecordError``.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import cramjam
import lz4.frame  # type: ignore[import-untyped]
import zstandard

from pybroker.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaError,
    UnsupportedCompressionError,
)

if TYPE_CHECKING:
    from typing_extensions import Buffer

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4

Chunk = bytes | bytearray

# The largest piece of output decompress_chunks yields (a whole snappy block excepted).
CHUNK_BYTES = 1 << 20
# Compressed input fed per call: zlib and python-lz4 copy the input they have not consumed
# yet at every call, so an input step bounds those copies (gzip expands at most ~1032:1,
# lz4 ~255:1, so a step holds at most a few dozen pieces of output).
_GZIP_STEP = 64 * 1024
_LZ4_STEP = 128 * 1024
_ZSTD_STEP = 128 * 1024

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024          # the Java client's block size


def _too_large(limit: int) -> KafkaError:
    return InvalidRecordError(f"decompressed records exceed {limit} bytes")


def _gzip_chunks(data: Buffer, limit: int) -> Iterator[Chunk]:
    mv = memoryview(data)
    start = 0
    while True:  # one member at a time
        d = zlib.decompressobj(31)
        pos = start
        while not d.eof:
            if d.unconsumed_tail:
                piece: Buffer = d.unconsumed_tail
            else:
                piece = mv[pos:pos + _GZIP_STEP]
                pos += len(piece)
            try:
                # with no input left, this flushes what zlib still holds, if anything
                chunk = d.decompress(piece, CHUNK_BYTES)
            except zlib.error as e:
                raise CorruptRecordError(f"gzip: {e}") from None
            if chunk:
                yield chunk
            elif not piece:  # no input left and nothing more came out
                raise CorruptRecordError("gzip: truncated stream")
        start = pos - len(d.unused_data)
        if start == len(mv):
            return


def _snappy_raw_len(block: Buffer) -> int:
    try:
        return cramjam.snappy.decompress_raw_len(block)
    except cramjam.DecompressionError as e:
        raise CorruptRecordError(f"snappy: {e}") from None


def _snappy_chunks(data: Buffer, limit: int) -> Iterator[Chunk]:
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
    if sum(sizes) > limit:
        raise _too_large(limit)
    for block, size in zip(blocks, sizes, strict=True):
        out = bytearray(size)
        try:
            n = cramjam.snappy.decompress_raw_into(block, out)
        except cramjam.DecompressionError as e:
            raise CorruptRecordError(f"snappy: {e}") from None
        if n != size:
            raise CorruptRecordError("snappy: block shorter than its declared length")
        yield out


def _lz4_chunks(data: Buffer, limit: int) -> Iterator[Chunk]:
    mv = memoryview(data)
    d = lz4.frame.LZ4FrameDecompressor()
    pos = 0
    try:
        while not d.eof:
            piece: Buffer = b""
            if d.needs_input:
                piece = mv[pos:pos + _LZ4_STEP]
                pos += len(piece)
            # with no input left, this flushes what the decoder still holds, if anything
            chunk = d.decompress(piece, max_length=CHUNK_BYTES)
            if chunk:
                yield chunk
            elif not piece:  # no input left and nothing more came out
                raise CorruptRecordError("lz4: truncated frame")
    except RuntimeError as e:
        raise CorruptRecordError(f"lz4: {e}") from None
    if pos < len(mv) or d.unused_data:
        raise CorruptRecordError("lz4: bytes after the frame")


class _FrameInput:
    """Compressed input for zstandard's ``read_to_iter``, which stops at the end of the
    frame without saying whether it got there or ran out of input. The last byte is handed
    out alone, so: input left over means bytes after the frame, and a read past the end
    means the frame was truncated. Pieces are bytes: zstandard's C backend (0.25) crashes
    when ``read`` returns a memoryview."""

    __slots__ = ("_view", "position", "read_past_end")

    def __init__(self, data: Buffer) -> None:
        self._view = memoryview(data)
        self.position = 0
        self.read_past_end = False

    def read(self, size: int) -> bytes:
        end = len(self._view)
        if self.position == end:
            self.read_past_end = True
            return b""
        stop = min(self.position + size, end - 1) if self.position < end - 1 else end
        piece = bytes(self._view[self.position:stop])
        self.position = stop
        return piece


# One zstd decompression context per thread, reset at each use: creating one costs ~15 us,
# half the validation of a 16 KiB batch.
_zstd_contexts = threading.local()


def _zstd_chunks(data: Buffer, limit: int) -> Iterator[Chunk]:
    mv = memoryview(data)
    source = _FrameInput(mv)
    context = getattr(_zstd_contexts, "decompressor", None)
    if context is None:
        context = _zstd_contexts.decompressor = zstandard.ZstdDecompressor()
    try:
        size = zstandard.frame_content_size(mv)
        if size > limit:
            raise _too_large(limit)
        # a frame that states a small size needs no CHUNK_BYTES output buffer
        yield from context.read_to_iter(
            source,  # type: ignore[arg-type]  # the stub says IO; read(size) is all it uses
            read_size=_ZSTD_STEP,
            write_size=CHUNK_BYTES if size < 0 else max(1, min(size, CHUNK_BYTES)))
    except zstandard.ZstdError as e:
        raise CorruptRecordError(f"zstd: {e}") from None
    if source.read_past_end:
        raise CorruptRecordError("zstd: truncated frame")
    if source.position < len(mv):
        raise CorruptRecordError("zstd: bytes after the frame")


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


_CHUNKS = {GZIP: _gzip_chunks, SNAPPY: _snappy_chunks, LZ4: _lz4_chunks, ZSTD: _zstd_chunks}
_COMPRESS = {GZIP: gzip_compress, SNAPPY: snappy_compress, LZ4: lz4_compress,
             ZSTD: zstd_compress}


def decompress_chunks(codec: int, data: Buffer, limit: int) -> Iterator[Chunk]:
    """The decompressed records section of a batch using ``codec``, in pieces of at most
    ``CHUNK_BYTES`` (a snappy block excepted), each used up before the next is asked for.
    Raises as the module docstring says, at the piece where the fault shows."""
    try:
        pieces = _CHUNKS[codec]
    except KeyError:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}") from None
    total = 0
    for chunk in pieces(data, limit):
        total += len(chunk)
        if total > limit:
            raise _too_large(limit)
        yield chunk


def decompress(codec: int, data: Buffer, limit: int) -> Chunk:
    """The whole decompressed records section of a batch using ``codec``."""
    chunks = list(decompress_chunks(codec, data, limit))
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def compress(codec: int, data) -> bytes:
    """Compressed records section for a batch using ``codec`` (1..4)."""
    try:
        fn = _COMPRESS[codec]
    except KeyError:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}") from None
    return fn(data)

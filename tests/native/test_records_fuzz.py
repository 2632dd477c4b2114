"""Fuzzing the record batch parsers: round trips, truncations, bit flips, garbage.

Every parser entry point must either succeed or raise a KafkaError (ValueError for
argument misuse) on any input, and never read outside the buffer; test_sanitize.py runs
this module once more against an AddressSanitizer/UBSan build to check the last part.
PB_FUZZ_EXAMPLES scales the example counts (the sanitizer run lowers it).

Bit flips: CRC32C covers attributes..end, batchLength is checked against the buffer and
magic against 2, so a flip anywhere but baseOffset (bytes 0-7) and partitionLeaderEpoch
(bytes 12-15) is always detected. Those two fields are outside the CRC by Kafka's design:
the broker rewrites them.
"""

from __future__ import annotations

import importlib
import os
import struct

import crc32c as oracle
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.errors import KafkaError

records = importlib.import_module("pybroker._native.records")

EXAMPLES = int(os.environ.get("PB_FUZZ_EXAMPLES", "150"))
fuzz = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

maybe_bytes = st.none() | st.binary(max_size=300)
header_list = st.lists(st.tuples(st.text(max_size=10), maybe_bytes), max_size=3)
record = st.tuples(maybe_bytes, maybe_bytes, st.integers(-2**40, 2**41), header_list)
batch_args = st.fixed_dictionaries({
    "records": st.lists(record, min_size=1, max_size=20),
    "compression": st.sampled_from([0, 0, 1, 2, 3, 4]),
    "producer_id": st.integers(-1, 2**63 - 1),
    "producer_epoch": st.integers(-1, 2**15 - 1),
    "base_sequence": st.integers(-1, 2**31 - 1),
    "transactional": st.booleans(),
})


def build(args) -> bytes:
    recs = args["records"]
    return records.encode_batch(
        [r[1] for r in recs], [r[0] for r in recs], [r[2] for r in recs],
        [r[3] for r in recs], compression=args["compression"],
        producer_id=args["producer_id"], producer_epoch=args["producer_epoch"],
        base_sequence=args["base_sequence"], transactional=args["transactional"])


def with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, oracle.crc32c(bytes(batch[21:])))
    return bytes(batch)


def every_parser(buf) -> None:
    """Run each entry point on buf; only KafkaError / ValueError may come out."""
    for call in (
        lambda: records.validate_batch(buf),
        lambda: records.decode_records(buf),
        lambda: records.read_batch_header(buf),
        lambda: records.scan_log(buf, 0, len(buf), 0, 64),
        lambda: records.find_position(buf, 0, len(buf), 3),
        lambda: records.find_timestamp(buf, 0, len(buf), 0),
    ):
        try:
            call()
        except (KafkaError, ValueError):
            pass


@fuzz
@given(batch_args)
def test_round_trip(args):
    buf = build(args)
    info = records.validate_batch(buf)
    recs = args["records"]
    assert info.records_count == len(recs)
    assert info.compression == args["compression"]
    assert info.is_transactional == args["transactional"]
    assert info.first_timestamp == recs[0][2]
    assert info.max_timestamp == max(r[2] for r in recs)
    decoded = records.decode_records(buf)
    assert [(d.offset, d.timestamp, d.key, d.value, d.headers) for d in decoded] == [
        (i, r[2], r[0], r[1], [(k, v) for k, v in r[3]]) for i, r in enumerate(recs)]
    assert records.scan_log(buf, 0, len(buf), 0, 4096).valid_end == len(buf)


@fuzz
@given(batch_args, st.data())
def test_truncation_always_detected(args, data):
    buf = build(args)
    cut = data.draw(st.integers(0, len(buf) - 1))
    with pytest.raises(KafkaError):
        records.validate_batch(buf[:cut])
    scan = records.scan_log(buf[:cut], 0, cut, 0, 4096)
    assert scan.batch_count == 0 and scan.valid_end == 0
    assert (scan.error is None) == (cut == 0)


@fuzz
@given(batch_args, st.data())
def test_bit_flip_always_detected(args, data):
    buf = bytearray(build(args))
    covered = [i for i in range(len(buf)) if not (i < 8 or 12 <= i < 16)]
    pos = data.draw(st.sampled_from(covered))
    buf[pos] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(KafkaError):
        records.validate_batch(bytes(buf))
    assert records.scan_log(buf, 0, len(buf), 0, 4096).error is not None
    every_parser(bytes(buf))


@fuzz
@given(batch_args, st.data())
def test_damaged_records_with_valid_crc(args, data):
    # A producer bug, not line noise: the CRC matches, so only the framing checks stand
    # between the garbage and the log. They must reject it or accept exactly it.
    args["compression"] = 0
    buf = bytearray(build(args))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(61, len(buf) - 1))
        buf[pos] = data.draw(st.integers(0, 255))
    damaged = with_crc(buf)
    try:
        info = records.validate_batch(damaged)
    except KafkaError:
        return
    assert len(records.decode_records(damaged)) == info.records_count


@fuzz
@given(st.binary(max_size=400), st.integers(0, 40), st.integers(0, 7))
def test_garbage_records_section(section, count, codec):
    header = bytearray(61)
    struct.pack_into(">qiibIhiqqqhii", header, 0, 0, 49 + len(section), 0, 2, 0,
                     codec, count - 1, 0, 0, -1, -1, -1, count)
    buf = with_crc(header + section)
    every_parser(buf)


@fuzz
@given(st.integers(1, 4), st.binary(max_size=300), st.data())
def test_codecs_on_damaged_input(codec, payload, data):
    # Whatever a codec library raises on bad input must come out as a KafkaError.
    compression = importlib.import_module("pybroker._native.compression")
    packed = bytearray(compression.compress(codec, payload))
    if data.draw(st.booleans()):
        packed = packed[:data.draw(st.integers(0, len(packed)))]
    elif packed:
        packed[data.draw(st.integers(0, len(packed) - 1))] ^= data.draw(st.integers(1, 255))
    for candidate in (bytes(packed), data.draw(st.binary(max_size=100))):
        try:
            out = compression.decompress(codec, candidate, 1 << 20)
        except KafkaError:
            continue
        assert len(out) <= 1 << 20


@fuzz
@given(st.binary(max_size=300))
def test_random_bytes(buf):
    every_parser(buf)


@fuzz
@given(st.lists(batch_args, min_size=1, max_size=4), st.data())
def test_scan_stops_at_first_damage(batches, data):
    segment = bytearray()
    ends = []
    next_offset = 0
    for args in batches:
        args["compression"] = data.draw(st.sampled_from([0, 3]))
        b = bytearray(build(args))
        records.stamp_batch(b, 0, next_offset, 0)
        next_offset += len(args["records"])
        segment += b
        ends.append(len(segment))
    pos = data.draw(st.integers(0, len(segment) - 1))
    segment[pos] ^= 0xFF
    scan = records.scan_log(segment, 0, len(segment), 0, 100)
    damaged = next(k for k, end in enumerate(ends) if end > pos)
    start = ends[damaged - 1] if damaged else 0
    if pos - start < 8 or 12 <= pos - start < 16:
        # baseOffset / partitionLeaderEpoch: outside the CRC; only offset order can tell.
        assert scan.valid_end >= start
    else:
        assert scan.valid_end == start and scan.error is not None
    assert scan.batch_count == sum(1 for e in ends if e <= scan.valid_end)

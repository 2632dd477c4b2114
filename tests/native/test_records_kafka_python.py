"""Differential tests against kafka-python's pure-Python record codec (an oracle nobody
here wrote): its batches validate and decode with ours, ours decode with its, for all
four codecs, and a log of mixed batches reads the same through both.

kafka-python would use the `crc32c` C package for its CRC when installed; the fixture
swaps in its own pure-Python CRC so the oracle shares no code with anything native.
"""

from __future__ import annotations

import importlib
import random

import kafka.record.default_records as kdr
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record._crc32c import crc as pure_crc32c
from kafka.record.memory_records import MemoryRecords

records = importlib.import_module("pybroker._native.records")

CODECS = [0, 1, 2, 3, 4]


@pytest.fixture(autouse=True)
def pure_python_kafka(monkeypatch):
    assert kdr.__file__.endswith(".py"), "kafka-python's record codec must be pure Python"
    monkeypatch.setattr(kdr, "calc_crc32c", lambda data: pure_crc32c(bytes(data)))


def kafka_batch(recs, codec, transactional=False, producer=(-1, -1, -1)):
    builder = kdr.DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=transactional,
        producer_id=producer[0], producer_epoch=producer[1], base_sequence=producer[2],
        batch_size=1 << 30)
    for i, (key, value, ts, headers) in enumerate(recs):
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    return bytes(builder.build())


def their_records(buf):
    batch = kdr.DefaultRecordBatch(buf)
    assert batch.validate_crc()
    return batch, [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]


def sample_records(rng, n):
    words = [b"alpha", b"beta", b"gamma" * 20, b"", None]
    return [(rng.choice(words), rng.choice(words[:-1]) * rng.randint(1, 5),
             1_700_000_000_000 + rng.randint(-5000, 5000),
             [(f"h{j}", rng.choice(words)) for j in range(rng.randint(0, 2))])
            for _ in range(n)]


@pytest.mark.parametrize("codec", CODECS)
def test_their_batches_validate_and_decode_with_ours(codec):
    rng = random.Random(codec)
    recs = sample_records(rng, 200)
    buf = kafka_batch(recs, codec, transactional=True, producer=(77, 3, 1000))
    info = records.validate_batch(buf)
    batch, theirs = their_records(buf)
    assert info.compression == batch.compression_type == codec
    assert (info.crc, info.records_count, info.last_offset_delta, info.first_timestamp,
            info.max_timestamp, info.producer_id, info.producer_epoch, info.base_sequence,
            info.is_transactional) == (
        batch.crc, len(recs), batch.last_offset_delta, batch.first_timestamp,
        batch.max_timestamp, 77, 3, 1000, True)
    assert [tuple(r) for r in records.decode_records(buf)] == theirs


@pytest.mark.parametrize("codec", CODECS)
def test_our_batches_decode_with_theirs(codec):
    rng = random.Random(100 + codec)
    recs = sample_records(rng, 200)
    buf = records.encode_batch([r[1] for r in recs], [r[0] for r in recs],
                               [r[2] for r in recs], [r[3] for r in recs],
                               compression=codec, base_offset=0, producer_id=5,
                               producer_epoch=1, base_sequence=7)
    batch, theirs = their_records(buf)
    assert batch.compression_type == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (5, 1, 7)
    assert theirs == [(i, r[2], r[0], r[1], r[3]) for i, r in enumerate(recs)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.none() | st.binary(max_size=50), st.none() | st.binary(max_size=50),
                          st.integers(0, 2**42),
                          st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=9)),
                                   max_size=2)),
                min_size=1, max_size=10),
       st.sampled_from(CODECS))
def test_both_directions_random(recs, codec):
    theirs = kafka_batch(recs, codec)
    assert [tuple(r) for r in records.decode_records(theirs)] == their_records(theirs)[1]
    ours = records.encode_batch([r[1] for r in recs], [r[0] for r in recs],
                                [r[2] for r in recs], [r[3] for r in recs], compression=codec)
    assert their_records(ours)[1] == [(i, r[2], r[0], r[1], r[3]) for i, r in enumerate(recs)]


def test_uncompressed_bytes_identical():
    rng = random.Random(7)
    recs = sample_records(rng, 50)
    theirs = kafka_batch(recs, 0)
    ours = records.encode_batch([r[1] for r in recs], [r[0] for r in recs],
                                [r[2] for r in recs], [r[3] for r in recs],
                                partition_leader_epoch=0)
    assert ours == theirs


def test_log_of_mixed_batches_through_memory_records():
    rng = random.Random(3)
    log = bytearray()
    offset = 0
    for i, codec in enumerate(CODECS * 3):
        recs = sample_records(rng, rng.randint(1, 30))
        b = bytearray(kafka_batch(recs, codec) if i % 2 else
                      records.encode_batch([r[1] for r in recs], timestamps=[r[2] for r in recs],
                                           compression=codec))
        records.stamp_batch(b, 0, offset, 4, log_append_time=-1 if i % 3 else 1_800_000_000_000)
        offset += len(recs)
        log += b
    scan = records.scan_log(log, 0, len(log), 0, 1024)
    assert (scan.error, scan.valid_end, scan.next_offset, scan.batch_count) == (
        None, len(log), offset, 15)
    theirs = []
    mr = MemoryRecords(bytes(log))
    while mr.has_next():
        batch = mr.next_batch()
        assert batch.validate_crc()
        theirs += [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    ours = []
    pos = 0
    while pos < len(log):
        info = records.read_batch_header(log, pos)
        ours += [tuple(r) for r in records.decode_records(bytes(log[pos:pos + info.size]))]
        pos += info.size
    assert ours == theirs and len(ours) == offset

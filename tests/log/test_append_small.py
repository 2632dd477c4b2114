"""Log.append_small (the produce path's flat append) against Log.append (STYLE 22-23).

Two logs in two directories get the same random stream of batches: one through
``append`` only, the other through ``append_small`` with ``append`` when it declines, as
the partition does. Every file byte (log, offset index, time index) and every offset must
come out the same, across rolls by bytes, by ``segment.ms`` and by a full index, index
entries, ``flush.messages`` flushes, batches without timestamps and a LogAppendTime topic
(which ``append_small`` always declines).
"""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker._native.records import validate_batch
from pybroker.broker.partition import Partition
from pybroker.errors import InvalidTimestampError, KafkaError
from pybroker.log.log import Log
from pybroker.log.log_config import LogConfig
from tests.log.helpers import make_batch

CONFIGS = st.fixed_dictionaries({
    "segment.bytes": st.sampled_from([600, 2000, 1 << 20]),
    "index.interval.bytes": st.sampled_from([0, 150, 4096]),
    "segment.index.bytes": st.sampled_from([40, 10 << 20]),  # 40: full after a few entries
    "segment.ms": st.sampled_from([50, 7 * 24 * 3600 * 1000]),
    "flush.messages": st.sampled_from([3, 2**63 - 1]),
    "message.timestamp.type": st.sampled_from(["CreateTime", "LogAppendTime"]),
    "file.delete.delay.ms": st.just(0),
})
# (records, value size, first timestamp step): timestamps move on by the step, so
# segment.ms rolls happen; -1 is a batch without timestamps
BATCHES = st.lists(st.tuples(st.integers(1, 4), st.integers(8, 200),
                             st.sampled_from([0, 1, 30, -1])), min_size=1, max_size=30)


def files(directory: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith((".log", ".index", ".timeindex")):
            with open(os.path.join(directory, name), "rb") as f:
                out[name] = f.read()
    return out


def outcome(append, batch: bytearray) -> int | str:
    """The base offset ``append`` gives ``batch``, or the name of the error it raises."""
    try:
        return append(batch, validate_batch(batch)).base_offset
    except KafkaError as exc:
        return type(exc).__name__


def batch_at(clock: int, records: int, value_size: int, step: int, tag: int) -> bytearray:
    if step < 0:
        return make_batch(records, value_size, timestamps=[-1] * records, tag=tag)
    return make_batch(records, value_size, timestamp=clock, tag=tag)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CONFIGS, BATCHES)
def test_append_small_writes_what_append_writes(props, batches):
    config = LogConfig.from_properties(props)
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        plain = Log(os.path.join(a, "t-0"), config, clock=lambda: 1000.0)
        small = Log(os.path.join(b, "t-0"), config, clock=lambda: 1000.0)
        clock, taken = 1_000_000, 0
        try:
            for tag, (records, value_size, step) in enumerate(batches):
                clock += max(step, 0)
                one = batch_at(clock, records, value_size, step, tag)
                two = bytearray(one)
                expected = outcome(plain.append, one)
                base = small.append_small(two, validate_batch(two))
                if base < 0:
                    base = outcome(small.append, two)
                else:
                    taken += 1
                assert base == expected  # an offset, or the same error (a batch too big)
                assert small.log_end_offset == plain.log_end_offset
                assert [s.base_offset for s in small.segments] == \
                    [s.base_offset for s in plain.segments]
                assert small.recovery_point == plain.recovery_point
            if config.log_append_time:
                assert taken == 0
            plain.close()
            small.close()
            assert files(small.directory) == files(plain.directory)
        finally:
            plain.close()
            small.close()


def test_append_small_takes_the_common_case():
    """After the first batch of a segment, small CreateTime batches take the flat path."""
    with tempfile.TemporaryDirectory() as d:
        log = Log(os.path.join(d, "t-0"), LogConfig())
        first = make_batch(1, timestamp=5_000)
        assert log.append_small(first, validate_batch(first)) == -1  # empty segment
        log.append(first, validate_batch(first))
        bases = []
        for i in range(5):
            batch = make_batch(2, timestamp=5_001 + i, tag=i)
            bases.append(log.append_small(batch, validate_batch(batch)))
        assert bases == [1, 3, 5, 7, 9]
        assert log.log_end_offset == 11
        log.close()


def test_partition_fast_lane_keeps_the_checks():
    """Partition.append through the flat path: high watermark, fetch waiters woken, and
    the timestamp check still answers INVALID_TIMESTAMP with nothing written."""
    import asyncio

    async def run() -> None:
        with tempfile.TemporaryDirectory() as d:
            log = Log(os.path.join(d, "t-0"), LogConfig.from_properties(
                {"message.timestamp.after.max.ms": 60_000}))
            partition = Partition("t", 0, log)
            import time
            now = int(time.time() * 1000)
            for i in range(3):
                batch = make_batch(1, timestamp=now, tag=i)
                waiter = asyncio.get_running_loop().create_future()
                partition.waiter(waiter)
                result = partition.append(batch, validate_batch(batch))
                assert result.base_offset == i and result.log_append_time == -1
                assert waiter.done()
                assert partition.high_watermark == i + 1
            future = make_batch(1, timestamp=now + 3_600_000)
            with pytest.raises(InvalidTimestampError):
                partition.append(future, validate_batch(future))
            assert log.log_end_offset == 3 and partition.high_watermark == 3
            log.close()

    asyncio.run(run())


def idempotent_batch(sequence: int, now: int, count: int = 2) -> bytearray:
    from kafka.record.default_records import DefaultRecordBatchBuilder
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=7, producer_epoch=0,
                                        base_sequence=sequence, batch_size=2**30)
    for i in range(count):
        builder.append(i, timestamp=now, key=None, value=b"s%d" % (sequence + i), headers=[])
    return bytearray(builder.build())


def test_partition_fast_lane_keeps_idempotence():
    """Idempotent batches on the flat path: a retry is answered with its first offsets
    and not written again; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER."""
    import time

    from pybroker.errors import OutOfOrderSequenceError

    with tempfile.TemporaryDirectory() as d:
        log = Log(os.path.join(d, "t-0"), LogConfig())
        partition = Partition("t", 0, log)
        now = int(time.time() * 1000)
        offsets = [partition.append(b, validate_batch(b)).base_offset
                   for b in (idempotent_batch(0, now), idempotent_batch(2, now))]
        assert offsets == [0, 2]
        size = log.size()
        retry = idempotent_batch(2, now)
        assert partition.append(retry, validate_batch(retry)).base_offset == 2
        assert log.size() == size and log.log_end_offset == 4
        gap = idempotent_batch(9, now)
        with pytest.raises(OutOfOrderSequenceError):
            partition.append(gap, validate_batch(gap))
        assert log.log_end_offset == 4
        log.close()

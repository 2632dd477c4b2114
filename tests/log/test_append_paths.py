"""The same bytes whichever way a write completes (STYLE 22-23).

Random streams of batches go into logs in separate directories, each by another way:
``Log.append`` (inline, in one flat step when it can) against ``Log.append_async`` (the
awaited write, io_uring's asynchronous ring for large batches); and ``Partition.append``,
the leader's one entry point, awaited one append at a time (small batches complete
inline, large ones through the partition's writer task) or all of a stream's appends
made at once (after the first large batch everything is queued) against plain
``Log.append``. Every file byte (log, offset index, time index) and every offset or
error must come out the same, across rolls by bytes, by ``segment.ms`` and by a full
index, index entries, ``flush.messages`` flushes, batches without timestamps and a
LogAppendTime topic (``Log`` level: the partition stamps the wall clock).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker._native.appender import ASYNC_MIN_BYTES
from pybroker._native.records import validate_batch
from pybroker.broker.partition import Partition
from pybroker.broker.topic_manager import INTERNAL_TOPICS
from pybroker.errors import (
    InvalidTimestampError,
    KafkaError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceError,
    UnknownTopicOrPartitionError,
)
from pybroker.log.log import AppendInfo, Log
from pybroker.log.log_config import LogConfig
from tests.log.helpers import make_batch

CONFIGS = st.fixed_dictionaries({
    "segment.bytes": st.sampled_from([600, 2000, 300_000, 1 << 20]),
    "index.interval.bytes": st.sampled_from([0, 150, 4096]),
    "segment.index.bytes": st.sampled_from([40, 10 << 20]),  # 40: full after a few entries
    "segment.ms": st.sampled_from([50, 7 * 24 * 3600 * 1000]),
    "flush.messages": st.sampled_from([3, 2**63 - 1]),
    "message.timestamp.type": st.sampled_from(["CreateTime", "LogAppendTime"]),
    "file.delete.delay.ms": st.just(0),
})
LARGE = -1  # a value size: records of ASYNC_MIN_BYTES, a batch the ring writes
# (records, value size, first timestamp step): timestamps move on by the step, so
# segment.ms rolls happen; -1 is a batch without timestamps
SMALL = st.integers(8, 200)
BATCHES = st.lists(st.tuples(st.integers(1, 4),
                             st.one_of(SMALL, SMALL, SMALL, st.just(LARGE)),  # 1 in 4 large
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


def stream(batches, start: int = 1_000_000) -> list[bytearray]:
    """The batches of a drawn stream: timestamps from ``start`` on, by each one's step."""
    out, clock = [], start
    for tag, (records, value_size, step) in enumerate(batches):
        clock += max(step, 0)
        size = ASYNC_MIN_BYTES if value_size == LARGE else value_size
        if step < 0:
            out.append(make_batch(records, size, timestamps=[-1] * records, tag=tag))
        else:
            out.append(make_batch(records, size, timestamp=clock, tag=tag))
    return out


def shape(log: Log) -> tuple:
    return log.log_end_offset, [s.base_offset for s in log.segments], log.recovery_point


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CONFIGS, BATCHES)
def test_inline_and_awaited_writes_write_the_same_bytes(props, batches):
    config = LogConfig.from_properties(props)

    async def awaited_outcome(log: Log, batch: bytearray) -> int | str:
        try:
            return (await log.append_async(batch, validate_batch(batch))).base_offset
        except KafkaError as exc:
            return type(exc).__name__

    async def run(inline: Log, awaited: Log) -> None:
        for batch in stream(batches):
            expected = outcome(inline.append, bytearray(batch))
            assert await awaited_outcome(awaited, batch) == expected
            assert shape(awaited) == shape(inline)

    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        inline = Log(os.path.join(a, "t-0"), config, clock=lambda: 1000.0)
        awaited = Log(os.path.join(b, "t-0"), config, clock=lambda: 1000.0)
        try:
            asyncio.run(run(inline, awaited))
            inline.close()
            awaited.close()
            assert files(awaited.directory) == files(inline.directory)
        finally:
            inline.close()
            awaited.close()


async def partition_outcome(appended) -> int | str:
    """What ``Partition.append`` answered, once its write is done: offset or error name."""
    try:
        if isinstance(appended, BaseException):
            raise appended
        return (appended if isinstance(appended, AppendInfo) else await appended).base_offset
    except KafkaError as exc:
        return type(exc).__name__


def partition_append(partition: Partition, batch: bytearray):
    """``Partition.append``'s answer (an AppendInfo or a future), or what it raised."""
    try:
        return partition.append(memoryview(batch), validate_batch(batch))
    except KafkaError as exc:
        return exc


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CONFIGS.map(lambda props: {**props, "message.timestamp.type": "CreateTime"}),
       BATCHES)
def test_the_partition_entry_point_writes_the_same_bytes_inline_or_queued(props, batches):
    config = LogConfig.from_properties(props)
    start = int(time.time() * 1000)  # within the partition's timestamp bounds

    async def run(plain: Log, one_by_one: Partition, all_at_once: Partition) -> None:
        expected = [outcome(plain.append, batch) for batch in stream(batches, start)]
        sequential = []
        for batch in stream(batches, start):
            sequential.append(await partition_outcome(partition_append(one_by_one, batch)))
        at_once = [partition_append(all_at_once, batch) for batch in stream(batches, start)]
        queued = sum(isinstance(a, asyncio.Future) for a in at_once)
        concurrent = [await partition_outcome(a) for a in at_once]
        assert sequential == expected
        assert concurrent == expected
        for partition in (one_by_one, all_at_once):
            assert shape(partition.log) == shape(plain)
            assert partition.high_watermark == plain.log_end_offset
        if any(size == LARGE for _, size, _ in batches):
            assert queued  # a large batch, and any after it, went through the queue

    with tempfile.TemporaryDirectory() as d:
        logs = [Log(os.path.join(d, f"t-{i}"), config, clock=lambda: 1000.0)
                for i in range(3)]
        try:
            plain, one_by_one, all_at_once = logs
            asyncio.run(run(plain, Partition("t", 0, one_by_one),
                            Partition("t", 0, all_at_once)))
            for log in logs:
                log.close()
            assert files(one_by_one.directory) == files(plain.directory)
            assert files(all_at_once.directory) == files(plain.directory)
        finally:
            for log in logs:
                log.close()


def large_batch(now: int, tag: int = 0) -> bytearray:
    batch = make_batch(3, ASYNC_MIN_BYTES // 2, timestamp=now, tag=tag)
    assert len(batch) >= ASYNC_MIN_BYTES
    return batch


@contextlib.contextmanager
def new_partition(topic: str = "t", **props: object) -> Iterator[Partition]:
    """A leading Partition of a new log in a temporary directory."""
    with tempfile.TemporaryDirectory() as d:
        log = Log(os.path.join(d, f"{topic}-0"), LogConfig.from_properties(props))
        try:
            yield Partition(topic, 0, log, internal=topic in INTERNAL_TOPICS)
        finally:
            log.close()


def append_all(partition: Partition, batches) -> list:
    """``Partition.append``'s answers to ``batches``, made one after another."""
    return [partition.append(b, validate_batch(b)) for b in batches]


def test_inline_appends_keep_the_checks():
    """Partition.append written inline: high watermark, fetch waiters woken, and the
    timestamp check still answers INVALID_TIMESTAMP with nothing written."""

    async def run() -> None:
        with new_partition(**{"message.timestamp.after.max.ms": 60_000}) as partition:
            now = int(time.time() * 1000)
            for i in range(3):
                batch = make_batch(1, timestamp=now, tag=i)
                waiter = asyncio.get_running_loop().create_future()
                partition.waiter(waiter)
                result = partition.append(batch, validate_batch(batch))
                assert isinstance(result, AppendInfo)  # no future: written inline
                assert result.base_offset == i and result.log_append_time == -1
                assert waiter.done()
                assert partition.high_watermark == i + 1
            future = make_batch(1, timestamp=now + 3_600_000)
            with pytest.raises(InvalidTimestampError):
                partition.append(future, validate_batch(future))
            assert partition.log.log_end_offset == 3 and partition.high_watermark == 3

    asyncio.run(run())


def idempotent_batch(sequence: int, now: int, count: int = 2,
                     value_size: int = 2) -> bytearray:
    from kafka.record.default_records import DefaultRecordBatchBuilder
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=7, producer_epoch=0,
                                        base_sequence=sequence, batch_size=2**30)
    for i in range(count):
        value = (b"s%d" % (sequence + i)).ljust(value_size, b".")
        builder.append(i, timestamp=now, key=None, value=value, headers=[])
    return bytearray(builder.build())


def test_inline_appends_keep_idempotence():
    """Idempotent batches written inline: a retry is answered with its first offsets and
    not written again; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER."""
    with new_partition() as partition:
        log = partition.log
        now = int(time.time() * 1000)
        answers = append_all(partition, (idempotent_batch(0, now), idempotent_batch(2, now)))
        assert [a.base_offset for a in answers] == [0, 2]
        size = log.size()
        retry = idempotent_batch(2, now)
        answer = partition.append(retry, validate_batch(retry))
        assert answer.base_offset == 2 and answer.size == 0
        assert log.size() == size and log.log_end_offset == 4
        gap = idempotent_batch(9, now)
        with pytest.raises(OutOfOrderSequenceError):
            partition.append(gap, validate_batch(gap))
        assert log.log_end_offset == 4


def test_queued_appends_keep_idempotence_in_arrival_order():
    """A producer's large batch is queued; its next (small) batch, made before the first
    is written, waits its turn: its sequence is checked after the first's is recorded."""

    async def run() -> None:
        with new_partition() as partition:
            now = int(time.time() * 1000)
            first = idempotent_batch(0, now, count=3, value_size=ASYNC_MIN_BYTES // 2)
            answers = append_all(partition, (first, idempotent_batch(3, now),
                                             idempotent_batch(3, now)))
            assert all(isinstance(a, asyncio.Future) for a in answers)
            done = [await a for a in answers]
            assert [a.base_offset for a in done] == [0, 3, 3]  # the third is a retry
            assert done[2].size == 0 and partition.log.log_end_offset == 5
            small = idempotent_batch(5, now)
            assert isinstance(partition.append(small, validate_batch(small)), AppendInfo)

    asyncio.run(run())


def test_queued_appends_fail_on_a_deleted_or_deposed_partition():
    """Appends still queued when the partition stops leading, or is deleted, are refused
    when their turn comes, with nothing written."""

    async def run() -> None:
        with new_partition() as partition:
            now = int(time.time() * 1000)
            answers = append_all(partition, (large_batch(now, 0), make_batch(1, timestamp=now)))
            partition.become_follower(1, 1, [0, 1], [1], 1)
            for answer in answers:
                with pytest.raises(NotLeaderOrFollowerError):
                    await answer
            await partition.appends_done()
            assert partition.log.log_end_offset == 0

            partition.become_leader(2, [0], [0], 2)
            answers = append_all(partition, (large_batch(now, 1), make_batch(1, timestamp=now)))
            partition.deleted = True
            for answer in answers:
                with pytest.raises(UnknownTopicOrPartitionError):
                    await answer
            assert partition.log.log_end_offset == 0

    asyncio.run(run())


def test_an_abandoned_queued_append_is_not_written():
    """A queued append whose requester gave up before its turn (future cancelled) is
    skipped; the next takes its place."""

    async def run() -> None:
        with new_partition() as partition:
            now = int(time.time() * 1000)
            answers = append_all(partition, (large_batch(now, 0), make_batch(2, timestamp=now),
                                             make_batch(1, timestamp=now)))
            answers[1].cancel()
            assert [(await a).base_offset for a in (answers[0], answers[2])] == [0, 3]
            await partition.appends_done()
            assert partition.log.log_end_offset == 4

    asyncio.run(run())


def test_internal_topics_are_written_inline():
    """The group coordinator applies a write as soon as the call returns: an internal
    topic's append completes inline whatever its size."""
    with new_partition("__consumer_offsets") as partition:
        batch = large_batch(int(time.time() * 1000))
        result = partition.append(batch, validate_batch(batch))
        assert isinstance(result, AppendInfo) and partition.log.log_end_offset == 3

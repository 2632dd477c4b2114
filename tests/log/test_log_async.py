"""Log.append_async: the produce path's append, its write awaited on the event loop.

The log changes only once the bytes are written; appends run one at a time; anything
that changes the log while a write is out makes that append fail cleanly. Real files,
real io_uring (and pwritev) rings.
"""

from __future__ import annotations

import asyncio

import pytest

from pybroker._native.appender import ASYNC_MIN_BYTES
from pybroker._native.records import validate_batch
from pybroker.errors import KafkaStorageError
from pybroker.log.log import Log
from pybroker.log.log_config import LogConfig
from tests.log.helpers import append, make_batch, read_all


def big_batch(tag: int = 0):
    """Large enough (over ASYNC_MIN_BYTES) for its write to go through the eventfd."""
    batch = make_batch(count=3, value_size=ASYNC_MIN_BYTES // 2, tag=tag)
    assert len(batch) > ASYNC_MIN_BYTES
    return batch


async def append_async(log: Log, batch):
    return await log.append_async(batch, validate_batch(batch))


def test_same_bytes_and_offsets_as_append(tmp_path):
    """Many concurrent appends to one log: sequential offsets, a file identical to the
    synchronous path's, with rolls on segment.bytes on the way. (The pwritev path of
    append_async is the synchronous append: tests/native/test_appender_async.py.)"""
    config = LogConfig.from_properties({"segment.bytes": "20000"})
    batches = [make_batch(count=1 + i % 4, tag=i) for i in range(60)]
    sync_log = Log(str(tmp_path / "sync-0"), config)
    sync_infos = [append(sync_log, bytearray(b)) for b in batches]

    async def main():
        log = Log(str(tmp_path / "async-0"), config)
        infos = await asyncio.gather(*(append_async(log, bytearray(b)) for b in batches))
        return log, infos

    async_log, infos = asyncio.run(main())
    assert [(i.base_offset, i.last_offset) for i in infos] == \
        [(i.base_offset, i.last_offset) for i in sync_infos]
    assert len(async_log.segments) == len(sync_log.segments) > 1
    assert read_all(async_log) == read_all(sync_log)
    assert async_log.log_end_offset == sync_log.log_end_offset
    async_log.close()
    reopened = Log(str(tmp_path / "async-0"), config, clean=False)
    assert read_all(reopened) == read_all(sync_log)
    reopened.close()
    sync_log.close()


def test_nothing_is_visible_before_the_write_completes(tmp_path):
    async def main():
        log = Log(str(tmp_path / "t-0"))
        task = asyncio.ensure_future(append_async(log, big_batch()))
        await asyncio.sleep(0)
        assert log.log_end_offset == 0 and log.segments.active.size == 0
        with pytest.raises(KafkaStorageError):  # a synchronous append would race it
            append(log, big_batch())
        info = await task
        assert info.base_offset == 0 and log.log_end_offset == 3
        assert log.read(0, 1 << 20).size == info.size
        log.close()

    asyncio.run(main())


def test_truncation_during_the_write_fails_the_append_and_cuts_its_bytes(tmp_path):
    async def main():
        log = Log(str(tmp_path / "t-0"))
        for _ in range(3):
            await append_async(log, big_batch())
        before = read_all(log)
        task = asyncio.ensure_future(append_async(log, big_batch(tag=9)))
        await asyncio.sleep(0)
        log.truncate_to(3)
        with pytest.raises(KafkaStorageError):
            await task
        assert log.log_end_offset == 3 and read_all(log) == before[:len(before) // 3]
        size = log.segments.active.size
        info = await append_async(log, big_batch(tag=10))
        assert info.base_offset == 3 and info.size + size == log.segments.active.size
        log.close()
        reopened = Log(str(tmp_path / "t-0"), clean=False)
        assert reopened.log_end_offset == 6
        reopened.close()

    asyncio.run(main())


def test_a_cancelled_append_leaves_the_log_unchanged(tmp_path):
    async def main():
        log = Log(str(tmp_path / "t-0"))
        await append_async(log, big_batch())
        task = asyncio.ensure_future(append_async(log, big_batch(tag=5)))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert log.log_end_offset == 3
        info = await append_async(log, big_batch(tag=6))  # overwrites the orphaned bytes
        assert info.base_offset == 3
        data = read_all(log)
        log.close()
        reopened = Log(str(tmp_path / "t-0"), clean=False)
        assert reopened.log_end_offset == 6 and read_all(reopened) == data
        reopened.close()

    asyncio.run(main())

"""One partition as the request handlers see it: its log, producer state and fetch waiters.

On a single node this broker is the leader of every partition with an ISR of one, so an
append is committed when it is written: the high watermark moves to the log end offset
right after each append (acks=all is acks=1). Replication (issue 7) would move it instead.

Fetch long polling: a waiting fetch registers a future with :meth:`Partition.waiter`;
every append (and shutdown) resolves them, and the fetch re-reads.

Not thread-safe: used from the event loop thread only.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, NamedTuple

from pybroker._native.appender import ASYNC_MIN_BYTES
from pybroker.broker.producer_state import ProducerStateTable
from pybroker.errors import InvalidTimestampError
from pybroker.log.log_config import LogConfig

LEADER_EPOCH = 0  # single node: leadership never moves
_TAIL_SCAN_BYTES = 64 * 1024 * 1024  # how much log a crash replay reads without a snapshot


class AppendResult(NamedTuple):
    base_offset: int
    log_append_time: int  # -1 for CreateTime topics
    log_start_offset: int


class Partition:
    __slots__ = ("topic", "index", "log", "producers", "deleted", "_waiters", "_append_lock")

    def __init__(self, topic: str, index: int, log: Any) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.producers = ProducerStateTable()
        self.deleted = False  # set when its topic is deleted; a waiting fetch drops it
        self._waiters: list[asyncio.Future[None]] = []
        self._append_lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index})"

    @property
    def config(self) -> LogConfig:
        """The topic's settings: the log's, which AlterConfigs replaces."""
        return self.log.config

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def append(self, batch: memoryview, info: Any) -> AppendResult:
        """Append one validated batch (``info`` from ``validate_batch``); idempotence applied.

        The caller has checked the size against ``max.message.bytes``.

        ``batch`` must be writable: offsets (and LogAppendTime) are stamped into it in place.
        A retried batch of an idempotent producer is answered with its original offsets.
        """
        now, log_append_time, duplicate = self._before_append(info)
        if duplicate is not None:
            return duplicate
        base = -1
        if log_append_time < 0:  # the common case in one flat step (Log.append_small)
            base = self.log.append_small(batch, info, LEADER_EPOCH)
        if base < 0:
            appended = self.log.append(batch, info, leader_epoch=LEADER_EPOCH,
                                       log_append_time=log_append_time)
            base, log_append_time = appended.base_offset, appended.log_append_time
        return self._after_append(info, base, log_append_time, now)

    def appends_synchronously(self, size: int) -> bool:
        """Whether ``append_async`` of a ``size``-byte batch would be written without
        suspending (below ``ASYNC_MIN_BYTES`` with no append of this partition under
        way): the produce handler then calls ``append`` and saves the coroutine, the
        lock and the awaits, a few microseconds of a one-record produce round trip."""
        return size < ASYNC_MIN_BYTES and not self._append_lock.locked()

    async def append_async(self, batch: memoryview, info: Any) -> AppendResult:
        """``append`` for the produce handler: the write is awaited, so the event loop
        serves other requests while the kernel copies the batch. Appends to this
        partition run one at a time (the idempotence check, the write and the producer
        state update together), in arrival order."""
        if self.appends_synchronously(len(batch)):
            return self.append(batch, info)  # written synchronously anyway
        async with self._append_lock:
            now, log_append_time, duplicate = self._before_append(info)
            if duplicate is not None:
                return duplicate
            appended = await self.log.append_async(batch, info, leader_epoch=LEADER_EPOCH,
                                                   log_append_time=log_append_time)
            return self._after_append(info, appended.base_offset, appended.log_append_time,
                                      now)

    def _before_append(self, info: Any) -> tuple[int, int, AppendResult | None]:
        """(now, LogAppendTime or -1, the original answer if this is a retried batch)."""
        now = int(time.time() * 1000)
        config = self.log.config
        if config.log_append_time:
            log_append_time = now
        else:
            log_append_time = -1
            self._check_timestamps(config, info, now)
        if info.producer_id >= 0 and info.base_sequence >= 0:
            duplicate = self.producers.check(info.producer_id, info.producer_epoch,
                                             info.base_sequence, info.last_offset_delta)
            if duplicate is not None:
                return now, log_append_time, AppendResult(
                    duplicate.first_offset, duplicate.timestamp, self.log.log_start_offset)
        return now, log_append_time, None

    def _after_append(self, info: Any, base: int, log_append_time: int,
                      now: int) -> AppendResult:
        log = self.log
        log.high_watermark = base + info.last_offset_delta + 1  # ISR of one: committed
        if info.producer_id >= 0 and info.base_sequence >= 0:
            self.producers.record(info.producer_id, info.producer_epoch, info.base_sequence,
                                  info.last_offset_delta, base, log_append_time, now)
        if self._waiters:
            self.wake()
        return AppendResult(base, log_append_time, log.log_start_offset)

    @staticmethod
    def _check_timestamps(config: LogConfig, info: Any, now: int) -> None:
        if info.max_timestamp - now > config.message_timestamp_after_max_ms:
            raise InvalidTimestampError(
                f"Timestamp {info.max_timestamp} is more than "
                f"message.timestamp.after.max.ms={config.message_timestamp_after_max_ms} "
                f"ahead of the broker's clock")
        if now - info.first_timestamp > config.message_timestamp_before_max_ms:
            raise InvalidTimestampError(
                f"Timestamp {info.first_timestamp} is more than "
                f"message.timestamp.before.max.ms={config.message_timestamp_before_max_ms} "
                f"behind the broker's clock")

    # fetch long polling -----------------------------------------------------------------

    def waiter(self, fut: asyncio.Future[None]) -> None:
        if len(self._waiters) >= 64:  # timed-out polls of an idle partition pile up
            self._waiters = [f for f in self._waiters if not f.done()]
        self._waiters.append(fut)

    def wake(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    # producer state after a restart ------------------------------------------------------

    def restore_producers(self, snapshot: dict[str, Any] | None) -> None:
        """Load a snapshot if the log still covers it, then replay the batches after it."""
        end = self.log.log_end_offset
        start = self.log.log_start_offset
        if snapshot is not None and start <= snapshot["offset"] <= end:
            self.producers = ProducerStateTable.from_json(snapshot["producers"])
            start = snapshot["offset"]
        else:
            self.producers = ProducerStateTable()
            start = max(start, self._tail_start(end))
        for info, _ in self.log.batches(start):
            self.producers.replay(info, info.base_offset)

    def _tail_start(self, end: int) -> int:
        """An offset about ``_TAIL_SCAN_BYTES`` before the end, for a replay without snapshot."""
        size = self.log.size()
        if size <= _TAIL_SCAN_BYTES:
            return 0
        # Without an offset-by-position lookup, estimate from the average batch density.
        per_offset = size / max(1, end - self.log.log_start_offset)
        return max(0, end - int(_TAIL_SCAN_BYTES / max(per_offset, 1.0)))

"""One partition as the request handlers see it: its log, fetch waiters, and its
replication role. Idempotence is checked here against the producer state its log keeps
(``Log.producer_state``, which every append, truncation and restart keeps up to date).

Appending: ``append`` is the leader's one entry point (the produce handler's and the
group coordinator's). It decides whether the write completes inline (a small batch with
nothing of this partition queued: the one-record produce, no task or future) or joins the
partition's queue, which one writer task works through in arrival order (a large batch's
write awaited off the loop); either way the bytes written are the same
(tests/log/test_append_paths.py), and since nothing is written inline while anything is
queued, two appends of a partition can never interleave. The follower's
``append_as_follower`` is a different operation (the leader's batches with their offsets)
on the same log write path; it starts only once the leader appends are done: a new
follower refuses the queued ones and the ReplicaManager awaits ``appends_done`` before the
fetcher gets the partition.

Single node (the default): this broker leads every partition at leader epoch 0 with an
ISR of itself, so an append is committed when it is written: the high watermark moves to
the log end right after each append (acks=all is acks=1).

Cluster mode (docs/REPLICATION.md): the controller makes this replica the leader or a
follower (``become_leader`` / ``become_follower``, from the ReplicaManager).
- As leader it tracks each follower's position from the follower's fetches
  (``follower_fetched``): the ISR grows when a follower reaches the high watermark, and
  the high watermark is the lowest position of the ISR (the leader's own: its log end).
  ``isr_lagging`` names followers that have not caught up for replica.lag.time.max.ms;
  ISR changes are proposed through ``isr_listener`` (the ReplicaManager writes them to
  ZooKeeper) and take effect in ``isr_changed`` once written. acks=all appends wait in
  ``wait_for_high_watermark`` (at shutdown they are told at once:
  ``stop_waiting_for_replicas``). The high watermark never moves backwards.
- As follower it takes the leader's batches as they are (``append_as_follower``),
  truncates a diverged tail (``truncate_to``), and follows the leader's high watermark.
- A replica that is neither (before the controller spoke, or for a partition this
  broker does not host: ``log`` None) refuses produce and fetch with
  NOT_LEADER_OR_FOLLOWER.

Fetch long polling: a waiting fetch registers a future with :meth:`Partition.waiter`;
every append (and shutdown) resolves them, and the fetch re-reads.

Not thread-safe: used from the event loop thread only.
"""

from __future__ import annotations

import asyncio
import collections
import sys
import time
from collections.abc import Callable
from typing import Any

from pybroker._native.appender import ASYNC_MIN_BYTES
from pybroker.errors import (
    ErrorCode,
    InvalidTimestampError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from pybroker.log.log import AppendInfo
from pybroker.log.log_config import LogConfig
from pybroker.log.producer_state import ProducerState

LEADER_EPOCH = 0  # single node: leadership never moves
NO_LEADER = -1


# a queued append: the batch, its BatchInfo, and the future its requester awaits
_Queued = tuple[memoryview, Any, asyncio.Future[AppendInfo]]


class FollowerState:
    """What the leader knows of one follower, from its fetches (Kafka's Replica)."""

    __slots__ = ("position", "last_caught_up_ms", "last_fetch_ms", "last_fetch_leader_end")

    def __init__(self) -> None:
        self.position = -1  # the follower has every offset below this; -1: not known yet
        self.last_caught_up_ms = 0
        self.last_fetch_ms = 0
        self.last_fetch_leader_end = 0  # the leader's log end when it last fetched


class Partition:
    __slots__ = ("topic", "index", "log", "deleted", "offline", "_waiters", "_queue",
                 "_writer", "_inline_below", "broker_id", "is_leader", "leader_id",
                 "leader_epoch", "replicas", "isr", "zk_version", "followers",
                 "epoch_start_offset", "isr_pending", "isr_listener", "_hw_waiters",
                 "_replicas_unheard", "bytes_in", "messages_in", "bytes_out", "replication_bytes_in",
                 "replication_bytes_out", "isr_shrinks", "isr_expands")

    def __init__(self, topic: str, index: int, log: Any, broker_id: int = 0,
                 is_leader: bool = True, internal: bool = False) -> None:
        """``internal``: the partition of an internal topic (``Topic.internal``)."""
        self.topic = topic
        self.index = index
        self.log = log  # None: a partition of a topic this broker holds no replica of
        self.deleted = False  # set when its topic is deleted; a waiting fetch drops it
        # its log directory failed: KAFKA_STORAGE_ERROR to everything until a restart
        self.offline = False
        self._waiters: list[asyncio.Future[None]] = []
        # appends waiting their turn, and the task writing them (None: none waiting)
        self._queue: collections.deque[_Queued] | None = None
        self._writer: asyncio.Task[None] | None = None
        # Smaller batches are written inline. The appender writes larger ones off the
        # loop, but not an internal topic's: its writer (the group coordinator) applies
        # a write as soon as the call returns.
        self._inline_below = sys.maxsize if internal else ASYNC_MIN_BYTES
        # replication role; the defaults are the single node's
        self.broker_id = broker_id
        self.is_leader = is_leader
        self.leader_id = broker_id if is_leader else NO_LEADER
        self.leader_epoch = LEADER_EPOCH
        self.replicas: list[int] = [broker_id]
        self.isr: list[int] = [broker_id]
        self.zk_version = 0
        self.followers: dict[int, FollowerState] = {}
        self.epoch_start_offset = 0  # the log end when this replica became the leader
        self.isr_pending = False  # an ISR change is being written to ZooKeeper
        # fn(partition, proposed isr): the ReplicaManager writes it, then ``isr_changed``
        self.isr_listener: Callable[[Partition, list[int]], None] | None = None
        # acks=all appends waiting for the high watermark: (end offset, future)
        self._hw_waiters: list[tuple[int, asyncio.Future[int]]] = []
        self._replicas_unheard = False  # shutdown: the followers' fetches are not read
        # what producers appended and consumers were sent, counted per batch appended
        # and per partition answered (never per record): the metrics' per-topic sums
        self.bytes_in = 0
        self.messages_in = 0
        self.bytes_out = 0
        # and what replication moved: appended from the leader as a follower, sent to
        # followers as the leader; the ISR changes this replica made as the leader
        self.replication_bytes_in = 0
        self.replication_bytes_out = 0
        self.isr_shrinks = 0
        self.isr_expands = 0

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index})"

    @property
    def config(self) -> LogConfig:
        """The topic's settings: the log's, which AlterConfigs replaces."""
        return self.log.config

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def producers(self) -> ProducerState:
        """The idempotent producers' state, which the log keeps."""
        return self.log.producer_state

    def append(self, batch: memoryview, info: Any) -> AppendInfo | asyncio.Future[AppendInfo]:
        """The leader's one append: one validated batch (``info`` from ``validate_batch``;
        the caller has checked its size against ``max.message.bytes``), idempotence
        applied. Returns the ``AppendInfo`` when the batch was written inline, else a
        future of it; a retried batch of an idempotent producer is answered with its
        original offsets (``size`` 0: nothing written).

        Inline: a batch below ``ASYNC_MIN_BYTES`` when no append of this partition is
        waiting (the one-record produce: no task, no future), and every append to an
        internal topic, whose writer (the group coordinator) applies a write as soon as
        the call returns. Otherwise the append joins the partition's queue: its writer
        task takes the queued appends one at a time in arrival order, each with its
        idempotence check, its write (a large batch's awaited, ``Log.append_async``, so
        the loop serves other requests while the kernel copies it) and its producer
        state update, so an inline append can never overtake or interleave with a
        queued one. A queued append whose requester is gone (its future cancelled) is
        skipped; one whose partition was deleted or lost its leadership meanwhile fails.

        ``batch`` must be writable: offsets (and LogAppendTime) are stamped into it in
        place, and it must not change until the append is done."""
        if self._queue is not None or len(batch) >= self._inline_below:
            return self._enqueue(batch, info)
        log_append_time, duplicate = self._before_append(info)
        if duplicate is not None:
            return duplicate
        appended = self.log.append(batch, info, self.leader_epoch, log_append_time)
        return self._after_append(appended)

    def _enqueue(self, batch: memoryview, info: Any) -> asyncio.Future[AppendInfo]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[AppendInfo] = loop.create_future()
        if self._queue is None:
            self._queue = collections.deque()
            self._writer = loop.create_task(self._write_queue(self._queue))
        self._queue.append((batch, info, fut))
        return fut

    async def _write_queue(self, queue: collections.deque[_Queued]) -> None:
        """The writer task: the queued appends in order, until none is left."""
        try:
            while queue:
                batch, info, fut = queue[0]  # stays queued until done: see finally
                if not fut.done():  # else cancelled: its request was abandoned
                    try:
                        appended = await self._append_in_turn(batch, info)
                    except Exception as exc:  # the requester's to answer, through its future
                        if not fut.done():
                            fut.set_exception(exc)
                    else:
                        if not fut.done():
                            fut.set_result(appended)
                queue.popleft()
        finally:
            self._queue = self._writer = None
            for _, _, fut in queue:  # the writer was cancelled (the loop is closing)
                fut.cancel()

    async def _append_in_turn(self, batch: memoryview, info: Any) -> AppendInfo:
        if self.deleted:
            raise UnknownTopicOrPartitionError(f"{self.topic}-{self.index} was deleted")
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"This broker is no longer the leader of "
                                           f"{self.topic}-{self.index}")
        log_append_time, duplicate = self._before_append(info)
        if duplicate is not None:
            return duplicate
        if len(batch) < self._inline_below:
            appended = self.log.append(batch, info, self.leader_epoch, log_append_time)
        else:
            appended = await self.log.append_async(batch, info, self.leader_epoch,
                                                   log_append_time)
        return self._after_append(appended)

    def _before_append(self, info: Any) -> tuple[int, AppendInfo | None]:
        """(LogAppendTime or -1, the original answer if this is a retried batch). The log
        records the batch in its producer state when it writes it."""
        now = int(time.time() * 1000)
        config = self.log.config
        if config.log_append_time:
            log_append_time = now
        else:
            log_append_time = -1
            self._check_timestamps(config, info, now)
        if info.producer_id < 0:
            return log_append_time, None
        producers = self.log.producer_state
        if info.is_control:  # a transaction marker
            producers.check_marker(info.producer_id, info.producer_epoch,
                                   info.coordinator_epoch)
        elif info.base_sequence < 0:  # a coordinator's batch: a transactional offset commit
            producers.check_epoch(info.producer_id, info.producer_epoch)
        else:
            duplicate = producers.check(info.producer_id, info.producer_epoch,
                                        info.base_sequence, info.last_offset_delta)
            if duplicate is not None:
                first, last = duplicate.first_offset, duplicate.last_offset
                return log_append_time, AppendInfo(
                    first, last, duplicate.timestamp, self.log.log_start_offset, -1, last,
                    last - first + 1, 0)
        return log_append_time, None

    def _after_append(self, appended: AppendInfo) -> AppendInfo:
        self.bytes_in += appended.size
        self.messages_in += appended.records_count
        if len(self.isr) == 1:  # the ISR is this replica: written is committed
            self.log.high_watermark = appended.last_offset + 1
        if self._waiters:
            self.wake()
        return appended

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

    # replication: roles ------------------------------------------------------------------

    def become_leader(self, leader_epoch: int, replicas: list[int], isr: list[int],
                      zk_version: int) -> None:
        """The controller made this replica the leader (the fetcher has let it go). The
        high watermark is kept; followers' positions are unknown until they fetch. The
        new epoch starts at the log end now, before anything is appended in it (Kafka's
        ``maybeAssignEpochStartOffset``): a follower asking where an epoch this log never
        had ends is told the end of the epoch below, not "unknown", which would send it
        back to its high watermark to fetch again what it already has. The caller has
        awaited ``appends_done``: no batch of the old epoch is still being written."""
        self.is_leader = True
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        self.replicas = list(replicas)
        self.isr = list(isr)
        self.zk_version = zk_version
        self.isr_pending = False
        now = _now_ms()
        self.followers = {r: FollowerState() for r in replicas if r != self.broker_id}
        self.epoch_start_offset = self.log.log_end_offset
        self.log.leader_epoch_cache.assign(leader_epoch, self.epoch_start_offset)
        for state in self.followers.values():
            state.last_caught_up_ms = now  # a fresh leader gives each follower its full lag
        self.maybe_advance_high_watermark()

    def become_follower(self, leader_id: int, leader_epoch: int, replicas: list[int],
                        isr: list[int], zk_version: int) -> None:
        """The controller made another broker the leader: produce and consumer fetches
        are refused from now on, and so are appends still queued (NOT_LEADER_OR_FOLLOWER
        when their turn comes); acks=all appends still waiting are told."""
        self.is_leader = False
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.replicas = list(replicas)
        self.isr = list(isr)
        self.zk_version = zk_version
        self.followers = {}
        self.isr_pending = False
        self._answer_hw_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self.wake()

    @property
    def appending(self) -> bool:
        """Whether an append of this partition is queued or being written now."""
        return self._writer is not None

    async def appends_done(self) -> None:
        """Wait until no append of this partition is queued or being written (a role
        change waits before the log is truncated or handed to the fetcher)."""
        while self._writer is not None:
            await asyncio.wait((self._writer,))

    # replication: the leader side ----------------------------------------------------------

    def follower_fetched(self, replica_id: int, offset: int) -> None:
        """A follower fetched from ``offset``: it has everything below it (Kafka's
        ``updateFollowerFetchState``). Caught up when it asked for the log end, or for
        at least the log end of its previous fetch (then it was caught up back then).
        An offset outside the log (answered OFFSET_OUT_OF_RANGE) says nothing, as in
        Kafka, which updates a follower only for a read that succeeded: a position past
        our end would count records the follower does not have from us."""
        state = self.followers.get(replica_id)
        if state is None or not self.is_leader:
            return
        end = self.log.log_end_offset
        if not self.log.log_start_offset <= offset <= end:
            return
        now = _now_ms()
        if offset >= end:
            state.last_caught_up_ms = now
        elif offset >= state.last_fetch_leader_end:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.last_fetch_ms = now
        state.last_fetch_leader_end = end
        advanced = offset > state.position
        if advanced:
            state.position = offset
        if replica_id not in self.isr:
            # Caught up to the high watermark and to where this leader's epoch began:
            # a new leader's high watermark can trail what its predecessor committed,
            # and a follower let in below that could be elected without those records
            # (Kafka's KAFKA-7128 rule). Asked at every fetch, moved or not (Kafka's
            # maybeExpandIsr): a follower caught up while another's ISR change was
            # being written must be let in at its next fetch, with nothing new to read.
            if state.position >= max(self.log.high_watermark, self.epoch_start_offset) \
                    and not self.isr_pending:
                self._propose_isr(self.isr + [replica_id])
        elif advanced:
            self.maybe_advance_high_watermark()

    def isr_lagging(self, max_lag_ms: int, now_ms: int | None = None) -> list[int]:
        """ISR followers that have not caught up with the log end for ``max_lag_ms``."""
        now = _now_ms() if now_ms is None else now_ms
        end = self.log.log_end_offset
        return [r for r, state in self.followers.items()
                if r in self.isr and state.position < end
                and now - state.last_caught_up_ms > max_lag_ms]

    def shrink_isr(self, max_lag_ms: int, now_ms: int | None = None) -> None:
        if not self.is_leader or self.isr_pending:
            return
        lagging = self.isr_lagging(max_lag_ms, now_ms)
        if lagging:
            self._propose_isr([r for r in self.isr if r not in lagging])

    def _propose_isr(self, isr: list[int]) -> None:
        if self.isr_listener is None:
            return
        self.isr_pending = True
        self.isr_listener(self, isr)

    def isr_changed(self, isr: list[int] | None, zk_version: int) -> None:
        """The ISR write ended: ``isr`` is the new ISR (None: refused, the controller has
        moved on and will tell us)."""
        self.isr_pending = False
        if isr is None or not self.is_leader:
            return
        if len(isr) < len(self.isr):
            self.isr_shrinks += 1
        elif len(isr) > len(self.isr):
            self.isr_expands += 1
        self.isr = list(isr)
        self.zk_version = zk_version
        self.maybe_advance_high_watermark()
        self._check_hw_waiters()

    def maybe_advance_high_watermark(self) -> None:
        """The high watermark: the lowest position of the ISR, never backwards."""
        log = self.log
        if log is None or not self.is_leader:
            return
        hw = log.log_end_offset
        for r in self.isr:
            if r != self.broker_id:
                state = self.followers.get(r)
                position = state.position if state is not None else -1
                if position < hw:
                    hw = position
        if hw > log.high_watermark:
            log.high_watermark = hw
            self._check_hw_waiters()
            self.wake()

    async def wait_for_high_watermark(self, end_offset: int, timeout_s: float) -> int:
        """Wait until the ISR has every offset below ``end_offset`` (acks=all, the group
        coordinator's writes): NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND (committed, but the
        ISR is smaller than min.insync.replicas), NOT_LEADER_OR_FOLLOWER, or
        REQUEST_TIMED_OUT."""
        if not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark >= end_offset:
            return self._committed_code()
        if self._replicas_unheard:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._hw_waiters.append((end_offset, fut))
        try:
            # asyncio.wait, not wait_for (which can lose a cancellation that meets the
            # result, before Python 3.12) nor asyncio.timeout (which needs a task: a
            # handler's first step runs outside one, net/connection.py _serve_inline).
            await asyncio.wait((fut,), timeout=timeout_s)
            return fut.result() if fut.done() else ErrorCode.REQUEST_TIMED_OUT
        finally:
            if not fut.done():
                fut.cancel()

    def _committed_code(self) -> int:
        if len(self.isr) < self.log.config.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    def _check_hw_waiters(self) -> None:
        if not self._hw_waiters:
            return
        hw = self.log.high_watermark
        waiting = []
        for end, fut in self._hw_waiters:
            if fut.done():
                continue
            if end <= hw:
                fut.set_result(self._committed_code())
            else:
                waiting.append((end, fut))
        self._hw_waiters = waiting

    def stop_waiting_for_replicas(self) -> None:
        """Shutdown: the followers' fetches are no longer read, so the high watermark stays
        where it is; acks=all appends waiting now or later (requests received before the
        drain) are told NOT_LEADER_OR_FOLLOWER at once (their producers retry with the next
        leader) rather than when they time out."""
        self._replicas_unheard = True
        self._answer_hw_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def _answer_hw_waiters(self, code: int) -> None:
        waiters, self._hw_waiters = self._hw_waiters, []
        for _, fut in waiters:
            if not fut.done():
                fut.set_result(code)

    # replication: the follower side --------------------------------------------------------

    def append_as_follower(self, records: Any, leader_high_watermark: int,
                           leader_log_start: int) -> int:
        """Append the leader's whole batches, offsets and epochs as they are; follow its
        high watermark and log start. Returns the new log end."""
        log = self.log
        if len(records):
            log.append_as_follower(records)
            self.replication_bytes_in += len(records)
        end = log.log_end_offset
        hw = min(leader_high_watermark, end)
        if hw > log.high_watermark:
            log.high_watermark = hw
        start = min(leader_log_start, log.high_watermark)
        if start > log.log_start_offset:
            log.delete_records_before(start)
        if self._waiters:
            self.wake()
        return end

    def truncate_to(self, offset: int) -> None:
        """Remove everything at and after ``offset`` (a tail the leader does not have); the
        log rebuilds its producer state."""
        self.log.truncate_to(offset)

    def restart_at(self, offset: int) -> None:
        """Empty the log and restart it at ``offset`` (the leader's log start is past ours)."""
        self.log.truncate_fully_and_start_at(offset)

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


def _now_ms() -> int:
    return int(time.monotonic() * 1000)

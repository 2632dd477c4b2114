"""Followers: each partition this broker follows is fetched from its leader and appended
as the leader wrote it (docs/REPLICATION.md, "Followers"; Kafka's ReplicaFetcherThread).

One ``LeaderFetcher`` per leader broker: one asyncio task and one TCP connection (a
``PeerClient``, peer.py; client id ``pybroker-replica-<broker id>``), requests one at a
time. Wire (the codec builds and reads the bodies):

    OffsetForLeaderEpoch v3  replica_id, [topic, [partition, current_leader_epoch,
                             leader_epoch]] -> [topic, [error_code, partition,
                             leader_epoch, end_offset]]
    Fetch v11                replica_id, max_wait_ms, min_bytes, max_bytes, isolation 0,
                             no session (0, -1), [topic, [partition, current_leader_epoch,
                             fetch_offset, log_start_offset, partition_max_bytes]]
                             -> [topic, [partition_index, error_code, high_watermark, ...,
                             log_start_offset, records]]

A partition's course in its fetcher: added -> truncating -> fetching.
- Truncating: it asks the leader where its own latest leader epoch ended, and removes
  what it has past ``min(leader's end, its own end of that epoch)`` (a tail a deposed
  leader wrote); when the leader answers with an older epoch this replica does not have,
  it truncates to its own end of the epoch below and asks again (Kafka's
  ``getTruncationOffset``). A log with no epoch truncates to its high watermark.
- Fetching from its log end, in the epoch of the LeaderAndIsr that made it follow: the
  leader's whole batches go to ``Partition.append_as_follower`` with the leader's high
  watermark and log start. The leader cuts a response at the byte limits, possibly
  inside a batch: only when a partition's records reach a limit is the chunk scanned
  natively (``scan_log``) for where its last whole batch ends; below the limits it is
  appended as it came (the log validates it in one native pass anyway).
- Errors: FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH and the rest
  delay the partition by ``replica.fetch.backoff.ms`` and it is retried until the
  controller moves it; OFFSET_OUT_OF_RANGE below the leader's log start restarts the log
  there, above the leader's end it truncates again. A connection error closes the
  connection, and the fetcher connects again after the backoff; one leader's trouble
  never touches another's fetcher.

Replication quota (KIP-73, :mod:`pybroker.repl.throttle`): while this broker's
``follower.replication.throttled.rate`` is exceeded, the partitions whose
``follower.replication.throttled.replicas`` list this broker are left out of the fetch,
unless caught up with the leader's high watermark; the bytes appended of those partitions
count against the rate.

Partitions that received data move to the end of the request (Kafka's fetcher does the
same), so under ``max_bytes`` every partition gets its turn to be first, and so its
oversize first batch (KIP-74).

Responses are received into a buffer of the frame's size (peer.py), large ones a
``FrameBuffer`` from the process's frame pool; the records are memoryviews into it that
the log writes from directly. Appends and
truncations are synchronous, and every response is applied only to partitions that are
still this fetcher's in the same state and epoch as when the request went out: ``remove``
therefore never finds an append in progress, and nothing is appended after it returns.

Not thread-safe: everything runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Protocol

from pybroker._native.records import HEADER_SIZE, read_batch_header, scan_log
from pybroker.errors import CorruptRecordError, ErrorCode, KafkaError
from pybroker.log.leader_epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from pybroker.repl.peer import REQUEST_TIMEOUT_S, PeerClient, recycle

if TYPE_CHECKING:
    from pybroker.broker.broker import Broker
    from pybroker.broker.partition import Partition
    from pybroker.config import BrokerConfig
    from pybroker.log.log import Log
    from pybroker.repl.throttle import ReplicationQuota

log = logging.getLogger("pybroker.fetcher")

FETCH, OFFSET_FOR_LEADER_EPOCH = 1, 23
FETCH_VERSION, OFFSET_FOR_LEADER_EPOCH_VERSION = 11, 3
class LeaderAddress(Protocol):
    """Where a leader is: ``BrokerInfo``, or what a LeaderAndIsr names."""

    @property
    def broker_id(self) -> int: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...


class _PartitionState:
    """A partition as its fetcher holds it. A new one is made at every ``add``, so a
    response to a request made for an older one is recognised and dropped."""

    __slots__ = ("partition", "epoch", "truncating", "delayed_until", "leader_hw")

    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self.epoch = partition.leader_epoch  # the LeaderAndIsr that made us follow
        self.truncating = True
        self.delayed_until = 0.0
        self.leader_hw = -1  # the leader's high watermark in its last answer; -1: none yet


class LeaderFetcher:
    """The partitions followed from one leader broker: one task, one connection."""

    def __init__(self, leader: LeaderAddress, broker_id: int, config: BrokerConfig,
                 quota: ReplicationQuota) -> None:
        self.leader_id: int = leader.broker_id
        self.broker_id = broker_id
        self.quota = quota  # the follower side's, shared by the broker's fetchers
        self.peer = PeerClient(leader.host, leader.port, f"pybroker-replica-{broker_id}")
        self.max_wait_ms: int = config["replica.fetch.wait.max.ms"]
        self.min_bytes: int = config["replica.fetch.min.bytes"]
        self.max_bytes: int = config["replica.fetch.response.max.bytes"]
        self.partition_max_bytes: int = config["replica.fetch.max.bytes"]
        self.backoff_s: float = config["replica.fetch.backoff.ms"] / 1000
        self.states: dict[tuple[str, int], _PartitionState] = {}
        self.bytes = 0      # record bytes appended
        self.fetches = 0    # Fetch responses received
        self.errors = 0     # connection errors and partition errors
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"LeaderFetcher(broker {self.leader_id} at {self.peer.host}:{self.peer.port})"

    # membership ------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(),
                                                            name=f"fetcher-{self.leader_id}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        try:
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)  # a cancel of ours raises
        finally:
            self.peer.close()

    def add(self, partition: Partition) -> None:
        self.states[(partition.topic, partition.index)] = _PartitionState(partition)
        self._wakeup.set()

    def remove(self, partition: Partition) -> bool:
        key = (partition.topic, partition.index)
        state = self.states.get(key)
        if state is None or state.partition is not partition:
            return False
        del self.states[key]
        return True

    def move_to(self, host: str, port: int) -> None:
        """The leader registered again at another address: connect there."""
        self.peer.move_to(host, port)

    def state_of(self, partition: Partition) -> _PartitionState | None:
        state = self.states.get((partition.topic, partition.index))
        return state if state is not None and state.partition is partition else None

    def stats(self) -> dict[str, int | str | bool]:
        return {"leader": self.leader_id, "address": f"{self.peer.host}:{self.peer.port}",
                "partitions": len(self.states), "bytes": self.bytes, "fetches": self.fetches,
                "errors": self.errors, "connects": self.peer.connects,
                "connected": self.peer.connected}

    # the loop ----------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                if not await self._step():
                    await self._idle()
            except asyncio.CancelledError:
                raise
            except (OSError, EOFError, TimeoutError, KafkaError) as exc:
                self.errors += 1
                log.warning("%r: %s: %s; retrying in %.1f s", self, type(exc).__name__, exc,
                            self.backoff_s)
                self.peer.close()
                await asyncio.sleep(self.backoff_s)
            except Exception:
                self.errors += 1
                log.exception("%r failed; retrying in %.1f s", self, self.backoff_s)
                self.peer.close()
                await asyncio.sleep(self.backoff_s)

    async def _step(self) -> bool:
        """One truncation round and one fetch for the partitions due; False: none was
        (the partitions due, if any, are held back by the follower throttle)."""
        now = time.monotonic()
        due = [s for s in self.states.values() if s.delayed_until <= now]
        for state in due:
            if state.partition.leader_epoch != state.epoch:  # a new LeaderAndIsr came first
                state.epoch, state.truncating = state.partition.leader_epoch, True
        truncating = [s for s in due if s.truncating]
        fetching = [s for s in due if not s.truncating]
        if fetching and self.quota.exceeded():
            fetching = [s for s in fetching if not self._held_back(s)]
        if truncating:
            await self._truncate(truncating)
        if fetching:
            await self._fetch(fetching)
        return bool(truncating or fetching)

    def _held_back(self, state: _PartitionState) -> bool:
        """Left out of the fetch while the follower throttle is exceeded: throttled here
        and not caught up with the leader's high watermark (Kafka's
        ``shouldFollowerThrottle``)."""
        caught_up = 0 <= state.leader_hw <= state.partition.log.log_end_offset
        return not caught_up and self.quota.throttled(state.partition)

    async def _idle(self) -> None:
        """Nothing is due: wait for the first delay to end or a partition to be added;
        partitions due but held back by the throttle wait ``replica.fetch.backoff.ms``
        (Kafka's fetcher with nothing to ask for)."""
        self._wakeup.clear()
        if not self.states:
            await self._wakeup.wait()
            return
        first = min(s.delayed_until for s in self.states.values())
        if first <= time.monotonic():
            first = time.monotonic() + self.backoff_s
        try:
            async with asyncio.timeout(max(first - time.monotonic(), 0.001)):
                await self._wakeup.wait()
        except TimeoutError:
            pass

    def _delay(self, state: _PartitionState, code: int) -> None:
        self.errors += 1
        state.delayed_until = time.monotonic() + self.backoff_s
        log.info("%s: %s from broker %d; retrying in %.1f s", state.partition,
                 _code_name(code), self.leader_id, self.backoff_s)

    def _current(self, key: tuple[str, int], sent: _PartitionState) -> bool:
        """Whether an answer about ``sent`` still applies: the same state (not removed or
        added again since) in the same epoch, and still a follower."""
        return (self.states.get(key) is sent and not sent.partition.is_leader
                and sent.partition.leader_epoch == sent.epoch)

    # truncation ----------------------------------------------------------------------------

    async def _truncate(self, states: list[_PartitionState]) -> None:
        asked: dict[tuple[str, int], _PartitionState] = {}
        topics: dict[str, list[dict]] = {}
        for state in states:
            partition = state.partition
            plog = partition.log
            epoch = plog.leader_epoch_cache.latest_epoch
            if epoch == UNDEFINED_EPOCH:  # nothing to compare: keep what is committed
                partition.truncate_to(min(plog.high_watermark, plog.log_end_offset))
                state.truncating = False
                continue
            asked[(partition.topic, partition.index)] = state
            topics.setdefault(partition.topic, []).append(
                {"partition": partition.index, "current_leader_epoch": state.epoch,
                 "leader_epoch": epoch})
        if not topics:
            return
        body = {"replica_id": self.broker_id, "topics": [
            {"topic": name, "partitions": parts} for name, parts in topics.items()]}
        response, _ = await self.peer.request(OFFSET_FOR_LEADER_EPOCH,
                                              OFFSET_FOR_LEADER_EPOCH_VERSION, body,
                                              REQUEST_TIMEOUT_S)
        for t in response["topics"]:
            for p in t["partitions"]:
                key = (t["topic"], p["partition"])
                was = asked.get(key)
                if was is None or not self._current(key, was):
                    continue
                if p["error_code"]:
                    self._delay(was, p["error_code"])
                    continue
                partition = was.partition
                offset, done = truncation_offset(partition.log, p["leader_epoch"],
                                                 p["end_offset"])
                if offset < partition.log.log_end_offset:
                    log.info("%s: truncating to %d (leader %d has epoch %d to %d)",
                             partition, offset, self.leader_id, p["leader_epoch"],
                             p["end_offset"])
                    partition.truncate_to(offset)
                was.truncating = not done

    # fetching ------------------------------------------------------------------------------

    async def _fetch(self, states: list[_PartitionState]) -> None:
        sent: dict[tuple[str, int], tuple[_PartitionState, int]] = {}
        topics: dict[str, list[dict]] = {}
        for state in states:
            partition = state.partition
            plog = partition.log
            offset = plog.log_end_offset
            sent[(partition.topic, partition.index)] = (state, offset)
            topics.setdefault(partition.topic, []).append(
                {"partition": partition.index, "current_leader_epoch": state.epoch,
                 "fetch_offset": offset, "log_start_offset": plog.log_start_offset,
                 "partition_max_bytes": self.partition_max_bytes})
        body = {"replica_id": self.broker_id, "max_wait_ms": self.max_wait_ms,
                "min_bytes": self.min_bytes, "max_bytes": self.max_bytes,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": name, "partitions": parts}
                           for name, parts in topics.items()],
                "forgotten_topics_data": [], "rack_id": ""}
        response, frame = await self.peer.request(
            FETCH, FETCH_VERSION, body, self.max_wait_ms / 1000 + REQUEST_TIMEOUT_S)
        self.fetches += 1
        if response["error_code"]:
            for state, _ in sent.values():
                self._delay(state, response["error_code"])
            return
        self._apply(response, sent)
        del response
        recycle(frame)

    def _apply(self, response: dict, sent: dict[tuple[str, int],
                                                tuple[_PartitionState, int]]) -> None:
        """Append what the leader sent; synchronous from the first partition to the last."""
        total = 0
        for t in response["responses"]:
            for p in t["partitions"]:
                key = (t["topic"], p["partition_index"])
                records = p["records"]
                size = len(records) if records is not None else 0
                cut_possible = (size >= self.partition_max_bytes
                                or total + size >= self.max_bytes)
                total += size
                was = sent.get(key)
                if was is None or not self._current(key, was[0]):
                    continue
                state, offset = was
                if state.partition.log.log_end_offset != offset:
                    continue  # truncated or restarted since the request went out
                code = p["error_code"]
                try:
                    if code == ErrorCode.NONE:
                        if self._append(state, records if records is not None else b"", size,
                                        cut_possible, p):
                            del self.states[key]  # had data: to the end of the next request
                            self.states[key] = state
                    elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                        self._out_of_range(state, p)
                    else:
                        self._delay(state, code)
                except KafkaError as exc:
                    log.warning("%s: the leader's data cannot be appended (%s: %s); "
                                "truncating again", state.partition, type(exc).__name__, exc)
                    state.truncating = True
                    self._delay(state, exc.code)

    def _append(self, state: _PartitionState, records: memoryview | bytes, size: int,
                cut_possible: bool, p: dict) -> int:
        """Append the whole batches of ``records``; returns the bytes appended."""
        partition = state.partition
        end = whole_batches_end(records) if size and cut_possible else size
        chunk = records[:end] if end < size else (records if size else b"")
        if end:
            head = read_batch_header(chunk, 0)
            plog = partition.log
            if head.base_offset < plog.log_end_offset:
                if plog.log_end_offset != plog.log_start_offset:
                    raise CorruptRecordError(f"batch at {head.base_offset} below the log end "
                                             f"{plog.log_end_offset}")
                # the leader's log start lies inside this batch (DeleteRecords): an empty
                # log starts over at the batch, as Kafka's follower does
                partition.restart_at(head.base_offset)
        partition.append_as_follower(chunk, p["high_watermark"], p["log_start_offset"])
        state.leader_hw = p["high_watermark"]
        self.bytes += end
        if end and self.quota.active and self.quota.throttled(partition):
            self.quota.record(end)
        return end

    def _out_of_range(self, state: _PartitionState, p: dict) -> None:
        partition = state.partition
        leader_start = p["log_start_offset"]
        if 0 <= partition.log.log_end_offset < leader_start:
            log.info("%s: log end %d below the leader's log start %d: restarting there",
                     partition, partition.log.log_end_offset, leader_start)
            partition.restart_at(leader_start)
            return
        state.truncating = True  # past the leader's end: find where the logs part again
        self._delay(state, ErrorCode.OFFSET_OUT_OF_RANGE)


class ReplicaFetcherManager:
    """The fetchers of this broker, one per leader broker it follows partitions of."""

    def __init__(self, broker: Broker, config: BrokerConfig) -> None:
        self.broker = broker
        self.broker_id: int = broker.broker_id
        self.config = config
        self.fetchers: dict[int, LeaderFetcher] = {}
        self._closed = False

    async def add(self, leader: LeaderAddress, partitions: list[Partition]) -> None:
        """Fetch ``partitions`` from ``leader`` (``broker_id``, ``host``, ``port``), each
        truncated first. A partition fetched from another leader moves; one fetched from
        this leader already starts over (a new epoch: truncation again)."""
        if self._closed:
            return
        fetcher = self.fetchers.get(leader.broker_id)
        if fetcher is None:
            fetcher = LeaderFetcher(leader, self.broker_id, self.config,
                                    self.broker.replication_quotas.follower)
            self.fetchers[leader.broker_id] = fetcher
            fetcher.start()
        else:
            fetcher.move_to(leader.host, leader.port)
        moved = [p for p in partitions if self._owner(p) not in (None, fetcher)]
        if moved:
            await self.remove(moved)
        for partition in partitions:
            fetcher.add(partition)

    async def remove(self, partitions: list[Partition]) -> None:
        """Stop fetching ``partitions``. Appends are synchronous and every answer is checked
        against the fetcher's current partitions, so once this returns nothing is
        appended to them. A fetcher left with no partition is stopped."""
        emptied = []
        for partition in partitions:
            for fetcher in self.fetchers.values():
                if fetcher.remove(partition) and not fetcher.states:
                    emptied.append(fetcher)
        for fetcher in emptied:
            if self.fetchers.get(fetcher.leader_id) is fetcher and not fetcher.states:
                del self.fetchers[fetcher.leader_id]
                await fetcher.stop()

    async def close(self) -> None:
        self._closed = True
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        await asyncio.gather(*(f.stop() for f in fetchers))

    def _owner(self, partition: Partition) -> LeaderFetcher | None:
        for fetcher in self.fetchers.values():
            if fetcher.state_of(partition) is not None:
                return fetcher
        return None

    def lag(self, partition: Partition) -> int | None:
        """Offsets the leader had committed in its last answer that this replica has not:
        ``max(0, leader high watermark - log end)``; None if not fetched (yet)."""
        for fetcher in self.fetchers.values():
            state = fetcher.state_of(partition)
            if state is not None:
                if state.leader_hw < 0:
                    return None
                return max(0, state.leader_hw - partition.log.log_end_offset)
        return None

    def stats(self) -> list[dict[str, int | str | bool]]:
        return [f.stats() for f in self.fetchers.values()]


def truncation_offset(plog: Log, leader_epoch: int, leader_end: int) -> tuple[int, bool]:
    """Where to truncate after the leader answered ``(leader_epoch, leader_end)`` for this
    log's latest epoch, and whether that settles it (False: ask again with the epoch that
    is latest after truncating). Kafka's ``AbstractFetcherThread.getTruncationOffset``."""
    end = plog.log_end_offset
    if leader_end == UNDEFINED_EPOCH_OFFSET:  # the leader knows no epoch up to ours
        return min(plog.high_watermark, end), True
    if leader_epoch == UNDEFINED_EPOCH:
        return min(leader_end, end), True
    epoch, own_end = plog.leader_epoch_cache.end_offset_for_epoch(leader_epoch, end)
    if own_end == UNDEFINED_EPOCH_OFFSET:
        return min(leader_end, end), True
    if epoch != leader_epoch:  # this log never had the leader's epoch: back to the one below
        return min(own_end, end), False
    return min(own_end, leader_end, end), True


def whole_batches_end(records: memoryview | bytes) -> int:
    """Bytes of ``records`` that are whole batches (the leader may cut the last one at its
    byte limit): one native pass. A whole batch that is bad raises CorruptRecordError."""
    size = len(records)
    if size < HEADER_SIZE:
        return 0
    scan = scan_log(records, 0, size, read_batch_header(records, 0).base_offset, 1 << 30)
    end = scan.valid_end
    rest = size - end
    if rest >= HEADER_SIZE and read_batch_header(records, end).size <= rest:
        raise CorruptRecordError(f"bad batch at byte {end} of a fetch response: {scan.error}")
    return end


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"

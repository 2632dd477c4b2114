"""The group coordinator: classic consumer group membership and committed offsets.

Every request a group member sends lands in one method here. JoinGroup and SyncGroup are
long polls: the caller awaits a future that the coordinator resolves when the rebalance
moves on (all members joined, the leader's assignment arrived, a timeout fired). Nothing
else waits.

Timing: each member has a heartbeat deadline and each rebalance a join (and then a sync)
deadline. Whenever one is set, ``(deadline, group)`` goes on a heap; one task wakes every
``TICK_S``, pops what is due and re-checks those groups only, so the cost of timers is
proportional to what expires, not to the number of groups. Tests drive ``poll(now)`` with
their own clock instead of the task.

Persistence: committed offsets and group metadata are written to ``__consumer_offsets``
(``OffsetStore``, over the control plane's ``OffsetsTopic``) before the request that
caused them is answered. Groups loaded with members come back Stable with fresh session
deadlines, so members that keep heartbeating across a broker restart see no rebalance.

Leadership, as Kafka: this broker coordinates the groups whose ``__consumer_offsets``
partition it leads, and its control plane (pybroker/metadata/) says which those are in
one of two ways. Where leadership never moves (one node), it calls ``load()`` before the
broker serves: every group is loaded at once and coordinated here from then on. Where it
moves (a cluster), it calls ``follow_leadership``: until told otherwise no partition is
led here, and ``leadership_changed`` (the broker's ``on_leadership_change`` listener)
loads a partition's groups when it becomes leader, in slices of at most ``LOAD_SLICE_S``
of loop time, reading up to the log end of the moment the load starts (requests for
those groups get COORDINATOR_LOAD_IN_PROGRESS meanwhile), and unloads them when it stops
leading: parked joins and syncs are answered NOT_COORDINATOR, the state is dropped. A
group of a partition led elsewhere gets NOT_COORDINATOR, so its clients ask
FindCoordinator again.

A commit or a group's metadata is answered only once committed: the high watermark has
passed it. Where the ISR is this broker alone (one node) the high watermark moves with
the write (``Written.committed``) and the answer comes without suspending; otherwise it
waits in ``Partition.wait_for_high_watermark`` (``offsets.commit.timeout.ms``), and
committed offsets enter the in-memory state only then, so OffsetFetch never shows an
offset a failover could lose. Tombstones (deletions, expiry) are not waited for: a lost
one is written again by the next expiry pass, as Kafka does.

The topic is compacted by the log cleaner (``cleanup.policy=compact``, segments of
``offsets.topic.segment.bytes``), on every replica, like any compacted topic: the
tombstones written where Kafka writes them (DeleteOffsets, expired offsets, a deleted or
emptied group's metadata) are what let it drop a key's older records.

The semantics follow Kafka's classic ``GroupCoordinator``; departures are noted inline.
Not thread-safe: every method runs on the broker's event loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from pybroker.coordinator import offset_store as records
from pybroker.coordinator.group import Group, GroupState, OffsetAndMetadata
from pybroker.coordinator.member import NEW_MEMBER_JOIN_TIMEOUT_MS, Member
from pybroker.errors import ErrorCode, KafkaError
from pybroker.log.state_machine import replay_in_slices

if TYPE_CHECKING:
    from pybroker._native.records import BatchInfo, Record
    from pybroker.broker.partition import Partition
    from pybroker.config import BrokerConfig

log = logging.getLogger("pybroker.coordinator")
T = TypeVar("T")

TICK_S = 0.1  # timer resolution; session timeouts are seconds, so 100 ms is plenty
# A partition's load gives the loop back after this much work: requests of the groups
# this broker already coordinates wait at most this long behind a big partition's replay.
LOAD_SLICE_S = 0.005
_INSTALL_STEP = 256  # keys parsed (groups built) between looks at the slice's clock
# a JoinGroup's member fields: client id, client host, rebalance and session timeouts (ms),
# protocol type, (protocol name, metadata) in the member's order of preference
_JoinSpec = tuple[str, str, int, int, str, list[tuple[str, bytes]]]


@dataclass(frozen=True)
class CoordinatorConfig:
    """Kafka's broker settings for groups, under Kafka's key names (``from_config``)."""

    offsets_topic_num_partitions: int = 50
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    # Kafka defaults to 3000 ms to gather the members of a new group into one rebalance.
    # pybroker defaults to 0: a new group answers its first member at once and later
    # joiners trigger ordinary rebalances; set it for fewer rebalances on mass start.
    initial_rebalance_delay_ms: int = 0
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_group_size: int = 2**31 - 1
    offset_metadata_max_bytes: int = 4096
    # the offsets topic's segments: the log cleaner compacts every segment but the
    # active one, so this bounds what a partition keeps beyond its live keys
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    # how long a write waits for the ISR, and the offsets topic's replication factor
    # (at most the live brokers when it is created)
    offsets_commit_timeout_ms: int = 5000
    offsets_topic_replication_factor: int = 3

    KEYS = {
        "offsets.topic.num.partitions": "offsets_topic_num_partitions",
        "offsets.commit.timeout.ms": "offsets_commit_timeout_ms",
        "offsets.topic.replication.factor": "offsets_topic_replication_factor",
        "offsets.topic.segment.bytes": "offsets_topic_segment_bytes",
        "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
        "group.initial.rebalance.delay.ms": "initial_rebalance_delay_ms",
        "group.min.session.timeout.ms": "min_session_timeout_ms",
        "group.max.session.timeout.ms": "max_session_timeout_ms",
        "group.max.size": "max_group_size",
        "offset.metadata.max.bytes": "offset_metadata_max_bytes",
    }

    @classmethod
    def from_config(cls, config: BrokerConfig | Mapping[str, int | str]) -> CoordinatorConfig:
        """From a ``BrokerConfig`` (known keys or its ``extra``) or a plain mapping."""
        def lookup(key: str) -> int | str | None:
            if isinstance(config, dict):
                return config.get(key)
            with contextlib.suppress(KeyError):
                return config.get(key)
            return getattr(config, "extra", {}).get(key)

        values: dict[str, int] = {}
        for key, attr in cls.KEYS.items():
            value = lookup(key)
            if value is not None:
                values[attr] = int(value)
        minutes = lookup("offsets.retention.minutes")
        if minutes is not None:
            values["offsets_retention_ms"] = int(minutes) * 60_000
        return cls(**values)


class JoinResult(NamedTuple):
    error: ErrorCode
    member_id: str
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: list[tuple[str, str | None, bytes]] = []  # for the leader only
    skip_assignment: bool = False


class SyncResult(NamedTuple):
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class MemberDescription(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


class GroupDescription(NamedTuple):
    error: ErrorCode
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    members: list[MemberDescription]


class OffsetCommit(NamedTuple):
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_timestamp: int = -1


class _Led:
    """An offsets partition this broker was told it leads: loading, then loaded."""

    __slots__ = ("partition", "loading", "task")

    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self.loading = True
        self.task: asyncio.Task[None] | None = None


class _PendingCommit(NamedTuple):
    group: Group
    accepted: dict[tuple[str, int], OffsetAndMetadata]
    written: records.Written | None


class GroupCoordinator:
    def __init__(self, offsets_topic: records.OffsetsTopic | None = None,
                 config: CoordinatorConfig | None = None,
                 clock: Callable[[], float] = time.time,
                 partition_exists: Callable[[str, int], bool] | None = None) -> None:
        """``offsets_topic``: ``__consumer_offsets`` as the control plane has it (None
        keeps everything in memory, for tests of the protocol alone);
        ``partition_exists`` vets committed partitions."""
        self._closing = False  # shutdown began: long polls are answered, none parks
        self.config = config or CoordinatorConfig()
        self._clock = clock
        self._store = None if offsets_topic is None else \
            records.OffsetStore(offsets_topic, self.config.offsets_topic_num_partitions)
        # the offsets partitions this broker was told it leads (``follow_leadership``);
        # None: every one, always
        self._led: dict[int, _Led] | None = None
        self._background: set[asyncio.Task[None]] = set()  # replication waits, loads
        # one partition loads at a time, so the loop is never held longer than one slice
        # however many partitions this broker takes over at once
        self._load_lock = asyncio.Lock()
        self._partition_exists = partition_exists
        self.groups: dict[str, Group] = {}
        self._timers: list[tuple[int, int, str]] = []
        self._seq = itertools.count()
        self._next_expiry = 0
        self._task: asyncio.Task[None] | None = None

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    # lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the timers (the groups are loaded by then, or load as leadership comes:
        module docstring)."""
        self._next_expiry = self.now_ms() + self.config.offsets_retention_check_interval_ms
        self._task = asyncio.get_running_loop().create_task(self._run(), name="groups")

    async def stop(self) -> None:
        self._closing = True
        tasks = [t for t in (self._task, *self._background) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        self.release_waiters()

    def begin_shutdown(self) -> None:
        """The broker is stopping: answer the parked long polls and park no more."""
        self._closing = True
        self.release_waiters()

    def release_waiters(self) -> None:
        """Answer every parked JoinGroup/SyncGroup with NOT_COORDINATOR: this coordinator is
        going away, the clients find it again (after a restart) and rejoin."""
        for group in self.groups.values():
            for member in group.members.values():
                member.complete_join(JoinResult(ErrorCode.NOT_COORDINATOR, member.member_id))
                member.complete_sync(SyncResult(ErrorCode.NOT_COORDINATOR))

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self.poll()
            except Exception:  # a bug in one group must not stop every timer
                log.exception("group timers")

    def load(self) -> None:
        """Rebuild every group from the log, at once: where this broker leads every
        offsets partition from the start (one node), before it serves."""
        if self._store is None:
            return
        # The topic is a changelog: only the last value of each key matters. Keep the raw
        # bytes of the last one per key (a dict store per record), parse the survivors.
        latest: dict[bytes, bytes | None] = {}
        count = 0
        for batch in self._store.read_all():
            count += _latest_values(latest, batch)
        steps = self._install(latest)
        for _ in steps:
            pass
        log.info("loaded %d groups from %d records of %s", len(self.groups), count,
                 records.OFFSETS_TOPIC)

    def _install(self, latest: dict[bytes, bytes | None]) -> Iterator[int]:
        """Build the groups of the last value of each key, yielding the groups built so
        far every ``_INSTALL_STEP`` keys and groups (the cluster load pauses there)."""
        now = self.now_ms()
        metadata: dict[str, records.GroupRecord] = {}
        offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        step = 0
        for raw_key, raw_value in latest.items():
            step += 1
            if step % _INSTALL_STEP == 0:
                yield 0
            if raw_value is None:
                continue  # a tombstone: the key is gone
            try:
                key = records.parse_key(raw_key)
                if isinstance(key, records.OffsetKey):
                    offsets.setdefault(key.group, {})[(key.topic, key.partition)] = \
                        records.parse_offset_value(raw_value)
                elif isinstance(key, records.GroupKey):
                    metadata[key.group] = records.parse_group_value(raw_value)
            except (KafkaError, UnicodeDecodeError) as exc:
                log.warning("%s: skipping unreadable record: %s", records.OFFSETS_TOPIC, exc)
        loaded = 0
        for group_id in set(metadata) | set(offsets):
            record = metadata.get(group_id)
            group_offsets = offsets.get(group_id, {})
            if record is None and not group_offsets:
                continue
            group = Group(group_id, now)
            group.offsets = group_offsets
            if record is not None:
                self._restore(group, record, now)
            self.groups[group_id] = group
            loaded += 1
            if loaded % _INSTALL_STEP == 0:
                yield loaded
        yield loaded

    def _restore(self, group: Group, record: records.GroupRecord, now: int) -> None:
        group.generation = record.generation
        group.protocol_type = record.protocol_type or None
        group.protocol_name = record.protocol
        group.state_timestamp = record.state_timestamp if record.state_timestamp >= 0 else now
        for m in record.members:
            member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.rebalance_timeout_ms, m.session_timeout_ms,
                            record.protocol_type, [(record.protocol or "", m.subscription)])
            member.assignment = m.assignment
            member.heartbeat_deadline = now + m.session_timeout_ms
            group.add(member)
            self._schedule(group, member.heartbeat_deadline)
        group.protocol_type = record.protocol_type or None
        group.leader_id = record.leader if record.leader in group.members \
            else next(iter(group.members), None)
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY

    # leadership of the offsets partitions ----------------------------------------------

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition of a group (0 without a store)."""
        return self._store.partition_for(group_id) if self._store is not None else 0

    def follow_leadership(self, subscribe: Callable[[Callable[[Partition, bool], None]], None]
                          ) -> None:
        """Coordinate only the groups of the offsets partitions this broker is told it
        leads: none until ``subscribe``'s listener (``leadership_changed``) says so."""
        self._led = {}
        subscribe(self.leadership_changed)

    def leadership_changed(self, partition: Partition, is_leader: bool) -> None:
        """The broker's ``on_leadership_change`` listener: load the groups of an offsets
        partition this broker now leads, unload those of one it no longer leads. Being
        told leader again (a new leader epoch) keeps what is loaded: this broker was the
        partition's only writer all along, or it would have been told follower between."""
        if self._led is None or partition.topic != records.OFFSETS_TOPIC:
            return
        index = partition.index
        if is_leader:
            if index in self._led or self._closing:
                return
            led = self._led[index] = _Led(partition)
            led.task = self._spawn(self._load_partition(index, led))
            return
        lost = self._led.pop(index, None)
        if lost is None:
            return
        if lost.task is not None and not lost.task.done():
            lost.task.cancel()
        self._unload(index)

    async def _load_partition(self, index: int, led: _Led) -> None:
        """Replay one partition's log up to its end of now, giving the loop back every
        ``LOAD_SLICE_S``; then its groups are served. The log cannot change under the
        replay: nothing is written to a partition while it loads, and a replica that
        stops leading (checked after each pause) stops the load before the fetcher may
        truncate it."""
        async with self._load_lock:
            await self._replay_partition(index, led)

    async def _replay_partition(self, index: int, led: _Led) -> None:
        started = time.monotonic()
        try:
            replayed = await self._replay(index, led)
        except Exception:
            log.exception("%s-%d: loading the groups failed", records.OFFSETS_TOPIC, index)
            replayed = None
        loaded = -1
        if replayed is not None:
            latest, count = replayed
            slice_end = time.monotonic() + LOAD_SLICE_S
            for loaded in self._install(latest):
                if time.monotonic() >= slice_end:
                    await asyncio.sleep(0)
                    slice_end = time.monotonic() + LOAD_SLICE_S
                    if not self._still_led(index, led):
                        loaded = -1
                        break
        if loaded >= 0 and self._still_led(index, led):
            led.loading = False
            log.info("%s-%d: loaded %d groups from %d records in %.3f s",
                     records.OFFSETS_TOPIC, index, loaded, count, time.monotonic() - started)
        elif self._led is not None and self._led.get(index) is led:
            # Not the leader any more, or the log would not read: its groups answer
            # NOT_COORDINATOR (their clients look for the coordinator again), not a load
            # that would never end; what was installed goes.
            del self._led[index]
            self._unload(index)

    async def _replay(self, index: int, led: _Led) -> tuple[dict[bytes, bytes | None], int] | None:
        """The last value of each key of the partition, and the record count; None when
        this broker stopped leading it meanwhile."""
        latest: dict[bytes, bytes | None] = {}
        count = 0
        if not self._still_led(index, led):
            return None
        start = led.partition.log.log_start_offset

        def consume(info: BatchInfo, data: memoryview) -> None:
            nonlocal count
            batch = records.data_records(info, data, start)
            if batch is not None:
                count += _latest_values(latest, batch)

        reached = await replay_in_slices(led.partition.log, start, consume,
                                         lambda: self._still_led(index, led), LOAD_SLICE_S)
        return None if reached is None else (latest, count)

    def _still_led(self, index: int, led: _Led) -> bool:
        return led.partition.is_leader and self._led is not None \
            and self._led.get(index) is led

    def _unload(self, index: int) -> None:
        """Drop the groups of an offsets partition this broker no longer leads."""
        now = self.now_ms()
        gone = [g for g in self.groups.values() if self.partition_for(g.group_id) == index]
        for group in gone:
            for member in group.members.values():
                member.complete_join(JoinResult(ErrorCode.NOT_COORDINATOR, member.member_id))
                member.complete_sync(SyncResult(ErrorCode.NOT_COORDINATOR))
            group.transition_to(GroupState.DEAD, now)  # writes in flight see it is gone
            del self.groups[group.group_id]
        log.info("%s-%d: not the leader any more, %d groups unloaded", records.OFFSETS_TOPIC,
                 index, len(gone))

    def coordinator_error(self, group_id: str) -> ErrorCode:
        """NONE when this broker coordinates ``group_id`` now; NOT_COORDINATOR when
        another does, COORDINATOR_LOAD_IN_PROGRESS while its partition loads."""
        if self._led is None:  # before hashing the id: this is on every request's path
            return ErrorCode.NONE
        return self.coordinator_error_of(self.partition_for(group_id))

    def coordinator_error_of(self, partition: int) -> ErrorCode:
        """``coordinator_error`` for the groups of an offsets partition."""
        if self._led is None:
            return ErrorCode.NONE
        led = self._led.get(partition)
        if led is None or not led.partition.is_leader:  # or told so, not yet to us
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if led.loading else ErrorCode.NONE

    def loading(self) -> bool:
        """Whether a partition's groups are still loading (ListGroups says so)."""
        return self._led is not None and any(led.loading for led in self._led.values())

    def _spawn(self, coro: Coroutine[object, object, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # timers ----------------------------------------------------------------------------

    def _schedule(self, group: Group, deadline: int) -> None:
        heapq.heappush(self._timers, (deadline, next(self._seq), group.group_id))

    def poll(self, now: int | None = None) -> None:
        """Run everything due at ``now`` (ms): expirations, rebalance deadlines, retention."""
        now = self.now_ms() if now is None else now
        due: dict[str, None] = {}
        while self._timers and self._timers[0][0] <= now:
            due[heapq.heappop(self._timers)[2]] = None
        for group_id in due:
            group = self.groups.get(group_id)
            if group is not None:
                self._check_group(group, now)
        if self._next_expiry and now >= self._next_expiry:
            self._next_expiry = now + self.config.offsets_retention_check_interval_ms
            self.expire_offsets(now)

    def _check_group(self, group: Group, now: int) -> None:
        for member_id, deadline in list(group.pending_members.items()):
            if deadline <= now:
                del group.pending_members[member_id]
        expired = [m for m in group.members.values() if not m.should_keep_alive(now)]
        if expired:
            self._remove_members(group, expired, "session timeout", now)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            if now >= group.join_deadline:
                self._complete_join(group, now)
            else:
                self._try_complete_join(group, now)
        if group.pending_sync and now >= group.sync_deadline \
                and group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            late = [group.members[m] for m in group.pending_sync if m in group.members]
            self._remove_members(group, late, "no SyncGroup within the rebalance timeout", now)

    # JoinGroup -------------------------------------------------------------------------

    def join_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                   client_id: str, client_host: str, session_timeout_ms: int,
                   rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]],
                   require_known_member_id: bool = True) -> asyncio.Future[JoinResult]:
        """The future of the member's answer: done at once, or parked until the rebalance
        completes. A caller that stops waiting (its client went away) leaves it parked:
        the member still counts as joining, as in Kafka, and is removed if it never
        syncs."""
        if self._closing:
            return _answered(JoinResult(ErrorCode.NOT_COORDINATOR, member_id))
        now = self.now_ms()
        if rebalance_timeout_ms < 0:  # JoinGroup v0 has none: it was the session timeout
            rebalance_timeout_ms = session_timeout_ms
        if not group_id:
            return _answered(JoinResult(ErrorCode.INVALID_GROUP_ID, member_id))
        error = self.coordinator_error(group_id)
        if error:
            return _answered(JoinResult(error, member_id))
        if not (self.config.min_session_timeout_ms <= session_timeout_ms
                <= self.config.max_session_timeout_ms):
            return _answered(JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id))
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return _answered(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
            group = self.groups[group_id] = Group(group_id, now)
        if group.is_in(GroupState.DEAD):
            return _answered(JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id))
        if not group.supports_protocols(protocol_type, protocols):
            return _answered(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
        is_known = member_id in group.members or member_id in group.pending_members
        if not is_known and len(group.members) >= self.config.max_group_size \
                and group_instance_id not in group.static_members:
            return _answered(JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id))

        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        spec = (client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                protocol_type, protocols)
        if not member_id:
            self._join_new_member(group, future, group_instance_id,
                                  require_known_member_id, spec, now)
        else:
            self._join_known_member(group, future, member_id, group_instance_id, spec, now)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group, now)
        return future

    def _join_new_member(self, group: Group, future: asyncio.Future[JoinResult],
                         instance_id: str | None, require_known: bool, spec: _JoinSpec,
                         now: int) -> None:
        client_id, _, _, session_timeout_ms, _, _ = spec
        new_id = f"{client_id}-{uuid.uuid4()}"
        if instance_id is not None:
            if instance_id in group.static_members:
                self._rejoin_static_member(group, future, instance_id, new_id, spec, now)
            else:
                self._add_member_and_rebalance(group, future, new_id, instance_id, spec, now)
        elif require_known:
            # KIP-394: hand out the id first, so a client that times out and retries the
            # join does not leave a ghost member holding the rebalance up.
            group.pending_members[new_id] = now + session_timeout_ms
            self._schedule(group, now + session_timeout_ms)
            future.set_result(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, new_id))
        else:
            self._add_member_and_rebalance(group, future, new_id, None, spec, now)

    def _join_known_member(self, group: Group, future: asyncio.Future[JoinResult],
                           member_id: str, instance_id: str | None, spec: _JoinSpec,
                           now: int) -> None:
        if member_id in group.pending_members:
            if instance_id is not None:
                future.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
                return
            del group.pending_members[member_id]
            self._add_member_and_rebalance(group, future, member_id, None, spec, now)
            return
        error = group.validate_member(member_id, instance_id)
        if error:
            future.set_result(JoinResult(error, member_id))
            return
        member = group.members[member_id]
        protocols = spec[5]
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, future, spec, now)
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            if member.matches(protocols):  # a retried join: answer it again
                future.set_result(self._join_result(group, member))
            else:
                self._update_member_and_rebalance(group, member, future, spec, now)
        elif group.is_in(GroupState.STABLE):
            if member_id == group.leader_id or not member.matches(protocols):
                # the leader rejoins to rebalance (e.g. the topic metadata changed)
                self._update_member_and_rebalance(group, member, future, spec, now)
            else:
                future.set_result(self._join_result(group, member))
        else:
            future.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        is_leader = member.member_id == group.leader_id
        members = [(m.member_id, m.group_instance_id, m.metadata(group.protocol_name or ""))
                   for m in group.members.values()] if is_leader else []
        return JoinResult(ErrorCode.NONE, member.member_id, group.generation,
                          group.protocol_type, group.protocol_name, group.leader_id or "",
                          members)

    def _add_member_and_rebalance(self, group: Group, future: asyncio.Future[JoinResult],
                                  member_id: str, instance_id: str | None,
                                  spec: _JoinSpec, now: int) -> None:
        client_id, client_host, rebalance_ms, session_ms, protocol_type, protocols = spec
        member = Member(member_id, instance_id, client_id, client_host, rebalance_ms,
                        session_ms, protocol_type, list(protocols))
        member.is_new = True
        member.join_future = future
        member.heartbeat_deadline = now + NEW_MEMBER_JOIN_TIMEOUT_MS
        group.add(member)
        self._schedule(group, member.heartbeat_deadline)
        self._maybe_prepare_rebalance(group, f"{member_id} joined", now)

    def _update_member_and_rebalance(self, group: Group, member: Member,
                                     future: asyncio.Future[JoinResult],
                                     spec: _JoinSpec, now: int) -> None:
        _, _, member.rebalance_timeout_ms, member.session_timeout_ms, _, protocols = spec
        member.protocols = list(protocols)
        # a join retried on a new connection replaces the parked one
        member.complete_join(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        member.join_future = future
        self._maybe_prepare_rebalance(group, f"{member.member_id} rejoined", now)

    def _rejoin_static_member(self, group: Group, future: asyncio.Future[JoinResult],
                              instance_id: str, new_id: str, spec: _JoinSpec,
                              now: int) -> None:
        """A known group.instance.id joins with no member id: it restarted. It takes over
        its old member (fencing the old id); a Stable group keeps its assignment."""
        _, _, rebalance_ms, session_ms, _, protocols = spec
        old_id = group.static_members[instance_id]
        old = group.members[old_id]
        old.complete_join(JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id))
        old.complete_sync(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        leader_before = group.leader_id or ""
        saved = (old.protocols, old.rebalance_timeout_ms, old.session_timeout_ms)
        member = group.replace_static_member(instance_id, new_id)
        member.protocols = list(protocols)
        member.rebalance_timeout_ms, member.session_timeout_ms = rebalance_ms, session_ms
        member.heartbeat_deadline = now + session_ms
        self._schedule(group, member.heartbeat_deadline)
        if group.is_in(GroupState.STABLE) and group.select_protocol() == group.protocol_name:
            def revert() -> None:
                group.replace_static_member(instance_id, old_id)
                member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = saved

            try:
                written = self._store_group(group, now)
            except KafkaError as exc:
                revert()
                future.set_result(JoinResult(_store_error(exc), ""))
                return
            # The old leader id is returned so that a restarted leader does not compute an
            # assignment a Stable group would never distribute.
            answer = JoinResult(ErrorCode.NONE, new_id, group.generation, group.protocol_type,
                                group.protocol_name, leader_before, [])
            if written is None or written.committed():
                future.set_result(answer)
            else:
                self._spawn(self._answer_static_rejoin(group, instance_id, new_id, written,
                                                       future, answer, revert))
            return
        member.join_future = future
        self._maybe_prepare_rebalance(group, f"static member {instance_id} rejoined", now)

    async def _answer_static_rejoin(self, group: Group, instance_id: str, new_id: str,
                                    written: records.Written,
                                    future: asyncio.Future[JoinResult], answer: JoinResult,
                                    revert: Callable[[], None]) -> None:
        """A static member's takeover is answered once its record is committed; refused,
        it is undone if nothing has moved the group on since."""
        error = await self._replication(written)
        if error and self.groups.get(group.group_id) is group \
                and group.static_members.get(instance_id) == new_id:
            revert()
        if not future.done():
            future.set_result(JoinResult(error, "") if error else answer)

    # rebalance -------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: Group, reason: str, now: int) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason, now)

    def _prepare_rebalance(self, group: Group, reason: str, now: int) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        group.pending_sync.clear()
        was_empty = group.is_in(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE, now)
        rebalance_ms = group.max_rebalance_timeout()
        if was_empty:
            delay = self.config.initial_rebalance_delay_ms
            group.join_not_before = now + delay
            group.join_deadline = now + max(rebalance_ms, delay)
            self._schedule(group, group.join_not_before)
        else:
            group.join_not_before = 0
            group.join_deadline = now + rebalance_ms
        self._schedule(group, group.join_deadline)
        log.info("group %s: rebalancing generation %d (%s)", group.group_id,
                 group.generation, reason)
        self._try_complete_join(group, now)

    def _try_complete_join(self, group: Group, now: int) -> None:
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.all_members_joined() \
                and now >= group.join_not_before:
            self._complete_join(group, now)

    def _complete_join(self, group: Group, now: int) -> None:
        # dynamic members that did not rejoin in time are gone (max.poll.interval.ms);
        # static ones stay until their session expires
        gone = [m for m in group.not_yet_rejoined() if not m.is_static]
        for member in gone:
            self._drop(group, member, ErrorCode.UNKNOWN_MEMBER_ID)
        if gone:
            log.info("group %s: %d members did not rejoin in time", group.group_id, len(gone))
        if group.members and not self._elect_joined_leader(group):
            # only static members that have not rejoined remain: wait for them
            group.join_deadline = now + group.max_rebalance_timeout()
            self._schedule(group, group.join_deadline)
            return
        group.init_next_generation(now)
        if group.is_in(GroupState.EMPTY):
            self._store_group_or_log(group, now)
            return
        for member in group.members.values():
            member.complete_join(self._join_result(group, member))
            member.is_new = False
            member.heartbeat_deadline = now + member.session_timeout_ms
            self._schedule(group, member.heartbeat_deadline)
        group.pending_sync = set(group.members)
        group.sync_deadline = now + group.max_rebalance_timeout()
        self._schedule(group, group.sync_deadline)
        log.info("group %s: generation %d, protocol %s, leader %s, %d members",
                 group.group_id, group.generation, group.protocol_name, group.leader_id,
                 len(group.members))

    @staticmethod
    def _elect_joined_leader(group: Group) -> bool:
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.awaiting_join:
            return True
        for member in group.members.values():
            if member.awaiting_join:
                group.leader_id = member.member_id
                return True
        return False

    @staticmethod
    def _propagate_assignment_error(group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            member.complete_sync(SyncResult(error))

    def _drop(self, group: Group, member: Member, error: ErrorCode) -> None:
        member.complete_join(JoinResult(error, member.member_id))
        member.complete_sync(SyncResult(error))
        group.remove(member.member_id)

    def _remove_members(self, group: Group, members: Iterable[Member], reason: str,
                        now: int) -> None:
        removed = 0
        for member in members:
            if group.members.get(member.member_id) is member:
                self._drop(group, member, ErrorCode.UNKNOWN_MEMBER_ID)
                removed += 1
        if not removed:
            return
        log.info("group %s: %d members removed (%s)", group.group_id, removed, reason)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason, now)
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group, now)

    # SyncGroup, Heartbeat, LeaveGroup --------------------------------------------------

    def sync_group(self, group_id: str, generation: int, member_id: str,
                   group_instance_id: str | None, protocol_type: str | None,
                   protocol_name: str | None,
                   assignments: dict[str, bytes]) -> asyncio.Future[SyncResult]:
        """The future of the member's answer: done at once, or parked until the leader's
        assignment is stored."""
        if self._closing:
            return _answered(SyncResult(ErrorCode.NOT_COORDINATOR))
        error = self.coordinator_error(group_id)
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # Kafka's answer: the rebalance in progress was lost with the old coordinator,
            # and older clients do not know the loading error; they rejoin.
            return _answered(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        if error:
            return _answered(SyncResult(error))
        now = self.now_ms()
        group = self.groups.get(group_id)
        if group is None:
            return _answered(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        if group.is_in(GroupState.DEAD):
            return _answered(SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        error = group.validate_member(member_id, group_instance_id)
        if error:
            return _answered(SyncResult(error))
        if generation != group.generation:
            return _answered(SyncResult(ErrorCode.ILLEGAL_GENERATION))
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return _answered(SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        if group.is_in(GroupState.EMPTY):
            return _answered(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return _answered(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member = group.members[member_id]
        member.heartbeat_deadline = now + member.session_timeout_ms
        self._schedule(group, member.heartbeat_deadline)
        group.pending_sync.discard(member_id)
        if group.is_in(GroupState.STABLE):
            return _answered(SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name,
                              member.assignment))
        # CompletingRebalance: park until the leader's assignment arrives
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        member.complete_sync(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.sync_future = future
        if member_id == group.leader_id:
            for mid, m in group.members.items():
                m.assignment = bytes(assignments.get(mid, b""))
            try:
                written = self._store_group(group, now)
            except KafkaError as exc:
                self._assignment_failed(group, _store_error(exc), now)
            else:
                if written is None or written.committed():
                    self._assignment_stored(group, now)
                else:
                    self._spawn(self._await_assignment(group, group.generation, written))
        return future

    def _assignment_stored(self, group: Group, now: int) -> None:
        group.transition_to(GroupState.STABLE, now)
        for m in group.members.values():
            m.complete_sync(SyncResult(ErrorCode.NONE, group.protocol_type,
                                       group.protocol_name, m.assignment))
        log.info("group %s: generation %d stable", group.group_id, group.generation)

    def _assignment_failed(self, group: Group, error: ErrorCode, now: int) -> None:
        self._propagate_assignment_error(group, error)
        self._prepare_rebalance(group, "storing the assignment failed", now)

    async def _await_assignment(self, group: Group, generation: int,
                                written: records.Written) -> None:
        """The group turns Stable (and the syncs are answered) once its assignment is
        committed, unless the rebalance moved on meanwhile."""
        error = await self._replication(written)
        if self.groups.get(group.group_id) is not group or group.generation != generation \
                or not group.is_in(GroupState.COMPLETING_REBALANCE):
            return
        if error:
            self._assignment_failed(group, error, self.now_ms())
        else:
            self._assignment_stored(group, self.now_ms())

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None,
                  generation: int) -> ErrorCode:
        error = self.coordinator_error(group_id)
        if error:
            # Kafka answers a heartbeat blindly while the group loads
            return ErrorCode.NONE if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else error
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(member_id, group_instance_id)
        if error:
            return error
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_in(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        member = group.members[member_id]
        member.heartbeat_deadline = self.now_ms() + member.session_timeout_ms
        self._schedule(group, member.heartbeat_deadline)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]
                    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """``leaving`` is ``(member_id, group_instance_id)``; a static member may be named
        by its instance id alone (member id ""). Returns the group error and one per member."""
        error = self.coordinator_error(group_id)
        if error:
            return error, []
        now = self.now_ms()
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [(m, i, ErrorCode.UNKNOWN_MEMBER_ID) for m, i in leaving]
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        results: list[tuple[str, str | None, ErrorCode]] = []
        for member_id, instance_id in leaving:
            if member_id in group.pending_members and instance_id is None:
                del group.pending_members[member_id]
                self._try_complete_join(group, now)
                results.append((member_id, instance_id, ErrorCode.NONE))
                continue
            if not member_id and instance_id is not None:
                member_id = group.static_members.get(instance_id, "")
            error = group.validate_member(member_id, instance_id)
            if not error:
                self._remove_members(group, [group.members[member_id]], "left", now)
            results.append((member_id, instance_id, error))
        return ErrorCode.NONE, results

    # offsets ---------------------------------------------------------------------------

    def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None,
                       generation: int, commits: list[OffsetCommit],
                       retention_ms: int = -1) -> dict[tuple[str, int], ErrorCode]:
        """Commit and apply at once, for tests of the protocol: where written is
        committed (one node). OffsetCommit goes through ``commit_offsets_async``."""
        results, pending = self._commit(group_id, member_id, group_instance_id, generation,
                                        commits, retention_ms)
        if pending is not None:
            pending.group.offsets.update(pending.accepted)
            results.update(dict.fromkeys(pending.accepted, ErrorCode.NONE))
        return {(c.topic, c.partition): results[(c.topic, c.partition)] for c in commits}

    async def commit_offsets_async(self, group_id: str, member_id: str,
                                   group_instance_id: str | None, generation: int,
                                   commits: list[OffsetCommit], retention_ms: int = -1
                                   ) -> dict[tuple[str, int], ErrorCode]:
        """OffsetCommit: answered once the ISR has the commit (at once where the ISR is
        this broker alone); the offsets are applied then, and only if it has."""
        results, pending = self._commit(group_id, member_id, group_instance_id, generation,
                                        commits, retention_ms)
        if pending is not None:
            written = pending.written
            error = ErrorCode.NONE if written is None or written.committed() \
                else await self._replication(written)
            if not error and self.groups.get(group_id) is pending.group:
                pending.group.offsets.update(pending.accepted)
            results.update(dict.fromkeys(pending.accepted, error))
        return {(c.topic, c.partition): results[(c.topic, c.partition)] for c in commits}

    def _commit(self, group_id: str, member_id: str, group_instance_id: str | None,
                generation: int, commits: list[OffsetCommit], retention_ms: int
                ) -> tuple[dict[tuple[str, int], ErrorCode], _PendingCommit | None]:
        """Validate and write a commit: the errors of the partitions refused, and the
        written ones to apply (None when none was)."""
        now = self.now_ms()
        keys = [(c.topic, c.partition) for c in commits]
        error = self.coordinator_error(group_id)
        if error:
            return dict.fromkeys(keys, error), None
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0:  # a member of a group this coordinator does not know
                return dict.fromkeys(keys, ErrorCode.ILLEGAL_GENERATION), None
            group = self.groups[group_id] = Group(group_id, now)  # offsets-only group
        error = self._validate_commit(group, member_id, group_instance_id, generation)
        if error:
            return dict.fromkeys(keys, error), None
        member = group.members.get(member_id)
        if member is not None:  # a commit proves the member is alive, as a heartbeat does
            member.heartbeat_deadline = now + member.session_timeout_ms
            self._schedule(group, member.heartbeat_deadline)
        results: dict[tuple[str, int], ErrorCode] = {}
        accepted: dict[tuple[str, int], OffsetAndMetadata] = {}
        for c in commits:
            key = (c.topic, c.partition)
            metadata = c.metadata or ""
            if len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                results[key] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            elif self._partition_exists is not None \
                    and not self._partition_exists(c.topic, c.partition):
                results[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                accepted[key] = OffsetAndMetadata(
                    c.offset, c.leader_epoch, metadata,
                    c.commit_timestamp if c.commit_timestamp >= 0 else now,
                    now + retention_ms if retention_ms >= 0 else -1)
        if not accepted:
            return results, None
        try:
            written = self._append(group_id, [(records.offset_key(group_id, t, p),
                                               records.offset_value(o))
                                              for (t, p), o in accepted.items()], now)
        except KafkaError as exc:
            results.update(dict.fromkeys(accepted, _store_error(exc)))
            return results, None
        return results, _PendingCommit(group, accepted, written)

    @staticmethod
    def _validate_commit(group: Group, member_id: str, instance_id: str | None,
                         generation: int) -> ErrorCode:
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.is_in(GroupState.EMPTY):
            return ErrorCode.NONE  # admin client or a consumer assigning partitions itself
        if generation >= 0 or member_id or instance_id is not None:
            error = group.validate_member(member_id, instance_id)
            if error:
                return error
            if generation != group.generation:
                return ErrorCode.ILLEGAL_GENERATION
        else:
            return ErrorCode.UNKNOWN_MEMBER_ID  # anonymous commit into an active group
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> dict[tuple[str, int], OffsetAndMetadata | None]:
        """Committed offsets; ``partitions`` None means all the group has. The caller
        checks ``coordinator_error`` first (the error's place depends on the version)."""
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        if partitions is None:
            return dict(offsets)
        return {tp: offsets.get(tp) for tp in partitions}

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                       ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        error = self.coordinator_error(group_id)
        if error:
            return error, {}
        now = self.now_ms()
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        subscribed: set[str] = set()
        if not group.is_in(GroupState.EMPTY):
            topics = group.subscribed_topics()
            if topics is None:
                return ErrorCode.NON_EMPTY_GROUP, {}
            subscribed = topics
        results = {tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if tp[0] in subscribed
                   else ErrorCode.NONE for tp in partitions}
        doomed = [tp for tp, err in results.items() if not err and tp in group.offsets]
        try:
            self._append(group_id, [(records.offset_key(group_id, t, p), None)
                                    for t, p in doomed], now)
        except KafkaError as exc:
            return _store_error(exc), {}
        for tp in doomed:
            del group.offsets[tp]
        return ErrorCode.NONE, results

    def expire_offsets(self, now: int | None = None) -> int:
        """Drop offsets past ``offsets.retention``: all of an Empty group's once it has been
        empty that long, a standalone group's by commit time, a Stable consumer group's for
        topics it no longer subscribes to. Empty groups with no offsets left disappear."""
        now = self.now_ms() if now is None else now
        retention = self.config.offsets_retention_ms
        expired_total = 0
        for group in list(self.groups.values()):
            if group.is_in(GroupState.DEAD):
                continue
            skip: set[str] = set()
            since_empty = False  # measure from the time the group emptied, not the commit
            if group.is_in(GroupState.EMPTY) and group.protocol_type is not None:
                since_empty = True
            elif group.protocol_type is None:
                pass
            elif group.is_in(GroupState.STABLE) and group.subscribed_topics() is not None:
                skip = group.subscribed_topics() or set()
            else:
                continue
            expired = [tp for tp, o in group.offsets.items() if tp[0] not in skip and (
                now >= o.expire_timestamp if o.expire_timestamp >= 0 else
                now - (group.state_timestamp if since_empty else o.commit_timestamp)
                >= retention)]
            tombstones: list[tuple[bytes, bytes | None]] = [
                (records.offset_key(group.group_id, t, p), None) for t, p in expired]
            empty_now = group.is_in(GroupState.EMPTY) and len(expired) == len(group.offsets) \
                and not group.pending_members
            if empty_now:
                tombstones.append((records.group_key(group.group_id), None))
            try:
                self._append(group.group_id, tombstones, now)
            except KafkaError as exc:
                log.warning("group %s: expiring offsets failed: %s", group.group_id, exc)
                continue
            for tp in expired:
                del group.offsets[tp]
            expired_total += len(expired)
            if empty_now:
                group.transition_to(GroupState.DEAD, now)
                del self.groups[group.group_id]
        if expired_total:
            log.info("expired %d committed offsets", expired_total)
        return expired_total

    # admin -----------------------------------------------------------------------------

    def describe_group(self, group_id: str) -> GroupDescription:
        error = self.coordinator_error(group_id)
        if error:
            return GroupDescription(error, group_id, "", "", "", [])
        group = self.groups.get(group_id)
        if group is None:
            return GroupDescription(ErrorCode.NONE, group_id, GroupState.DEAD.value, "", "", [])
        stable = group.is_in(GroupState.STABLE)
        protocol = (group.protocol_name or "") if stable else ""
        members = [MemberDescription(m.member_id, m.group_instance_id, m.client_id,
                                     m.client_host,
                                     m.metadata(protocol) if stable else b"",
                                     m.assignment if stable else b"")
                   for m in group.members.values()]
        return GroupDescription(ErrorCode.NONE, group_id, group.state.value,
                                group.protocol_type or "", protocol, members)

    def list_groups(self, states: Iterable[str] | None = None,
                    types: Iterable[str] | None = None) -> list[tuple[str, str, str]]:
        """``(group_id, protocol_type, state)``; filters match case-insensitively."""
        wanted_states = {s.lower() for s in states or ()}
        wanted_types = {t.lower() for t in types or ()}
        if wanted_types and "classic" not in wanted_types:
            return []
        return [(g.group_id, g.protocol_type or "", g.state.value)
                for g in self.groups.values()
                if not g.is_in(GroupState.DEAD)
                and (not wanted_states or g.state.value.lower() in wanted_states)]

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        now = self.now_ms()
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if not group_id:
                results[group_id] = ErrorCode.INVALID_GROUP_ID
            elif self.coordinator_error(group_id):
                results[group_id] = self.coordinator_error(group_id)
            elif group is None or group.is_in(GroupState.DEAD):
                results[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif not group.is_in(GroupState.EMPTY):
                results[group_id] = ErrorCode.NON_EMPTY_GROUP
            else:
                tombstones: list[tuple[bytes, bytes | None]] = [
                    (records.offset_key(group_id, t, p), None) for t, p in group.offsets]
                tombstones.append((records.group_key(group_id), None))
                try:
                    self._append(group_id, tombstones, now)
                except KafkaError as exc:
                    results[group_id] = _store_error(exc)
                    continue
                group.transition_to(GroupState.DEAD, now)
                del self.groups[group_id]
                results[group_id] = ErrorCode.NONE
        return results

    # persistence -----------------------------------------------------------------------

    def _append(self, group_id: str, batch: list[tuple[bytes, bytes | None]],
                now: int) -> records.Written | None:
        """Write one group's records; where they went, for ``_replication`` (None when
        nothing was written)."""
        if self._store is not None and batch:
            return self._store.append(group_id, batch, now)
        return None

    async def _replication(self, written: records.Written) -> ErrorCode:
        """Wait until the ISR has a write, and say what the client is told if it did
        not get it (Kafka's mapping)."""
        code = await written.partition.wait_for_high_watermark(
            written.end_offset, self.config.offsets_commit_timeout_ms / 1000)
        return _replication_error(code)

    def _store_group(self, group: Group, now: int) -> records.Written | None:
        protocol = group.protocol_name
        record = records.GroupRecord(
            group.protocol_type or "", group.generation, protocol, group.leader_id,
            group.state_timestamp,
            [records.MemberRecord(m.member_id, m.group_instance_id, m.client_id,
                                  m.client_host, m.rebalance_timeout_ms, m.session_timeout_ms,
                                  m.metadata(protocol or ""), m.assignment)
             for m in group.members.values()])
        return self._append(group.group_id, [(records.group_key(group.group_id),
                                              records.group_value(record))], now)

    def _store_group_or_log(self, group: Group, now: int) -> None:
        try:
            self._store_group(group, now)
        except KafkaError as exc:
            log.warning("group %s: storing metadata failed: %s", group.group_id, exc)


def _latest_values(latest: dict[bytes, bytes | None], batch: list[Record]) -> int:
    """Keep the last value of each key of a batch of records; returns the record count."""
    for record in batch:
        if record.key is not None:  # not ours: a coordinator record always has a key
            latest[record.key] = record.value
    return len(batch)


def _store_error(exc: KafkaError) -> ErrorCode:
    """What a client is told when ``__consumer_offsets`` refused a write (Kafka's mapping)."""
    if exc.code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
                    ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:  # leadership moved
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE


def _replication_error(code: int) -> ErrorCode:
    """What a client is told when a written record did not reach the ISR (Kafka's
    mapping: the coordinator is unavailable for now, or is not this broker any more)."""
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code == ErrorCode.NONE:
        return ErrorCode.NONE
    return ErrorCode.COORDINATOR_NOT_AVAILABLE  # NOT_ENOUGH_REPLICAS*, REQUEST_TIMED_OUT


def _answered(result: T) -> asyncio.Future[T]:
    """A request answered without parking: a future that is already done."""
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    future.set_result(result)
    return future

"""The group coordinator: classic consumer groups and their committed offsets, the one
object the request handlers (pybroker/broker/handlers/groups.py) and the control plane
(pybroker/metadata/) talk to.

It is three parts over one map of groups, each in its own module:

- ``Membership`` (membership.py): JoinGroup, SyncGroup, Heartbeat, LeaveGroup, their
  timers and the group state machine;
- ``CommittedOffsets`` (offsets.py): OffsetCommit, OffsetFetch, OffsetDelete, expiry and
  group deletion, with the tombstones that let the log cleaner compact
  ``__consumer_offsets``; TxnOffsetCommit's commits pending until the producer's marker
  (txn_offsets.py, ``complete_transaction``);
- ``OffsetsPartitions`` (offsets_partitions.py): which ``__consumer_offsets`` partitions
  this broker leads, their groups loaded through the log's sliced replay when it becomes
  leader and unloaded when it stops.

Here each request is routed: a group whose partition is led elsewhere gets
NOT_COORDINATOR (its clients ask FindCoordinator again), one whose partition is loading
the answer Kafka gives while it loads, which differs per API; every other request goes to
the part that owns it. While the broker shuts down, parked JoinGroup/SyncGroup calls are
answered NOT_COORDINATOR and no new one parks. One task wakes every ``TICK_S`` to run the
membership timers and, every ``offsets.retention.check.interval.ms``, the expiry; tests
drive ``poll(now)`` with their own clock instead.

Records go to ``__consumer_offsets`` (``CoordinatorLog``, over the control plane's
``InternalTopic``) before the request that caused them is answered, in Kafka's layouts;
the topic is compacted by the log cleaner on every replica, like any compacted topic.

The semantics follow Kafka's classic ``GroupCoordinator``; departures are noted where
they are made. Not thread-safe: every method runs on the broker's event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING

from pybroker.coordinator import internal_topic
from pybroker.coordinator.background import BackgroundTasks
from pybroker.coordinator.config import CoordinatorConfig
from pybroker.coordinator.group import Group, GroupState, OffsetAndMetadata
from pybroker.coordinator.membership import (
    GroupDescription,
    JoinResult,
    Membership,
    SyncResult,
    answered,
)
from pybroker.coordinator.offsets import CommittedOffsets, OffsetCommit
from pybroker.coordinator.offsets_partitions import OffsetsPartitions
from pybroker.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from pybroker.broker.partition import Partition

log = logging.getLogger("pybroker.coordinator")

TICK_S = 0.1  # timer resolution; session timeouts are seconds, so 100 ms is plenty


class GroupCoordinator:
    def __init__(self, offsets_topic: internal_topic.InternalTopic | None = None,
                 config: CoordinatorConfig | None = None,
                 clock: Callable[[], float] = time.time,
                 partition_exists: Callable[[str, int], bool] | None = None) -> None:
        """``offsets_topic``: ``__consumer_offsets`` as the control plane has it (None
        keeps everything in memory, for tests of the protocol alone);
        ``partition_exists`` vets committed partitions."""
        self._closing = False  # shutdown began: long polls are answered, none parks
        self.config = config = config or CoordinatorConfig()
        self._clock = clock
        self._store = internal_topic.CoordinatorLog(
            offsets_topic, config.offsets_topic_num_partitions, config.offsets_commit_timeout_ms)
        self._background = BackgroundTasks()  # the timer loop, replication waits, loads
        self.groups: dict[str, Group] = {}
        self.membership = Membership(self.groups, self._store, config, self.now_ms,
                                     self._spawn)
        self.offsets = CommittedOffsets(self.groups, self._store, config, partition_exists)
        self.partitions = OffsetsPartitions(self.groups, self._store, self.membership,
                                            self.now_ms, self._spawn, self.offsets.pending)
        self._next_expiry = 0

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    # lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the timers (the groups load as leadership comes: ``OffsetsPartitions``)."""
        self._next_expiry = self.now_ms() + self.config.offsets_retention_check_interval_ms
        self._spawn(self._run(), name="groups")

    async def stop(self) -> None:
        self._closing = True
        await self._background.cancel_all()
        self.release_waiters()

    def begin_shutdown(self) -> None:
        """The broker is stopping: answer the parked long polls and park no more."""
        self._closing = True
        self.release_waiters()

    def release_waiters(self) -> None:
        """Answer every parked JoinGroup/SyncGroup with NOT_COORDINATOR: this coordinator is
        going away, the clients find it again (after a restart) and rejoin."""
        for group in self.groups.values():
            self.membership.release(group)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self.poll()
            except Exception:  # a bug in one group must not stop every timer
                log.exception("group timers")

    def poll(self, now: int | None = None) -> None:
        """Run everything due at ``now`` (ms): expirations, rebalance deadlines, retention."""
        now = self.now_ms() if now is None else now
        self.membership.poll(now)
        if self._next_expiry and now >= self._next_expiry:
            self._next_expiry = now + self.config.offsets_retention_check_interval_ms
            self.expire_offsets(now)

    def _spawn(self, coro: Coroutine[object, object, None], name: str | None = None
               ) -> asyncio.Task[None]:
        return self._background.spawn(coro, name)

    # leadership of the offsets partitions (offsets_partitions.py) ----------------------

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition of a group."""
        return self._store.partition_for(group_id)

    def lead_every_partition(self) -> None:
        """Where leadership never moves (one node): every group is coordinated here, the
        existing offsets partitions load in slices from now on."""
        self.partitions.lead_every_partition(self._store.led_partitions())

    def follow_leadership(self, subscribe: Callable[[Callable[[Partition, bool], None]], None]
                          ) -> None:
        """Where leadership moves (a cluster): coordinate only the groups of the offsets
        partitions ``subscribe``'s listener (``leadership_changed``) says are led here."""
        self.partitions.follow_leadership()
        subscribe(self.leadership_changed)

    def leadership_changed(self, partition: Partition, is_leader: bool) -> None:
        """The broker's ``on_leadership_change`` listener (no loads once shutting down)."""
        if not (is_leader and self._closing):
            self.partitions.leadership_changed(partition, is_leader)

    def coordinator_error(self, group_id: str) -> ErrorCode:
        """NONE when this broker coordinates ``group_id`` now; NOT_COORDINATOR when
        another does, COORDINATOR_LOAD_IN_PROGRESS while its partition loads."""
        return self.partitions.coordinator_error(group_id)

    def loading(self) -> bool:
        """Whether a partition's groups are still loading (ListGroups says so)."""
        return self.partitions.loading()

    # membership (membership.py) --------------------------------------------------------

    def join_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                   client_id: str, client_host: str, session_timeout_ms: int,
                   rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]],
                   require_known_member_id: bool = True) -> asyncio.Future[JoinResult]:
        """The future of the member's answer: done at once, or parked until the rebalance
        completes (``Membership.join_group``)."""
        if self._closing:
            return answered(JoinResult(ErrorCode.NOT_COORDINATOR, member_id))
        if not group_id:
            return answered(JoinResult(ErrorCode.INVALID_GROUP_ID, member_id))
        error = self.coordinator_error(group_id)
        if error:
            return answered(JoinResult(error, member_id))
        return self.membership.join_group(
            group_id, member_id, group_instance_id, client_id, client_host,
            session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols,
            require_known_member_id)

    def sync_group(self, group_id: str, generation: int, member_id: str,
                   group_instance_id: str | None, protocol_type: str | None,
                   protocol_name: str | None,
                   assignments: dict[str, bytes]) -> asyncio.Future[SyncResult]:
        """The future of the member's answer: done at once, or parked until the leader's
        assignment is stored (``Membership.sync_group``)."""
        if self._closing:
            return answered(SyncResult(ErrorCode.NOT_COORDINATOR))
        error = self.coordinator_error(group_id)
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # Kafka's answer: the rebalance in progress was lost with the old coordinator,
            # and older clients do not know the loading error; they rejoin.
            return answered(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        if error:
            return answered(SyncResult(error))
        return self.membership.sync_group(group_id, generation, member_id, group_instance_id,
                                          protocol_type, protocol_name, assignments)

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None,
                  generation: int) -> ErrorCode:
        error = self.coordinator_error(group_id)
        if error:
            # Kafka answers a heartbeat blindly while the group loads
            return ErrorCode.NONE if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else error
        return self.membership.heartbeat(group_id, member_id, group_instance_id, generation)

    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]
                    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """``leaving`` is ``(member_id, group_instance_id)``; a static member may be named
        by its instance id alone (member id ""). Returns the group error and one per member."""
        error = self.coordinator_error(group_id)
        if error:
            return error, []
        return self.membership.leave_group(group_id, leaving)

    def describe_group(self, group_id: str) -> GroupDescription:
        error = self.coordinator_error(group_id)
        if error:
            return GroupDescription(error, group_id, "", "", "", [])
        return self.membership.describe_group(group_id)

    # committed offsets (offsets.py) ----------------------------------------------------

    async def commit_offsets_async(self, group_id: str, member_id: str,
                                   group_instance_id: str | None, generation: int,
                                   commits: list[OffsetCommit], retention_ms: int = -1
                                   ) -> dict[tuple[str, int], ErrorCode]:
        """OffsetCommit: answered once the ISR has the commit (at once, without
        suspending, where the ISR is this broker alone); applied only if it has."""
        group, error = self._admit_commit(group_id, member_id, group_instance_id, generation)
        if group is None:
            return {(c.topic, c.partition): error for c in commits}
        return await self.offsets.commit(group, commits, retention_ms, self.now_ms())

    def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None,
                       generation: int, commits: list[OffsetCommit],
                       retention_ms: int = -1) -> dict[tuple[str, int], ErrorCode]:
        """Commit and apply at once, for tests of the protocol: where written is
        committed (one node). OffsetCommit goes through ``commit_offsets_async``."""
        group, error = self._admit_commit(group_id, member_id, group_instance_id, generation)
        if group is None:
            return {(c.topic, c.partition): error for c in commits}
        return self.offsets.commit_now(group, commits, retention_ms, self.now_ms())

    async def commit_transactional_offsets(
            self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
            group_instance_id: str | None, generation: int, commits: list[OffsetCommit]
    ) -> dict[tuple[str, int], ErrorCode]:
        """TxnOffsetCommit: the commits written in the producer's transaction, answered
        once the ISR has them; the group's offsets only once the producer's COMMIT
        marker is written to the group's offsets partition (``complete_transaction``).
        Whether the transaction may write there is the transaction coordinator's check."""
        if not group_id:
            return {(c.topic, c.partition): ErrorCode.INVALID_GROUP_ID for c in commits}
        group, error = self._admit_commit(group_id, member_id, group_instance_id, generation,
                                          transactional=True)
        if group is None:
            return {(c.topic, c.partition): error for c in commits}
        return await self.offsets.commit_transactional(group, producer_id, producer_epoch,
                                                       commits, self.now_ms())

    def complete_transaction(self, offsets_partition: int, producer_id: int,
                             commit: bool) -> None:
        """A marker of ``producer_id`` was written to ``__consumer_offsets`` partition
        ``offsets_partition`` and replicated (the marker append calls this): the
        producer's transactional commits there become their groups' committed offsets
        (``commit``) or are dropped."""
        self.offsets.complete_transaction(offsets_partition, producer_id, commit,
                                          self.now_ms())

    def offsets_partition_error(self, offsets_partition: int) -> ErrorCode:
        """``coordinator_error`` for the groups of an offsets partition: NONE when they are
        coordinated here now (a marker may be written there)."""
        return self.partitions.coordinator_error_of(offsets_partition)

    def unstable_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                         ) -> set[tuple[str, int]]:
        """Which ``partitions`` of the group have a transactional commit pending (KIP-447:
        OffsetFetch with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for them)."""
        return self.offsets.unstable(group_id, partitions)

    def _admit_commit(self, group_id: str, member_id: str, instance_id: str | None,
                      generation: int, transactional: bool = False
                      ) -> tuple[Group | None, ErrorCode]:
        error = self.coordinator_error(group_id)
        if error:
            return None, error
        return self.membership.admit_commit(group_id, member_id, instance_id, generation,
                                            self.now_ms(), transactional)

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> dict[tuple[str, int], OffsetAndMetadata | None]:
        """Committed offsets; ``partitions`` None means all the group has. The caller
        checks ``coordinator_error`` first (the error's place depends on the version)."""
        return self.offsets.fetch(group_id, partitions)

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                       ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        error = self.coordinator_error(group_id)
        if error:
            return error, {}
        return self.offsets.delete(group_id, partitions, self.now_ms())

    def expire_offsets(self, now: int | None = None) -> int:
        """Drop offsets past ``offsets.retention`` (``CommittedOffsets.expire``)."""
        return self.offsets.expire(self.now_ms() if now is None else now)

    def topics_deleted(self, names: list[str]) -> None:
        """Topics were deleted: their committed offsets go, with tombstones, from the groups
        coordinated here (Kafka's ``onPartitionsDeleted``; the control plane calls it)."""
        self.offsets.topics_deleted(set(names), self.now_ms())

    # admin -----------------------------------------------------------------------------

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
                try:
                    self.offsets.remove_group(group, now)
                except KafkaError as exc:
                    results[group_id] = internal_topic.store_error(exc)
                    continue
                results[group_id] = ErrorCode.NONE
        return results

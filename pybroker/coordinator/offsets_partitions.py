"""The ``__consumer_offsets`` partitions this broker leads, followed: a partition's
groups load when this broker becomes its leader and unload when it stops leading (Kafka's
``CoordinatorRuntime`` scheduling loads and unloads of its shards).

As Kafka, this broker coordinates the groups whose offsets partition it leads, and its
control plane (pybroker/metadata/) says which those are, in one of two ways. Where
leadership never moves (one node), ``lead_every_partition`` says every partition is led
here for good: the existing ones load, and one created later is new and empty, so its
groups are coordinated here at once. Where it moves (a cluster), ``leadership_changed``
(the broker's ``on_leadership_change`` listener) says which partition this broker now
leads or no longer leads; a partition it was told nothing of is led elsewhere.

A load replays the partition's log up to its end of the moment the load starts, through
the log's ``replay_in_slices`` (pybroker/log/state_machine.py): at most ``LOAD_SLICE_S``
of loop time at a time, so a large offsets topic never holds the event loop, at start-up
or at a failover. Transactional offset commits wait for their producer's marker in the
replay and are then applied or dropped, in log order (txn_offsets.py ``OffsetsReplay``);
those whose transaction is still open are installed pending. Only the last value of each
key matters (the log cleaner may already
have removed the older ones): the raw bytes of the last one are kept per key, and only
those are parsed and built into groups, ``_INSTALL_STEP`` at a time. Requests for those
groups get COORDINATOR_LOAD_IN_PROGRESS meanwhile, and the partitions load one at a time,
so the loop is never held longer than one slice however many this broker takes over at
once. Unloading answers the groups' parked joins and syncs with NOT_COORDINATOR and drops
their state; their clients ask FindCoordinator again.

Not thread-safe: every method runs on the broker's event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import TYPE_CHECKING

from pybroker.coordinator import offset_store as records
from pybroker.coordinator.group import Group, GroupState, OffsetAndMetadata
from pybroker.coordinator.membership import Membership
from pybroker.coordinator.txn_offsets import OffsetsReplay, PendingOffsets
from pybroker.errors import ErrorCode, KafkaError
from pybroker.log.state_machine import replay_in_slices

if TYPE_CHECKING:
    from pybroker.broker.partition import Partition

log = logging.getLogger("pybroker.coordinator")

# A partition's load gives the loop back after this much work: requests of the groups
# this broker already coordinates wait at most this long behind a big partition's replay.
LOAD_SLICE_S = 0.005
_INSTALL_STEP = 256  # keys parsed (groups built) between looks at the slice's clock


class _Led:
    """An offsets partition this broker was told it leads: loading, then loaded."""

    __slots__ = ("partition", "loading", "task")

    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self.loading = True
        self.task: asyncio.Task[None] | None = None


class OffsetsPartitions:
    """See module doc. ``groups`` is the coordinator's: loads fill it, unloads empty it;
    ``pending`` (``CommittedOffsets.pending``) likewise with the transactional commits
    still open; ``membership`` restores a loaded group's members; ``spawn`` runs a load
    as a background task the coordinator cancels when it stops."""

    def __init__(self, groups: dict[str, Group], store: records.OffsetStore,
                 membership: Membership, now_ms: Callable[[], int],
                 spawn: Callable[[Coroutine[object, object, None]], asyncio.Task[None]],
                 pending: dict[int, PendingOffsets[records.OffsetKey, OffsetAndMetadata]]
                 ) -> None:
        self.groups = groups
        self._pending = pending
        self._store = store
        self._membership = membership
        self._now_ms = now_ms
        self._spawn = spawn
        self._led: dict[int, _Led] = {}
        # the answer for a partition this broker was told nothing of: coordinated here
        # (every partition is led here, or there is no offsets topic), or, once this
        # broker follows leadership, led elsewhere
        self._untold = ErrorCode.NONE
        self._load_lock = asyncio.Lock()

    def lead_every_partition(self) -> None:
        """Every offsets partition is led here from now on: load the existing ones."""
        for partition in self._store.led_partitions():
            self.leadership_changed(partition, True)

    def follow_leadership(self) -> None:
        """Only the partitions ``leadership_changed`` says are led here are, from now on."""
        self._untold = ErrorCode.NOT_COORDINATOR

    def leadership_changed(self, partition: Partition, is_leader: bool) -> None:
        """The broker's ``on_leadership_change`` listener: load the groups of an offsets
        partition this broker now leads, unload those of one it no longer leads. Being
        told leader again (a new leader epoch) keeps what is loaded: this broker was the
        partition's only writer all along, or it would have been told follower between."""
        if partition.topic != records.OFFSETS_TOPIC:
            return
        index = partition.index
        if is_leader:
            if index in self._led:
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
        loaded = count = -1
        if replayed is not None:
            count = replayed.count
            self._install_pending(index, replayed.pending)
            slice_end = time.monotonic() + LOAD_SLICE_S
            for loaded in self._install(replayed.latest):
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
        elif self._led.get(index) is led:
            # Not the leader any more, or the log would not read: its groups answer
            # NOT_COORDINATOR (their clients look for the coordinator again), not a load
            # that would never end; what was installed goes.
            del self._led[index]
            self._unload(index)

    async def _replay(self, index: int, led: _Led) -> OffsetsReplay | None:
        """The partition read back (the last value of each key, the transactional commits
        still pending); None when this broker stopped leading it meanwhile."""
        if not self._still_led(index, led):
            return None
        replay = OffsetsReplay(led.partition.log.log_start_offset)
        reached = await replay_in_slices(led.partition.log, replay.start, replay.add,
                                         lambda: self._still_led(index, led), LOAD_SLICE_S)
        return None if reached is None else replay

    def _still_led(self, index: int, led: _Led) -> bool:
        return led.partition.is_leader and self._led.get(index) is led

    def _unload(self, index: int) -> None:
        """Drop the groups of an offsets partition this broker no longer leads."""
        now = self._now_ms()
        self._pending.pop(index, None)
        gone = [g for g in self.groups.values()
                if self._store.partition_for(g.group_id) == index]
        for group in gone:
            self._membership.release(group)
            group.transition_to(GroupState.DEAD, now)  # writes in flight see it is gone
            del self.groups[group.group_id]
        log.info("%s-%d: not the leader any more, %d groups unloaded", records.OFFSETS_TOPIC,
                 index, len(gone))

    def coordinator_error(self, group_id: str) -> ErrorCode:
        """NONE when this broker coordinates ``group_id`` now; NOT_COORDINATOR when
        another does, COORDINATOR_LOAD_IN_PROGRESS while its partition loads."""
        return self.coordinator_error_of(self._store.partition_for(group_id))

    def coordinator_error_of(self, partition: int) -> ErrorCode:
        """``coordinator_error`` for the groups of an offsets partition."""
        led = self._led.get(partition)
        if led is None:
            return self._untold
        if not led.partition.is_leader:  # a follower already, not yet told
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if led.loading else ErrorCode.NONE

    def loading(self) -> bool:
        """Whether a partition's groups are still loading (ListGroups says so)."""
        return any(led.loading for led in self._led.values())

    def _install_pending(self, index: int, replayed: PendingOffsets[bytes, bytes | None]
                         ) -> None:
        """The transactional commits the replay found still waiting for their marker."""
        pending: PendingOffsets[records.OffsetKey, OffsetAndMetadata] = PendingOffsets()
        for producer_id, raw_key, write in replayed.items():
            try:
                key = records.parse_key(raw_key)
                if isinstance(key, records.OffsetKey) and write.value is not None:
                    pending.write(producer_id, key, records.parse_offset_value(write.value),
                                  write.record_offset)
                    pending.committed(key, replayed.committed_at(raw_key))
            except (KafkaError, UnicodeDecodeError) as exc:
                log.warning("%s: skipping unreadable record: %s", records.OFFSETS_TOPIC, exc)
        if pending:
            self._pending[index] = pending

    def _install(self, latest: dict[bytes, bytes | None]) -> Iterator[int]:
        """Build the groups of the last value of each key, yielding the groups built so
        far every ``_INSTALL_STEP`` keys and groups (the cluster load pauses there)."""
        now = self._now_ms()
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
                self._membership.restore(group, record, now)
            self.groups[group_id] = group
            loaded += 1
            if loaded % _INSTALL_STEP == 0:
                yield loaded
        yield loaded

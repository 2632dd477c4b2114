"""The ``__consumer_offsets`` partitions this broker leads: as Kafka, this broker
coordinates the groups whose offsets partition it leads. When a partition's groups load
and unload is ``LedPartitions``' business (led_partitions.py); here is what they are.

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

from pybroker.coordinator import internal_topic
from pybroker.coordinator import offset_store as records
from pybroker.coordinator.group import Group, GroupState, OffsetAndMetadata
from pybroker.coordinator.led_partitions import LedPartition, LedPartitions
from pybroker.coordinator.membership import Membership
from pybroker.coordinator.txn_offsets import OffsetsReplay, PendingOffsets
from pybroker.errors import ErrorCode, KafkaError
from pybroker.log.state_machine import replay_in_slices

log = logging.getLogger("pybroker.coordinator")

# A partition's load gives the loop back after this much work: requests of the groups
# this broker already coordinates wait at most this long behind a big partition's replay.
LOAD_SLICE_S = 0.005
_INSTALL_STEP = 256  # keys parsed (groups built) between looks at the slice's clock


class OffsetsPartitions(LedPartitions):
    """See module doc. ``groups`` is the coordinator's: loads fill it, unloads empty it;
    ``pending`` (``CommittedOffsets.pending``) likewise with the transactional commits
    still open; ``membership`` restores a loaded group's members; ``spawn`` runs a load
    as a background task the coordinator cancels when it stops."""

    def __init__(self, groups: dict[str, Group], store: internal_topic.CoordinatorLog,
                 membership: Membership, now_ms: Callable[[], int],
                 spawn: Callable[[Coroutine[object, object, None]], asyncio.Task[None]],
                 pending: dict[int, PendingOffsets[records.OffsetKey, OffsetAndMetadata]]
                 ) -> None:
        super().__init__(records.OFFSETS_TOPIC, spawn)
        self.groups = groups
        self._pending = pending
        self._store = store
        self._membership = membership
        self._now_ms = now_ms

    async def _load(self, index: int, led: LedPartition) -> None:
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
            self.loaded(led)
            log.info("%s-%d: loaded %d groups from %d records in %.3f s",
                     records.OFFSETS_TOPIC, index, loaded, count, time.monotonic() - started)
        else:
            self.abandon(index, led)

    async def _replay(self, index: int, led: LedPartition) -> OffsetsReplay | None:
        """The partition read back (the last value of each key, the transactional commits
        still pending); None when this broker stopped leading it meanwhile."""
        if not self._still_led(index, led):
            return None
        replay = OffsetsReplay(led.partition.log.log_start_offset)
        reached = await replay_in_slices(led.partition.log, replay.start, replay.add,
                                         lambda: self._still_led(index, led), LOAD_SLICE_S)
        return None if reached is None else replay

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

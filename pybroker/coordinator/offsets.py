"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete and their expiry (Kafka's
``OffsetMetadataManager``).

The committed offsets of a group live in ``Group.offsets``, rebuilt from the last
``OffsetCommitValue`` of each key when the group's ``__consumer_offsets`` partition loads
(pybroker/coordinator/offsets_partitions.py). A commit is written to that partition
before it is answered and enters ``Group.offsets`` only once committed (the high
watermark passed it): where the ISR is this broker alone (one node) the answer comes
without suspending (``Written.committed``); otherwise it waits for the ISR
(``CoordinatorLog.replicated``), so OffsetFetch never shows an offset a failover could lose.

Removal writes a tombstone (a null value) for each key, where Kafka writes one: the
offsets DeleteOffsets names, offsets past ``offsets.retention``, the offsets of deleted
topics (``topics_deleted``, told by the control plane as Kafka's ``onPartitionsDeleted``
is), and every offset and the metadata of a group deleted (DeleteGroups) or emptied and
expired; the log cleaner then drops the key's older records. Tombstones are not waited for: a lost one is written
again by the next expiry pass, as Kafka does.

Transactional commits (TxnOffsetCommit) are written the same way as a transactional
batch of the producer's id and epoch, and wait in ``pending`` (one ``PendingOffsets`` per
offsets partition, txn_offsets.py) until the producer's marker is written to that
partition (``complete_transaction``, called by the marker append): committed, they become
the group's offsets unless a later write of the same key overtook them; aborted, they
are dropped. Committed commits and tombstones overtake the pending writes of their keys
below them in the log, so the live state is what a load replays.

Whether the member may commit at all (its generation, its id) is membership's decision
(``Membership.admit_commit``), taken before a commit gets here. Not thread-safe: every
method runs on the broker's event loop thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

from pybroker.coordinator import internal_topic
from pybroker.coordinator import offset_store as records
from pybroker.coordinator.config import CoordinatorConfig
from pybroker.coordinator.group import Group, GroupState, OffsetAndMetadata
from pybroker.coordinator.offset_store import OffsetKey
from pybroker.coordinator.txn_offsets import PendingOffsets
from pybroker.errors import ErrorCode, KafkaError

log = logging.getLogger("pybroker.coordinator")

TopicPartition = tuple[str, int]


class OffsetCommit(NamedTuple):
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_timestamp: int = -1


class _Pending(NamedTuple):
    """A commit written, to apply once committed."""

    group: Group
    accepted: dict[TopicPartition, OffsetAndMetadata]
    written: internal_topic.Written | None
    record_offsets: range  # where each accepted offset's record is, in order


class CommittedOffsets:
    """See module doc. ``groups`` is the coordinator's (shared with membership and the
    partition loads); ``partition_exists`` vets committed partitions (None: any)."""

    def __init__(self, groups: dict[str, Group], store: internal_topic.CoordinatorLog,
                 config: CoordinatorConfig,
                 partition_exists: Callable[[str, int], bool] | None) -> None:
        self.groups = groups
        self._store = store
        self.config = config
        self._partition_exists = partition_exists
        # offsets partition -> the transactional commits waiting for their marker there
        self.pending: dict[int, PendingOffsets[OffsetKey, OffsetAndMetadata]] = {}
        self._unwritten = 0  # record offsets stood in for when there is no offsets topic

    # OffsetCommit ----------------------------------------------------------------------

    async def commit(self, group: Group, commits: list[OffsetCommit], retention_ms: int,
                     now: int) -> dict[TopicPartition, ErrorCode]:
        """Write the commits and answer once the ISR has them (at once where the ISR is
        this broker alone); the offsets are applied then, and only if it has."""
        results, pending = self._write(group, commits, retention_ms, now)
        if pending is not None:
            written = pending.written
            error = ErrorCode.NONE if written is None or written.committed() \
                else await self._store.replicated(written)
            self._apply(pending, error, results)
        return {(c.topic, c.partition): results[(c.topic, c.partition)] for c in commits}

    def commit_now(self, group: Group, commits: list[OffsetCommit], retention_ms: int,
                   now: int) -> dict[TopicPartition, ErrorCode]:
        """``commit`` applied as soon as written, for tests of the protocol: where written
        is committed (one node)."""
        results, pending = self._write(group, commits, retention_ms, now)
        if pending is not None:
            self._apply(pending, ErrorCode.NONE, results)
        return {(c.topic, c.partition): results[(c.topic, c.partition)] for c in commits}

    async def commit_transactional(self, group: Group, producer_id: int, producer_epoch: int,
                                   commits: list[OffsetCommit], now: int
                                   ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: write the commits as a transactional batch of the producer
        and answer once the ISR has them; they are pending (for the producer's marker)
        from then on."""
        results, write = self._write(group, commits, -1, now, producer_id, producer_epoch)
        if write is not None:
            error = ErrorCode.NONE if write.written is None or write.written.committed() \
                else await self._store.replicated(write.written)
            if not error and self.groups.get(group.group_id) is group:
                pending = self.pending.setdefault(
                    self._store.partition_for(group.group_id), PendingOffsets())
                for ((topic, partition), offset), at in zip(
                        write.accepted.items(), write.record_offsets, strict=True):
                    pending.write(producer_id, OffsetKey(group.group_id, topic, partition),
                                  offset, at)
            results.update(dict.fromkeys(write.accepted, error))
        return {(c.topic, c.partition): results[(c.topic, c.partition)] for c in commits}

    def complete_transaction(self, offsets_partition: int, producer_id: int, commit: bool,
                             now: int) -> None:
        """The producer's marker was written to ``offsets_partition`` (and replicated):
        its pending commits there become their groups' offsets, or are dropped."""
        pending = self.pending.get(offsets_partition)
        if pending is None:
            return
        for key, offset in pending.end(producer_id, commit):
            group = self.groups.get(key.group)
            if group is None:  # known only by its pending offsets (a load found them so)
                group = self.groups[key.group] = Group(key.group, now)
            if not group.is_in(GroupState.DEAD):
                group.offsets[(key.topic, key.partition)] = offset
        if not pending:
            del self.pending[offsets_partition]

    def unstable(self, group_id: str, partitions: list[TopicPartition]) -> set[TopicPartition]:
        """The ``partitions`` of the group with a transactional commit pending (OffsetFetch
        with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for them)."""
        pending = self.pending.get(self._store.partition_for(group_id))
        if pending is None:
            return set()
        return {tp for tp in partitions if pending.is_pending(OffsetKey(group_id, *tp))}

    def _write(self, group: Group, commits: list[OffsetCommit], retention_ms: int, now: int,
               producer_id: int = -1, producer_epoch: int = -1
               ) -> tuple[dict[TopicPartition, ErrorCode], _Pending | None]:
        """Vet and write a commit (in the producer's transaction when ``producer_id`` is
        given): the errors of the partitions refused, and the written ones to apply (None
        when none was)."""
        results: dict[TopicPartition, ErrorCode] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
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
        group_id = group.group_id
        try:
            written = self._store.append(group_id, [(records.offset_key(group_id, t, p),
                                                     records.offset_value(o))
                                                    for (t, p), o in accepted.items()], now,
                                         producer_id, producer_epoch)
        except KafkaError as exc:
            results.update(dict.fromkeys(accepted, internal_topic.store_error(exc)))
            return results, None
        return results, _Pending(group, accepted, written,
                                 self._record_offsets(written, len(accepted)))

    def _apply(self, pending: _Pending, error: ErrorCode,
               results: dict[TopicPartition, ErrorCode]) -> None:
        """A written commit is committed (``error`` NONE) or not: the offsets enter the
        group if it is still the one coordinated here."""
        group = pending.group
        if not error and self.groups.get(group.group_id) is group:
            group.offsets.update(pending.accepted)
            transactional = self.pending.get(self._store.partition_for(group.group_id))
            if transactional:
                for (topic, partition), at in zip(pending.accepted, pending.record_offsets,
                                                  strict=True):
                    transactional.committed(OffsetKey(group.group_id, topic, partition), at)
        results.update(dict.fromkeys(pending.accepted, error))

    def _overtake(self, group_id: str, partitions: list[TopicPartition],
                  written: internal_topic.Written | None) -> None:
        """Tombstones of the group's ``partitions`` were written, after any pending
        transactional commit of them: those cannot become the offsets any more."""
        at = self._record_offsets(written, len(partitions))[-1:]
        transactional = self.pending.get(self._store.partition_for(group_id))
        if transactional and at:
            for topic, partition in partitions:
                transactional.committed(OffsetKey(group_id, topic, partition), at[0])

    def _record_offsets(self, written: internal_topic.Written | None, count: int) -> range:
        """Where the last ``count`` records written are in the offsets partition; with no
        offsets topic (nothing written), numbers in the order of the writes instead."""
        if written is not None:
            return range(written.end_offset - count, written.end_offset)
        self._unwritten += count
        return range(self._unwritten - count, self._unwritten)

    # OffsetFetch, OffsetDelete ---------------------------------------------------------

    def fetch(self, group_id: str, partitions: list[TopicPartition] | None
              ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """Committed offsets; ``partitions`` None means all the group has."""
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        if partitions is None:
            return dict(offsets)
        return {tp: offsets.get(tp) for tp in partitions}

    def delete(self, group_id: str, partitions: list[TopicPartition], now: int
               ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: not the offsets of topics the group's members subscribe to."""
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
            self._drop(group, doomed, now)
        except KafkaError as exc:
            return internal_topic.store_error(exc), {}
        return ErrorCode.NONE, results

    # removal ---------------------------------------------------------------------------

    def expire(self, now: int) -> int:
        """Drop offsets past ``offsets.retention``: all of an Empty group's once it has been
        empty that long, a standalone group's by commit time, a Stable consumer group's for
        topics it no longer subscribes to. Empty groups with no offsets left disappear."""
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
            unstable = self.unstable(group.group_id, list(group.offsets))  # kept, as Kafka
            expired = [tp for tp, o in group.offsets.items()
                       if tp[0] not in skip and tp not in unstable and (
                           now >= o.expire_timestamp if o.expire_timestamp >= 0 else
                           now - (group.state_timestamp if since_empty else o.commit_timestamp)
                           >= retention)]
            try:
                if group.is_in(GroupState.EMPTY) and len(expired) == len(group.offsets) \
                        and not group.pending_members:
                    self.remove_group(group, now)
                else:
                    self._drop(group, expired, now)
            except KafkaError as exc:
                log.warning("group %s: expiring offsets failed: %s", group.group_id, exc)
                continue
            expired_total += len(expired)
        if expired_total:
            log.info("expired %d committed offsets", expired_total)
        return expired_total

    def topics_deleted(self, names: set[str], now: int) -> int:
        """Drop every group's offsets of the topics ``names`` (deleted), pending
        transactional ones included (their tombstones overtake them); how many."""
        removed = 0
        for group in list(self.groups.values()):
            gone = [tp for tp in group.offsets if tp[0] in names]
            transactional = self.pending.get(self._store.partition_for(group.group_id))
            if transactional:
                gone += [(key.topic, key.partition) for key in transactional.keys()
                         if key.group == group.group_id and key.topic in names
                         and (key.topic, key.partition) not in group.offsets]
            if not gone or group.is_in(GroupState.DEAD):
                continue
            try:
                self._drop(group, gone, now)
            except KafkaError as exc:
                log.warning("group %s: dropping the offsets of deleted topics failed: %s",
                            group.group_id, exc)
                continue
            removed += len(gone)
        if removed:
            log.info("dropped %d committed offsets of deleted topics", removed)
        return removed

    def _drop(self, group: Group, partitions: list[TopicPartition], now: int) -> None:
        """Write a tombstone for each of the group's ``partitions``, then forget their
        offsets. Raises ``KafkaError`` (and keeps them) if the tombstones were refused."""
        written = self._store.append(
            group.group_id, [(records.offset_key(group.group_id, t, p), None)
                             for t, p in partitions], now)
        for tp in partitions:
            group.offsets.pop(tp, None)  # (only pending, for a deleted topic's)
        self._overtake(group.group_id, partitions, written)

    def remove_group(self, group: Group, now: int) -> None:
        """Delete an Empty group: tombstones for its offsets and its metadata, then it is
        Dead and gone. Raises ``KafkaError`` (and keeps the group) if they were refused."""
        group_id = group.group_id
        transactional = self.pending.get(self._store.partition_for(group_id))
        # the partitions of its pending transactional commits get tombstones too (Kafka's)
        partitions = list(dict.fromkeys([*group.offsets, *(
            (k.topic, k.partition) for k in (transactional.keys() if transactional else ())
            if k.group == group_id)]))
        tombstones: list[tuple[bytes, bytes | None]] = [
            (records.offset_key(group_id, t, p), None) for t, p in partitions]
        tombstones.append((records.group_key(group_id), None))
        self._overtake(group_id, partitions, self._store.append(group_id, tombstones, now))
        group.transition_to(GroupState.DEAD, now)
        del self.groups[group_id]

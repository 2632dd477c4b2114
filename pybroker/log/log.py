"""One partition's log: segments on disk, offsets, reads as file regions, retention.

Directory ``<data_dir>/<topic>-<partition>`` holds the segments (log_segment.py, with
their aborted-transaction indexes: transaction_index.py),
``leader-epoch-checkpoint`` and the state machines' snapshots (``<offset>.snapshot``, the
idempotent producers' state: state_machine.py, producer_state.py). Offsets kept apart
(STYLE 20, Redpanda's offset_tracker):

- ``log_end_offset``: the next offset to assign; everything below it is written.
- ``recovery_point``: everything below it is flushed (fsynced); an unclean restart
  scans only the segments from here on.
- ``high_watermark``: everything below it is committed; consumers read up to it. A
  plain settable field: replication moves it, a single node sets it to the end offset.
- ``log_start_offset``: the first offset still readable (retention, DeleteRecords).
- ``last_stable_offset``: the high watermark, or below it the first offset of the earliest
  transaction still open (the producer state's): ``read_committed`` consumers read up to
  it.

Appends have one write path (checks and roll, offsets stamped natively, one write
through the segment's Appender, maybe one index entry), completed two ways: ``append``
writes inline, ``append_async`` awaits the write (the loop serves other requests while
the kernel copies a large batch). A leader's append does not choose between them:
``Partition.append`` is its one entry point, decides, and keeps the partition's appends in
arrival order, so they never interleave. ``append_as_follower`` writes a leader's batches
as they are (offsets and epochs included), through the same segment write. Per fetch
Python does a fixed amount of work per segment touched (native index lookups and header
walks). Nothing here loops over records, and recovery is one native scan per segment.

Transactions: the producer state opens a producer's transaction at its first
transactional batch and closes it at its control batch (the marker); an abort marker's
entry goes to the ``.txnindex`` of the segment holding it (``_index_aborted``), on append
and on every replay, which appends only what is missing: a truncation cuts the indexes
with the segments, and the replay that rebuilds the state (after a truncation, and after
an unclean stop, whose recovery cuts an index past the log's valid end) files again the
aborts after its snapshot. ``aborted_transactions`` answers a read_committed fetch.

State derived from the batches (``state_machines``; today ``producer_state``) follows the
log through one contract (state_machine.py): every append applies the batch header, a roll
and a close take snapshots, a truncation drops the snapshots above and rebuilds from the
latest left, deleting head segments deletes the snapshots below, and opening the log loads
the latest snapshot and replays the batches after it (one header read per batch).

Deleted segments are renamed ``.deleted`` at once and closed and unlinked after
``file.delete.delay.ms`` (Kafka's default 60 s), by ``delete_expired_files``: a region
handed to the network layer names an fd, and closing that fd while a sendfile is pending
could let the number be reused for another file. The fd stays valid after the rename.
A deleted partition's log is closed at once instead (``discard``): its regions in flight
hold their segment's ``OpenFile``, which keeps the descriptor until they are sent.

Compaction: the log cleaner (log_cleaner.py) reads sealed segments on its own thread and
writes their cleaned copy as ``.cleaned`` files (a ``.txnindex`` of the aborts still in
it among them); ``replace_segments`` swaps it in on the
event loop (Kafka's ``.cleaned`` -> ``.swap`` protocol, finished or undone at load by
``_clean_directory``), refusing when a truncation (``truncations`` counts them) or a
deletion changed the log under the cleaning.

Storage errors: an append the file system refuses (an ``OSError`` from the write, a roll
or a flush) becomes KAFKA_STORAGE_ERROR for the producer, is logged once per partition
per ``STORAGE_ERROR_LOG_INTERVAL_S`` with the count of refusals in between, and makes
``failing_writes`` true (Metadata reports it) until that long has passed or a write
succeeds. An error that says the disk itself failed (``is_dir_failure``: EIO, EROFS, the
directory gone, ...) is also handed to ``on_dir_failure``, which takes the whole log
directory offline (log_manager.py); running out of space or descriptors is not such an
error: those writes are refused one by one and succeed again once the cause is gone.

Thread-safety: not thread-safe; one event loop drives a Log. The only other thread is
the optional ``flusher`` (fsync of rolled segments), which touches nothing but the
segments it was handed and one int.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import mmap
import os
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from typing import NamedTuple

from pybroker._native.records import (
    HEADER_SIZE,
    BatchInfo,
    find_position,
    producer_batches,
    read_batch_header,
    scan_log,
    stamp_batch,
)
from pybroker.errors import (
    InvalidRecordError,
    KafkaError,
    KafkaStorageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from pybroker.file_region import FileRegion
from pybroker.log.checkpoints import fsync_dir, sync_checkpoint
from pybroker.log.leader_epoch_cache import LeaderEpochCache
from pybroker.log.log_config import LogConfig
from pybroker.log.log_segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    MAX_RELATIVE_OFFSET,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    file_name,
)
from pybroker.log.log_segments import LogSegments
from pybroker.log.producer_state import DEFAULT_EXPIRATION_MS, ProducerState
from pybroker.log.state_machine import LogStateMachine, apply_chunk, replay
from pybroker.log.transaction_index import AbortedTxn

log = logging.getLogger("pybroker.log")

EARLIEST_TIMESTAMP = -2  # ListOffsets special timestamps (Kafka's ListOffsetsRequest)
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")
CLEANED_SUFFIX = ".cleaned"  # the log cleaner's copy of segments, not yet swapped in
SWAP_SUFFIX = ".swap"        # a cleaned segment being swapped in: the swap is decided
_LEFTOVER = (DELETED_SUFFIX, ".tmp", SWAP_SUFFIX, CLEANED_SUFFIX)
# A failed write is logged once per partition per this interval, and Metadata reports the
# partition KAFKA_STORAGE_ERROR for this long after the last failure (unless a write
# succeeds): a full disk refuses every append, and one line a minute says so.
STORAGE_ERROR_LOG_INTERVAL_S = 60.0
# errors that say the disk or its directory failed (Kafka's LogDirFailureChannel takes
# the directory offline on any IOException; a full disk, a file size limit or descriptor
# exhaustion recover by themselves here)
DIR_FAILURE_ERRNOS = frozenset({errno.EIO, errno.EROFS, errno.ENOENT, errno.ENOTDIR,
                                errno.EACCES, errno.EPERM, errno.ENODEV, errno.ENXIO,
                                errno.ESTALE})


def is_dir_failure(exc: OSError) -> bool:
    """Whether ``exc`` takes its log directory offline (see ``DIR_FAILURE_ERRNOS``)."""
    return exc.errno in DIR_FAILURE_ERRNOS



def _install_txn_index(cleaned: str) -> None:
    """Give the cleaner's ``.txnindex.cleaned`` its final name; an empty one goes instead (a
    segment has the file only once a transaction aborted in it)."""
    if os.path.getsize(cleaned):
        os.rename(cleaned, cleaned[:-len(CLEANED_SUFFIX)])
    else:
        os.unlink(cleaned)


class AppendInfo(NamedTuple):
    base_offset: int
    last_offset: int
    log_append_time: int       # -1 unless the topic stamps LogAppendTime
    log_start_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    records_count: int
    size: int                  # bytes appended


class ReadResult(NamedTuple):
    regions: list[FileRegion]  # whole batches, in offset order, sent zero-copy
    size: int                  # bytes in all regions
    first_offset: int          # base offset of the first batch (may be below the asked
                               # offset, inside that batch); the asked offset if empty


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class Log:
    """See module doc."""

    def __init__(self, directory: str, config: LogConfig | None = None, *,
                 clean: bool = True, recovery_point: int = 0, log_start_offset: int = 0,
                 high_watermark: int = 0, clock: Callable[[], float] = time.time,
                 flusher: Executor | None = None,
                 producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS,
                 on_dir_failure: Callable[[Log, OSError], None] | None = None) -> None:
        """Open (or create) the log in ``directory``. ``clean``: the broker stopped
        cleanly, so indexes are trusted (after a sanity check) and nothing is scanned;
        otherwise every segment from ``recovery_point`` on is validated and its indexes
        rebuilt. The offsets come from the data directory's checkpoint files. Then each
        state machine loads its latest snapshot and replays the batches after it.
        ``on_dir_failure(log, error)``: an error that fails the log directory
        (``is_dir_failure``) from an append, a roll or a flush (on the event loop) or a
        background flush (on the flusher thread)."""
        self.directory = directory
        self.name = os.path.basename(directory)
        self.config = config or LogConfig()
        self._clock = clock
        self._flusher = flusher
        self._on_dir_failure = on_dir_failure
        self._flushed_through = 0   # written by the flusher thread only
        self._pending_deletes: list[tuple[float, LogSegment]] = []
        self._appending: asyncio.Future[None] | None = None  # append_async under way
        self._unflushed_messages = 0
        self._last_flush_ms = self._now_ms()
        self.write_failed_at = -1.0  # clock time of the last failed write, if failing now
        self._write_failure_logged_at = -STORAGE_ERROR_LOG_INTERVAL_S
        self._write_failures_unlogged = 0
        self.truncations = 0  # truncations of the end so far (the cleaner checks it)
        os.makedirs(directory, exist_ok=True)
        self.segments = LogSegments()
        self._load(clean, recovery_point, log_start_offset)
        active = self.segments.active
        self._next_offset = active.next_offset
        self.log_start_offset = min(max(log_start_offset, self.segments.first.base_offset),
                                    self._next_offset)
        self._high_watermark = min(max(high_watermark, self.log_start_offset),
                                   self._next_offset)
        self._recovery_point = self._next_offset if clean else min(recovery_point,
                                                                    self._next_offset)
        self.leader_epoch_cache = LeaderEpochCache(directory)
        self.leader_epoch_cache.truncate_from_end(self._next_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self._unsynced_snapshots: list[str] = []  # fsynced with the segments below them
        # where the state machines were last snapshotted (or replayed from), and the
        # snapshots not at a segment base, which the next snapshot replaces
        self._snapshot_offset = self._next_offset
        self._interim_snapshots: set[int] = set()
        # an offset at or after the last abort marker any .txnindex holds (-1: none), so a
        # read_committed fetch of a log that never aborted walks no index; entries the
        # cleaner or retention removed leave it as it was (it only bounds the search)
        self._last_abort_marker = max((txn.last_offset for segment in self.segments
                                       for txn in segment.txn_index.entries), default=-1)
        self.producer_state = ProducerState(directory, producer_id_expiration_ms,
                                            on_abort=self._index_aborted)
        self.state_machines: list[LogStateMachine] = [self.producer_state]
        # whether a batch without a producer id must reach the state machines: the
        # produce path of a plain producer then skips them (no clock read, no call)
        self._apply_every_batch = not all(m.producer_batches_only
                                          for m in self.state_machines)
        self._recover_states()

    # -- loading and recovery ------------------------------------------------------------

    def _load(self, clean: bool, recovery_point: int, log_start_offset: int) -> None:
        bases = self._clean_directory()
        interval = self.config.index_interval_bytes
        for base in bases:
            self.segments.add(LogSegment(self.directory, base, interval, None,
                                         created=self._clock()))
        if not len(self.segments):  # new, or emptied: start at the log start (Kafka)
            self.segments.add(self._new_segment(log_start_offset))
            return
        recover_from = len(self.segments) if clean else max(
            self.segments.floor_index(recovery_point), 0)
        started = time.monotonic()
        scanned = recovered = 0
        for i, segment in enumerate(self.segments):
            if i < recover_from:
                problem = (segment.load() if i == len(self.segments) - 1
                           else self._check_inactive(segment, i))
                if problem is None:
                    continue
                log.warning("%s: rebuilding indexes of segment %d: %s", self.name,
                            segment.base_offset, problem)
            scanned += segment.size
            recovered += 1
            if segment.recover():
                self._drop_after(segment)
                break
        if recovered:
            elapsed = time.monotonic() - started
            log.info("%s: recovered %d segments (%d bytes) in %.3f s (%.2f GB/s); "
                     "log end offset %d", self.name, recovered, scanned, elapsed,
                     scanned / max(elapsed, 1e-9) / 1e9, self.segments.active.next_offset)
        self.segments.active.activate(self.config.segment_index_bytes)

    def _recover_states(self) -> None:
        """Bring every state machine up to the log end: its latest snapshot the log can
        replay from, then the batches after it; without one, the last two segments
        (Kafka's ``LogLoader`` too: a snapshot is taken at every roll, so only a log
        written by an earlier version, or whose snapshots are unreadable, has none)."""
        segments, end = self.segments, self._next_offset
        first = segments.first.base_offset
        bases = {segment.base_offset for segment in segments}
        self._snapshot_offset = end
        self._interim_snapshots = set()
        for machine in self.state_machines:
            start = machine.load_snapshot(first, end, self._now_ms())
            if start is None:
                start = segments[-2].base_offset if len(segments) > 1 else first
            elif start not in bases:
                self._interim_snapshots.add(start)
            self._snapshot_offset = min(self._snapshot_offset, start)
            if start >= end:
                continue
            started = time.monotonic()
            count = replay(machine, self.producer_batches(start)
                           if machine.producer_batches_only
                           else (info for info, _ in self.batches(start)), self._now_ms())
            log.info("%s: replayed %d batches from offset %d into %s in %.3f s", self.name,
                     count, start, type(machine).__name__, time.monotonic() - started)

    def _index_aborted(self, txn: AbortedTxn) -> None:
        """The producer state applied an abort marker: its segment's index gets the entry
        (unless a replay finds it there)."""
        segment = self.segments.floor(txn.last_offset)
        if segment is not None:
            segment.txn_index.append(txn)
            self._last_abort_marker = max(self._last_abort_marker, txn.last_offset)

    def _snapshot_state(self, offset: int, interim: bool) -> None:
        """Every state machine's snapshot at ``offset`` (the log end), fsynced by the next
        flush (the flusher's after a roll). ``interim``: not at a segment base (a close,
        ``snapshot_state_if_behind``); the earlier interim one is deleted either way, so
        a partition keeps one snapshot per segment and at most one more."""
        replaced = self._interim_snapshots - {offset}
        for machine in self.state_machines:
            for old in replaced:
                machine.delete_snapshot(old)
            path = machine.take_snapshot(offset)
            if path is not None:
                self._unsynced_snapshots.append(path)
        self._interim_snapshots = {offset} if interim else set()
        self._snapshot_offset = offset

    def snapshot_state(self) -> None:
        """Snapshot the state machines at the log end now, durably: for state set from
        outside the log (the producer state of an earlier version's broker-wide file)."""
        self._snapshot_state(self._next_offset, interim=True)
        self._sync_snapshots()

    def snapshot_state_if_behind(self, max_bytes: int) -> bool:
        """Snapshot the state machines at the log end if more than ``max_bytes`` were
        appended since their last snapshot: a crash then replays at most about that much
        (a Python step per idempotent batch, ~3 us) instead of the whole active segment. The log
        manager asks every minute."""
        active = self.segments.active
        since = self._snapshot_offset
        if since >= self._next_offset or since >= active.base_offset and \
                active.size - active.position_of(since) <= max_bytes:
            return False
        self._snapshot_state(self._next_offset, interim=True)
        return True

    def _sync_snapshots(self) -> None:
        paths, self._unsynced_snapshots = self._unsynced_snapshots, []
        for path in paths:
            sync_checkpoint(path)

    def _clean_directory(self) -> list[int]:
        """Finish what a crash interrupted: a swap of cleaned segments (``.swap``), then
        delete ``.deleted``/``.tmp``/``.cleaned`` leftovers and index files without their
        log; return the base offsets of the segments."""
        for name in os.listdir(self.directory):
            if name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                self._finish_swap(int(name[:20]))
        names = os.listdir(self.directory)
        logs = set()
        for name in names:
            if name.endswith(_LEFTOVER):
                log.info("%s: removing leftover %s", self.name, name)
                os.unlink(os.path.join(self.directory, name))
                continue
            match = _SEGMENT_FILE.match(name)
            if match and match.group(2) == "log":
                logs.add(int(match.group(1)))
        for name in names:
            match = _SEGMENT_FILE.match(name)
            if match and match.group(2) != "log" and int(match.group(1)) not in logs:
                log.info("%s: removing index file without a log: %s", self.name, name)
                os.unlink(os.path.join(self.directory, name))
        return sorted(logs)

    def _finish_swap(self, base: int) -> None:
        """A crash came after the cleaner's segment at ``base`` was renamed ``.swap`` (the
        swap was decided): delete the segments it replaces (those whose base offset lies
        within its offsets), then give it its final name. Its offset and time indexes are
        rebuilt; its ``.txnindex`` is the cleaner's: still ``.cleaned`` (then the
        ``<base>.txnindex`` there is the old segment's) or already renamed (the old one was
        retired before, see ``replace_segments``)."""
        swap = os.path.join(self.directory, file_name(base, LOG_SUFFIX + SWAP_SUFFIX))
        end = base + 1
        size = os.path.getsize(swap)
        if size:
            with open(swap, "rb") as f, \
                    mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as data:
                scan = scan_log(data, 0, size, base, self.config.index_interval_bytes)
            end = max(end, scan.next_offset)
        txn_index = os.path.join(self.directory, file_name(base, TXN_INDEX_SUFFIX))
        cleaned_txn_index = txn_index + CLEANED_SUFFIX
        renamed = not os.path.exists(cleaned_txn_index)
        for name in os.listdir(self.directory):
            match = _SEGMENT_FILE.match(name)
            if match and (base <= int(match.group(1)) < end) and \
                    not (renamed and name == os.path.basename(txn_index)):
                os.unlink(os.path.join(self.directory, name))
        if not renamed:
            _install_txn_index(cleaned_txn_index)
        os.rename(swap, swap[:-len(SWAP_SUFFIX)])
        fsync_dir(self.directory)
        log.warning("%s: finished swapping in cleaned segment %d (up to offset %d)",
                    self.name, base, end)

    def _check_inactive(self, segment: LogSegment, i: int) -> str | None:
        """Sanity check of a segment that is not the last one (Kafka's): its next offset is
        taken to be the next segment's base, its largest timestamp the time index's."""
        problem = segment.index_problem()
        if problem is None:
            segment.next_offset = self.segments[i + 1].base_offset
            segment.max_timestamp = segment.time_index.last_timestamp
            segment.offset_of_max_timestamp = segment.time_index.last_offset
        return problem

    def _drop_after(self, segment: LogSegment) -> None:
        """A segment was cut short: every later segment is unreachable, delete it."""
        for later in self.segments.above(segment.base_offset):
            log.warning("%s: deleting segment %d after a truncated one", self.name,
                        later.base_offset)
            self.segments.remove(later)
            later.delete()

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(self.directory, base_offset, self.config.index_interval_bytes,
                          self.config.segment_index_bytes, created=self._clock(), create=True)

    # -- offsets -------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        self._high_watermark = min(max(offset, self.log_start_offset), self._next_offset)

    @property
    def last_stable_offset(self) -> int:
        """See module doc."""
        first = self.producer_state.first_unstable_offset()
        hw = self._high_watermark
        return hw if first is None or first >= hw else max(first, self.log_start_offset)

    @property
    def recovery_point(self) -> int:
        """Everything below is fsynced (includes rolls flushed by the flusher thread)."""
        return max(self._recovery_point, min(self._flushed_through, self._next_offset))

    def size(self) -> int:
        return self.segments.total_size()

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # -- appending -----------------------------------------------------------------------

    def append(self, batch, info, leader_epoch: int = 0,
               log_append_time: int = -1) -> AppendInfo:
        """Append one validated batch (``batch`` is writable and holds exactly the batch
        ``info`` describes): stamp its offsets (and LogAppendTime if the topic says so or
        ``log_append_time`` >= 0) and write it at the end of the active segment, inline.

        The common produce (a CreateTime batch, no new leader epoch, an active segment
        that takes it without a roll or an index entry: ``LogSegment.fits``) is done in
        one flat step; anything else goes through ``_prepare`` and ``_appended``. Both
        write the same bytes (tests/log/test_append_paths.py). Why the flat step: a
        one-record produce round trip was mostly Python calls (``_prepare``,
        ``_maybe_roll``, ``_appended`` and the properties under them: ~3.5 us of 23 per
        round trip); its checks are the same, taken at once."""
        if self._appending is not None:
            self._check_not_appending()
        config = self.config
        size = info.size
        try:
            if log_append_time < 0 and not config.log_append_time and \
                    size <= config.max_message_bytes and \
                    leader_epoch <= self.leader_epoch_cache.latest_epoch:
                segment = self.segments.active
                base = self._next_offset
                last = base + info.last_offset_delta
                if segment.fits(size, last, info.max_timestamp, config.segment_bytes,
                                config.roll_ms):
                    stamp_batch(batch, 0, base, leader_epoch, -1)
                    segment.append([batch], size, last, info.max_timestamp, None, 0,
                                   info.last_offset_delta + 1)
                    self._next_offset = last + 1
                    if info.producer_id >= 0 or self._apply_every_batch:
                        self._apply(info, base, -1)
                    count = info.records_count
                    self._after_append(count)
                    return AppendInfo(base, last, -1, self.log_start_offset,
                                      info.max_timestamp, last, count, size)
            segment, base, last, max_timestamp, log_append_time = self._prepare(
                batch, info, leader_epoch, log_append_time)
            segment.append([batch], size, last, max_timestamp, None, 0,
                           info.last_offset_delta + 1)
            return self._appended(info, leader_epoch, base, last, max_timestamp,
                                  log_append_time)
        except OSError as exc:
            raise self._write_failed(exc) from exc

    async def append_async(self, batch, info, leader_epoch: int = 0,
                           log_append_time: int = -1) -> AppendInfo:
        """``append`` with the write awaited, the loop serving other requests meanwhile
        (``Partition.append`` takes it for a batch the appender hands to the kernel's
        asynchronous ring). The log changes only once the bytes are in the file, so
        readers never see offsets whose bytes are not there yet. An ``append_async`` that
        finds another under way waits for it. If anything else changed the log while the
        write was out (truncation, a roll by retention, deletion) the append fails with
        ``KafkaStorageError`` (retriable) and its bytes are cut off."""
        while self._appending is not None:
            await asyncio.shield(self._appending)
        done = self._appending = asyncio.get_running_loop().create_future()
        try:
            try:
                segment, base, last, max_timestamp, log_append_time = self._prepare(
                    batch, info, leader_epoch, log_append_time)
                position, written = await segment.append_async([batch])
            except OSError as exc:
                raise self._write_failed(exc) from exc
            if segment is not self.segments.active or segment.size != position or \
                    self._next_offset != base:
                segment.discard_write(position)
                raise KafkaStorageError(f"{self.name}: the log changed while appending at "
                                        f"offset {base}; not appended")
            try:
                segment.appended_async(position, written, info.size, last, max_timestamp,
                                       info.last_offset_delta + 1)
                return self._appended(info, leader_epoch, base, last, max_timestamp,
                                      log_append_time)
            except OSError as exc:
                raise self._write_failed(exc) from exc
        finally:
            self._appending = None
            done.set_result(None)

    def _check_not_appending(self) -> None:
        """A write while ``append_async``'s is out would go to the same end position.
        The broker never gets here: its leader appends go through ``Partition.append``,
        which orders them, and a follower's appends start only once the partition's
        leader appends are done (``Partition.appends_done``). A guard for direct callers."""
        if self._appending is not None:
            raise KafkaStorageError(f"{self.name}: an asynchronous append is in progress")

    def _prepare(self, batch, info, leader_epoch: int,
                 log_append_time: int) -> tuple[LogSegment, int, int, int, int]:
        """Checks, roll, offsets stamped into ``batch``: what an append does before the
        write. Returns (segment, base offset, last offset, max timestamp, append time)."""
        size = info.size
        config = self.config
        if size > config.max_message_bytes:
            raise MessageTooLargeError(
                f"batch of {size} bytes exceeds max.message.bytes {config.max_message_bytes}")
        if size > config.segment_bytes:
            raise RecordListTooLargeError(
                f"batch of {size} bytes exceeds segment.bytes {config.segment_bytes}")
        if log_append_time < 0 and config.log_append_time:
            log_append_time = self._now_ms()
        base = self._next_offset
        last = base + info.last_offset_delta
        max_timestamp = log_append_time if log_append_time >= 0 else info.max_timestamp
        segment = self._maybe_roll(size, max_timestamp, base, last)
        stamp_batch(batch, 0, base, leader_epoch, log_append_time)
        return segment, base, last, max_timestamp, log_append_time

    def _appended(self, info, leader_epoch: int, base: int, last: int, max_timestamp: int,
                  log_append_time: int) -> AppendInfo:
        self._next_offset = last + 1
        if leader_epoch > self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(leader_epoch, base)
            self._sync_epochs()
        if info.producer_id >= 0 or self._apply_every_batch:
            self._apply(info, base, log_append_time)
        count = info.records_count
        self._after_append(count)
        return AppendInfo(base, last, log_append_time, self.log_start_offset, max_timestamp,
                          last, count, info.size)

    def append_as_follower(self, buf) -> AppendInfo | None:
        """Append batches that already carry their offsets (a replica fetch response).
        All of ``buf`` must be whole, valid batches starting at or after the log end; the
        leader epochs they carry go to the epoch cache."""
        self._check_not_appending()
        length = len(buf)
        if not length:
            return None
        head = read_batch_header(buf, 0)
        # one native pass: CRCs, offsets, and index entries relative to the first batch
        scan = scan_log(buf, 0, length, head.base_offset, self.config.index_interval_bytes)
        if scan.valid_end != length:
            raise InvalidRecordError(f"{self.name}: follower data bad at byte "
                                     f"{scan.valid_end}: {scan.error}")
        if head.base_offset < self._next_offset:
            raise InvalidRecordError(f"{self.name}: follower batch at offset "
                                     f"{head.base_offset} below log end {self._next_offset}")
        last = scan.next_offset - 1
        count = last - head.base_offset + 1
        try:
            segment = self._maybe_roll(length, scan.max_timestamp, head.base_offset, last)
            segment.append([buf], length, last, scan.max_timestamp, scan.offset_index,
                           head.base_offset)
            self._next_offset = last + 1
            self._assign_epochs(buf, head, last)
            apply_chunk(self.state_machines, buf, self._now_ms())
            self._after_append(count)
        except OSError as exc:
            raise self._write_failed(exc) from exc
        return AppendInfo(head.base_offset, last, -1, self.log_start_offset,
                          scan.max_timestamp, scan.offset_of_max_timestamp, count, length)

    def _assign_epochs(self, buf, head, last: int) -> None:
        """New leader epochs in a follower chunk go to the epoch cache. Epochs never
        decrease along a log, so when the last batch (found by a native header walk)
        has the first one's epoch, no batch in between starts a new one; only a chunk
        spanning an epoch change is walked batch by batch."""
        cache = self.leader_epoch_cache
        tail = find_position(buf, 0, len(buf), last)
        if tail is None or tail[1].partition_leader_epoch == head.partition_leader_epoch:
            if head.partition_leader_epoch > cache.latest_epoch:
                cache.assign(head.partition_leader_epoch, head.base_offset)
                self._sync_epochs()
            return
        position = 0
        while position < len(buf):
            info = read_batch_header(buf, position)
            if info.partition_leader_epoch > cache.latest_epoch:
                cache.assign(info.partition_leader_epoch, info.base_offset)
            position += info.size
        self._sync_epochs()

    def _sync_epochs(self) -> None:
        """A new epoch was written to the checkpoint on the produce path, not fsynced: two
        fsyncs there stalled the event loop at every partition's first append (seconds
        for a request to 100 new partitions). The flusher thread fsyncs it; without one,
        ``flush``/``close`` do."""
        cache = self.leader_epoch_cache
        if cache.dirty and self._flusher is not None:
            cache.dirty = False
            self._flusher.submit(sync_checkpoint, cache.path)

    def _apply(self, info: BatchInfo, base: int, log_append_time: int) -> None:
        now = self._now_ms()
        for machine in self.state_machines:
            machine.apply(info, base, log_append_time, now)

    def _after_append(self, records: int) -> None:
        self.write_failed_at = -1.0  # written: no longer failing
        self._unflushed_messages += records
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()

    def _write_failed(self, exc: OSError) -> KafkaError:
        """An append failed in the file system (a full disk, a file size limit, an I/O
        error): noted for Metadata (``failing_writes``) and logged at most once per
        ``STORAGE_ERROR_LOG_INTERVAL_S`` with the count of refusals since the last line
        (a full disk refuses every produce of every client). Returns the retriable error
        to answer."""
        self.io_failed(exc)
        now = self._clock()
        self.write_failed_at = now
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        if now - self._write_failure_logged_at >= STORAGE_ERROR_LOG_INTERVAL_S:
            suppressed = self._write_failures_unlogged
            log.warning("%s: write failed, refusing the append: %s (errno %s)%s", self.name,
                        reason, exc.errno, f"; {suppressed} more refused since the last "
                        f"report" if suppressed else "")
            self._write_failure_logged_at = now
            self._write_failures_unlogged = 0
        else:
            self._write_failures_unlogged += 1
        return KafkaStorageError(f"{self.name}: write failed: {reason}")

    def io_failed(self, exc: OSError) -> None:
        """An I/O error on this log: reported to ``on_dir_failure`` if it fails the
        directory. Any thread."""
        if self._on_dir_failure is not None and is_dir_failure(exc):
            self._on_dir_failure(self, exc)

    def failing_writes(self, now: float | None = None) -> bool:
        """Whether the last write failed less than ``STORAGE_ERROR_LOG_INTERVAL_S`` ago
        (nothing written since): Metadata answers KAFKA_STORAGE_ERROR for the partition."""
        failed = self.write_failed_at
        return failed >= 0 and (self._clock() if now is None else now) - failed < \
            STORAGE_ERROR_LOG_INTERVAL_S

    def _maybe_roll(self, size: int, max_timestamp: int, first_offset: int,
                    last_offset: int) -> LogSegment:
        """The segment to append to: the active one unless it must roll first (Kafka's
        ``LogSegment.shouldRoll``): full by bytes, older than ``segment.ms`` counted from
        its first batch's timestamp, an index full, or offsets beyond relative range."""
        segment = self.segments.active
        config = self.config
        overflow = last_offset - segment.base_offset > MAX_RELATIVE_OFFSET
        if segment.size == 0:
            if overflow or first_offset != segment.base_offset:
                return self._replace_empty_active(first_offset)
            return segment
        reason = None
        if segment.size > config.segment_bytes - size:
            reason = "segment.bytes"
        elif overflow:
            reason = "relative offset overflow"
        elif segment.offset_index.is_full or segment.time_index.is_full:
            reason = "index full"
        else:
            rolling = segment.rolling_timestamp()  # cached after the first call
            waited = (max_timestamp - rolling if rolling is not None
                      else self._now_ms() - int(segment.created * 1000))
            if waited > config.roll_ms:
                reason = "segment.ms"
        if reason is None:
            return segment
        return self.roll(first_offset, reason)

    def _replace_empty_active(self, base_offset: int) -> LogSegment:
        """An empty active segment at the wrong base (a follower's gap): start it again."""
        old = self.segments.active
        self.segments.remove(old)
        old.delete()
        segment = self._new_segment(base_offset)
        self.segments.add(segment)
        return segment

    def roll(self, base_offset: int | None = None, reason: str = "requested") -> LogSegment:
        """Start a new active segment at ``base_offset`` (default: the log end)."""
        base = self._next_offset if base_offset is None else max(base_offset, self._next_offset)
        old = self.segments.active
        if old.size == 0:
            return self._replace_empty_active(base) if base != old.base_offset else old
        old.deactivate()
        segment = self._new_segment(base)
        self.segments.add(segment)
        self._snapshot_state(base, interim=False)
        log.info("%s: rolled segment %d (%d bytes, %s); new segment %d", self.name,
                 old.base_offset, old.size, reason, base)
        if self._flusher is not None:
            # Kafka flushes rolled segments in the background: the recovery point moves
            # past them and an unclean restart scans only the new segment (and replays
            # only its batches into the state machines, from the snapshot just taken).
            todo = self.segments.from_offset(self.recovery_point)[:-1]
            snapshots, self._unsynced_snapshots = self._unsynced_snapshots, []
            self._flusher.submit(self._flush_in_background, todo, base, snapshots)
        return segment

    def _flush_in_background(self, segments: list[LogSegment], through: int,
                             snapshots: list[str]) -> None:
        try:
            for segment in segments:
                if segment.fd >= 0:
                    segment.flush()
            for path in snapshots:
                sync_checkpoint(path)
        except (OSError, ValueError) as exc:  # closed meanwhile (retention, truncation)
            log.warning("%s: background flush up to %d failed: %s", self.name, through, exc)
            if isinstance(exc, OSError):
                self.io_failed(exc)
            return
        self._flushed_through = max(self._flushed_through, through)

    # -- reading -------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one: bool = True) -> ReadResult:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` (but the
        first batch anyway with ``min_one``, KIP-74), only batches entirely below
        ``max_offset`` (the high watermark for consumers), across segments if needed.
        ``OffsetOutOfRangeError`` outside [log start, log end]."""
        end = self._next_offset
        if offset < self.log_start_offset or offset > end:
            raise OffsetOutOfRangeError(
                f"{self.name}: offset {offset} not in [{self.log_start_offset}, {end}]")
        return self._read(offset, max_bytes, end if max_offset is None else min(max_offset, end),
                          min_one)

    def _read(self, offset: int, max_bytes: int, bound: int, min_one: bool) -> ReadResult:
        regions: list[FileRegion] = []
        size = 0
        first = offset
        segments = self.segments
        i = max(segments.floor_index(offset), 0)
        while offset < bound and i < len(segments):
            segment = segments[i]
            max_position = (segment.position_of(bound) if bound < segment.next_offset
                            else segment.size)
            found = segment.read(offset, max_bytes - size, max_position, min_one and not regions)
            if found is not None:
                position, length, base = found
                if not length:
                    break  # the next batch does not fit in max_bytes
                if not regions:
                    first = base
                regions.append(FileRegion(segment.fd, position, length, segment.file))
                size += length
                if position + length < segment.size:
                    break  # stopped by max_bytes or the bound, not by the segment's end
            elif max_position < segment.size:
                break
            i += 1
            next_base = segments.next_base(i - 1)
            if next_base is None:
                break
            offset = max(offset, next_base)
        return ReadResult(regions, size, first)

    def batches(self, start: int, read_bytes: int = 4 << 20
                ) -> Iterator[tuple[BatchInfo, memoryview]]:
        """Every complete batch holding offsets >= ``start`` up to the log end, with its
        bytes: the replays at load time (the state machines, the group coordinator's
        offsets) walk the log through this. ``start`` may be below the log start offset,
        down to the first segment's base (a snapshot taken before DeleteRecords moved the
        start is replayed from). Read with pread, not mapped: a startup path, one Python
        step per batch, never used to serve fetches. Stops, with a warning, where the log
        will not read further (a torn tail)."""
        offset, end = max(start, self.segments.first.base_offset), self.log_end_offset
        while offset < end:
            progressed = False
            for region in self._read(offset, read_bytes, end, True).regions:
                data = memoryview(os.pread(region.fd, region.length, region.position))
                position = 0
                while position + HEADER_SIZE <= len(data):
                    info = read_batch_header(data, position)
                    if info.size > len(data) - position:
                        break
                    if info.last_offset >= offset:
                        yield info, data[position:position + info.size]
                        offset = info.last_offset + 1
                        progressed = True
                    position += info.size
            if not progressed:
                log.warning("%s: no progress reading at offset %d, stopping", self.directory,
                            offset)
                return

    def producer_batches(self, start: int, read_bytes: int = 4 << 20) -> Iterator[BatchInfo]:
        """The headers of the batches holding offsets >= ``start`` (as ``batches``) that
        carry a producer id (control batches too): the replay of state machines
        that need nothing else (``producer_batches_only``). One native walk per read, so
        a plain producer's batches cost no Python step."""
        offset, end = max(start, self.segments.first.base_offset), self.log_end_offset
        while offset < end:
            reached = offset
            for region in self._read(offset, read_bytes, end, True).regions:
                found, reached = producer_batches(
                    os.pread(region.fd, region.length, region.position), reached)
                yield from found
            if reached == offset:
                log.warning("%s: no progress reading at offset %d, stopping",
                            self.directory, offset)
                return
            offset = reached

    def aborted_transactions(self, start: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions holding offsets in [``start``, ``upper_bound``): what a
        read_committed fetch from ``start`` lists. Their markers are at or after
        ``start``, so the search begins at the segment holding it and ends at the first
        entry whose last stable offset is above ``upper_bound`` (Kafka's), or the end."""
        if self._last_abort_marker < start:
            return []  # no marker at or after start: the common case, no walk
        found: list[AbortedTxn] = []
        segments = self.segments
        for i in range(max(segments.floor_index(start), 0), len(segments)):
            entries, complete = segments[i].txn_index.overlapping(start, upper_bound)
            found += entries
            if complete:
                break
        return found

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """ListOffsets: the first record with timestamp >= ``timestamp``, or the special
        ``-2`` earliest, ``-1`` latest, ``-3`` the first record with the largest timestamp.
        None if none."""
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampOffset(-1, self.log_start_offset)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampOffset(-1, self._next_offset)
        if timestamp == MAX_TIMESTAMP:
            # The segment knows the batch of its largest timestamp; the answer is the first
            # record carrying it inside that batch (Kafka 3.8+, KAFKA-16310), found by the
            # same walk as a lookup for that timestamp.
            best = max(self.segments, key=lambda s: s.max_timestamp)
            if best.max_timestamp < 0 or best.offset_of_max_timestamp < self.log_start_offset:
                return None
            found = best.find_timestamp(best.max_timestamp, best.base_offset)
            if found is None or found[0] < self.log_start_offset:
                return None
            return TimestampOffset(found[1], found[0])
        for segment in self.segments.from_offset(self.log_start_offset):
            if segment.max_timestamp >= timestamp:
                found = segment.find_timestamp(timestamp, self.log_start_offset)
                if found is not None:
                    return TimestampOffset(found[1], found[0])
        return None

    # -- truncation, deletion, retention -------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove everything at and after ``offset`` (replication: a diverged tail). Whole
        batches only: the end becomes the start of the batch holding ``offset``. Below
        the log start (or when that batch starts below it) the log restarts empty at
        ``offset``, as Kafka's ``truncateFullyAndStartAt``."""
        if offset < 0:
            raise ValueError(f"truncate to a negative offset {offset}")
        if offset >= self._next_offset:
            return False
        log.info("%s: truncating from %d to %d", self.name, self._next_offset, offset)
        holder = self.segments.floor(offset)
        found = holder.find(offset) if holder is not None else None
        new_end = found[1] if found is not None else offset
        if offset < self.log_start_offset or new_end < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        for segment in reversed(self.segments.above(offset)):
            self._delete_segment(segment, keep_active=False)
        active = self.segments.active
        active.truncate_to(offset)
        active.activate(self.config.segment_index_bytes)
        self._reset_end(active.next_offset)
        self._truncate_state(active.next_offset)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment; the log restarts empty at ``offset``."""
        for segment in reversed(list(self.segments)):
            self._delete_segment(segment, keep_active=False)
        self.segments.add(self._new_segment(offset))
        self.log_start_offset = offset
        self.leader_epoch_cache.clear()
        self._reset_end(offset)
        self._truncate_state(-1)

    def _truncate_state(self, end: int) -> None:
        """The tail from ``end`` is gone (-1: everything): each state machine drops its
        snapshots above and is rebuilt from the latest one left, as in recovery."""
        for machine in self.state_machines:
            machine.truncate_to(end)
        self._recover_states()

    def _reset_end(self, end: int) -> None:
        self.truncations += 1
        self._next_offset = end
        self._high_watermark = min(self._high_watermark, end)
        self._recovery_point = min(self._recovery_point, end)
        self._flushed_through = min(self._flushed_through, end)
        self.leader_epoch_cache.truncate_from_end(end)

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start to ``offset`` (at most the high watermark)
        and delete the segments wholly below it. Returns the new log start offset."""
        if offset > self._high_watermark:
            raise OffsetOutOfRangeError(f"{self.name}: cannot delete records before {offset}, "
                                        f"above the high watermark {self._high_watermark}")
        if offset > self.log_start_offset:
            self._move_start(offset)
            self._delete_start_breached()
        return self.log_start_offset

    def _move_start(self, offset: int) -> None:
        log.info("%s: log start offset %d -> %d", self.name, self.log_start_offset, offset)
        self.log_start_offset = offset
        self.leader_epoch_cache.truncate_from_start(offset)

    def _delete_start_breached(self) -> int:
        """Delete the segments whose offsets are all below the log start offset."""
        count = 0
        while len(self.segments) > 1 and self.segments[1].base_offset <= self.log_start_offset:
            self._delete_segment(self.segments.first)
            count += 1
        first = self.segments.first.base_offset
        for machine in self.state_machines:
            machine.truncate_head(first)
        return count

    def delete_old_segments(self) -> int:
        """Retention (Kafka's ``deleteOldSegments``): whole segments from the oldest while
        their largest timestamp is older than ``retention.ms``, then while the log is
        larger than ``retention.bytes``; only below the high watermark. The active
        segment goes too if it qualifies (a new empty one is rolled first). -1 keeps
        forever. Returns the number of segments deleted."""
        config = self.config
        deleted = 0
        if config.deletes and config.retention_ms >= 0:
            now = self._now_ms()
            deleted += self._delete_while(
                lambda s: now - self._largest_timestamp(s) > config.retention_ms,
                "retention.ms")
        if config.deletes and config.retention_bytes >= 0:
            excess = [self.size() - config.retention_bytes]

            def over_size(segment: LogSegment) -> bool:
                if excess[0] - segment.size < 0:
                    return False
                excess[0] -= segment.size
                return True
            deleted += self._delete_while(over_size, "retention.bytes")
        return deleted + self._delete_start_breached()

    def _delete_while(self, predicate: Callable[[LogSegment], bool], reason: str) -> int:
        doomed = []
        for i, segment in enumerate(self.segments):
            upper = self.segments.next_base(i)
            last_and_empty = upper is None and segment.size == 0
            upper = self._next_offset if upper is None else upper
            if self._high_watermark < upper or last_and_empty or not predicate(segment):
                break
            doomed.append(segment)
        if not doomed:
            return 0
        if len(doomed) == len(self.segments):
            self.roll(reason=reason)
        for segment in doomed:
            log.info("%s: deleting segment %d (%d bytes) by %s", self.name,
                     segment.base_offset, segment.size, reason)
            self._delete_segment(segment)
        start = self.segments.first.base_offset
        if start > self.log_start_offset:
            self._move_start(start)
        return len(doomed)

    def _largest_timestamp(self, segment: LogSegment) -> int:
        """A segment's largest record timestamp, its file's mtime if it has none."""
        if segment.max_timestamp >= 0:
            return segment.max_timestamp
        return int(os.fstat(segment.fd).st_mtime * 1000)

    def _delete_segment(self, segment: LogSegment, keep_active: bool = True) -> None:
        if keep_active and segment is self.segments.active:
            raise KafkaStorageError(f"{self.name}: refusing to delete the active segment")
        self.segments.remove(segment)
        if self.config.file_delete_delay_ms:
            segment.rename_deleted()
        self._retire(segment)

    def _retire(self, segment: LogSegment) -> None:
        """A segment out of the log: closed and unlinked now, or ``file.delete.delay.ms``
        after its files were renamed ``.deleted``."""
        if self.config.file_delete_delay_ms == 0:
            segment.delete()
            return
        due = self._now_ms() + self.config.file_delete_delay_ms
        self._pending_deletes.append((due, segment))

    def delete_expired_files(self) -> int:
        """Close and unlink the ``.deleted`` segments whose delay has passed."""
        now = self._now_ms()
        due = [s for t, s in self._pending_deletes if t <= now]
        if due:
            self._pending_deletes = [(t, s) for t, s in self._pending_deletes if t > now]
            for segment in due:
                segment.delete()
        return len(due)

    # -- compaction ----------------------------------------------------------------------

    def replace_segments(self, old: list[LogSegment], truncations: int) -> LogSegment | None:
        """Swap in the segment the log cleaner wrote in place of ``old`` (consecutive
        sealed segments), as ``<base of old[0]>.{log,index,timeindex,txnindex}.cleaned``;
        returns it. When the log changed since the cleaning began (``truncations`` is no
        longer the count, or ``old`` are no longer its segments) the cleaned files are
        deleted (the ``.txnindex`` first: without the log file it is a leftover) and None
        is returned.

        Kafka's order, so that a crash at any moment leaves the old segments or the new
        one: the cleaned log file is renamed ``.swap`` and the directory synced (from here
        ``_clean_directory`` finishes the swap), the old segments are deleted as retention
        deletes (renamed ``.deleted``; reads in flight are served from their descriptors
        until ``file.delete.delay.ms``), and the new files take their final names. Those
        last renames are made durable by the caller's ``fsync_dir`` off the event loop (a
        directory sync takes 3-8 ms here, more under write load): until then a crash
        leaves a prefix of them (ext4 commits one directory's renames in order), which
        loading completes as it completes any ``.swap``."""
        base = old[0].base_offset
        i = self.segments.floor_index(base)
        current = [self.segments[j] for j in range(max(i, 0), min(i + len(old),
                                                                   len(self.segments)))]
        cleaned = {suffix: os.path.join(self.directory, file_name(base, suffix + CLEANED_SUFFIX))
                   for suffix in (TXN_INDEX_SUFFIX, LOG_SUFFIX, INDEX_SUFFIX,
                                  TIME_INDEX_SUFFIX)}
        if truncations != self.truncations or len(current) != len(old) or \
                any(a is not b for a, b in zip(current, old, strict=True)) or \
                old[-1] is self.segments.active:
            for path in cleaned.values():
                if os.path.exists(path):
                    os.unlink(path)
            return None
        swap = cleaned[LOG_SUFFIX][:-len(CLEANED_SUFFIX)] + SWAP_SUFFIX
        os.rename(cleaned[LOG_SUFFIX], swap)
        fsync_dir(self.directory)
        # until the list changes below the old segments serve reads (their files renamed,
        # their descriptors open), so a failure in between loses nothing before a restart
        for segment in old:
            segment.rename_deleted()
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            os.rename(cleaned[suffix], cleaned[suffix][:-len(CLEANED_SUFFIX)])
        _install_txn_index(cleaned[TXN_INDEX_SUFFIX])
        os.rename(swap, swap[:-len(SWAP_SUFFIX)])
        segment = LogSegment(self.directory, base, self.config.index_interval_bytes, None,
                             created=old[-1].created)
        problem = segment.index_problem()
        if problem is not None:
            log.warning("%s: rebuilding indexes of cleaned segment %d: %s", self.name, base,
                        problem)
            segment.recover()
        segment.next_offset = old[-1].next_offset
        segment.max_timestamp = segment.time_index.last_timestamp
        segment.offset_of_max_timestamp = segment.time_index.last_offset
        self.segments.replace(old, segment)
        for replaced in old:
            self._retire(replaced)
        return segment

    # -- durability and closing ----------------------------------------------------------

    def flush(self) -> None:
        """fsync everything written: the recovery point moves to the log end."""
        end = self._next_offset
        for segment in self.segments.from_offset(self.recovery_point):
            segment.flush()
        self.leader_epoch_cache.sync()
        self._sync_snapshots()
        self._recovery_point = end
        self._unflushed_messages = 0
        self._last_flush_ms = self._now_ms()

    def flush_if_due(self) -> bool:
        """``flush.ms``: flush when unflushed data is older than that."""
        if self._unflushed_messages and self.config.flushes_by_time and \
                self._now_ms() - self._last_flush_ms >= self.config.flush_ms:
            self.flush()
            return True
        return False

    def update_config(self, config: LogConfig) -> None:
        """New settings; segment and index sizes apply from the next roll."""
        self.config = config

    def close(self) -> None:
        """Close every file; pending deletions happen now (nothing reads any more). The
        state machines' snapshots at the log end are written first, so the next start
        replays nothing (unless the log holds no batch at all)."""
        self.leader_epoch_cache.sync()
        if self._next_offset > self.segments.first.base_offset:
            self._snapshot_state(self._next_offset, interim=True)
        self._sync_snapshots()
        self._close_all(LogSegment.delete, LogSegment.close)

    def discard(self) -> None:
        """The partition is deleted: close every descriptor and mapping now, writing
        nothing (the files are going). A region still being sent keeps its segment's
        descriptor (``OpenFile``) until sent. An asynchronous append under way finishes
        first: the kernel may not have taken its write yet, so the descriptor number must
        not be freed for reuse under it."""
        if self._appending is not None:
            self._appending.add_done_callback(lambda _: self.discard())
            return
        self._close_all(LogSegment.discard, LogSegment.discard)

    def _close_all(self, pending: Callable[[LogSegment], None],
                   live: Callable[[LogSegment], None]) -> None:
        for _, segment in self._pending_deletes:
            pending(segment)
        self._pending_deletes = []
        for segment in self.segments:
            live(segment)

    def __repr__(self) -> str:
        return (f"Log({self.directory}, start={self.log_start_offset}, "
                f"end={self._next_offset}, hw={self._high_watermark}, "
                f"segments={len(self.segments)})")


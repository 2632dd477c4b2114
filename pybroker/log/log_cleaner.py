"""The log cleaner: compaction of every log whose ``cleanup.policy`` includes ``compact``.

Kafka's design (``LogCleaner``, ``Cleaner``, ``LogCleanerManager``), on
``log.cleaner.threads`` threads of its own:

1. Choose (on the event loop) the dirtiest log: its *dirty* section runs from the offset
   the last cleaning reached (``cleaner-offset-checkpoint`` in the data directory; the log
   start at first) to the first *uncleanable* offset: the active segment's base, lowered
   to the segment holding the last stable offset (the high watermark, or the first offset
   of an open transaction: its records cannot be cleaned yet) and to the first segment
   holding a record newer than ``min.compaction.lag.ms``. Cleanable when dirty bytes / (clean + dirty
   bytes) > ``min.cleanable.dirty.ratio``, or at once when the dirty section's first
   batch is older than ``max.compaction.lag.ms``. The active segment is never cleaned: a
   roll (``segment.bytes``, ``segment.ms``) makes its records cleanable.
2. Build the offset map (key -> latest offset) over the dirty section, in
   ``log.cleaner.dedupe.buffer.size`` / threads bytes (``pybroker._native.cleaner``),
   without the records of aborted transactions. A map that fills up ends this round's
   range at the last offset it took.
3. Copy the segments from the log start up to that range in groups that fit
   ``segment.bytes`` (and the index size and offset range of one segment), each group into
   one ``<base>.log.cleaned`` keeping only the surviving records (rules in
   csrc/pb_cleaner.h), build its indexes (``.txnindex``: the entries of the abort markers
   still in it), fsync, and ask the event loop to swap it in
   (``Log.replace_segments``: Kafka's ``.cleaned`` -> ``.swap`` protocol, refused if the
   log was truncated or lost those segments meanwhile).
4. Record the end of the round in ``cleaner-offset-checkpoint``.

``states`` gives each compacted log's checkpoint and dirty ratio (step 1's figures); the
broker writes them to its stats file, for ``pybroker topic describe``.

The threads never touch a ``Log`` or ``LogManager``: everything they need is taken on the
event loop (``_take_job``) and the swap is done there (``_swap``), so the loop stalls only
for renames and one directory fsync per group (the one that makes ``.swap`` durable before
the old segments go); the thread makes the final names durable. A thread reads segments with ``pread``
through their ``OpenFile`` (kept open by the job even if retention or a deletion closes
the segment meanwhile; a mapping could fault on a segment truncated under it). Reads and
writes together are throttled to ``log.cleaner.io.max.bytes.per.second``. A log whose
cleaning fails on damaged data is left alone until restart (Kafka's uncleanable
partitions); other failures back off ``log.cleaner.backoff.ms``.

Producer state: the batch holding each idempotent producer's last offset is kept, if only
as an empty header (the ``producers`` callback says, per partition, producer id -> last
offset); so is the last batch of each round, so the log's offsets do not shrink.

Transactions (Kafka's ``CleanedTransactionMetadata``): the aborted transactions of the
range (``Log.aborted_transactions``, taken with the job) go to the native walk as a
``Transactions``, one for the map and one for the round's copy: aborted records go, a
marker stays while a batch of its transaction does (so a replay of the log never finds a
transaction without its end), then gets a delete horizon (``delete.retention.ms``, as a
tombstone) and goes after it. Python work is per group and per aborted transaction.

Tests may set ``PYBROKER_CLEANER_CRASH_AT`` to ``cleaned`` (the cleaned files written, not
swapped) or ``swapped`` (swapped in, the checkpoint not written): the process then dies
with SIGKILL at that point, for the crash tests.

Settings change at run time (``reconfigure``: Kafka's dynamic ``log.cleaner.*``): each
thread takes the config at the top of its round, under the lock that also keeps the
table of threads, so a lower ``log.cleaner.threads`` ends the extra threads after their
round and a new dedupe buffer size gives each thread a new offset map; a thread backing
off is woken to do so at once.

Thread-safety: ``start``/``stop``/``reconfigure``/``clean_once`` and the callbacks run on
the event loop (or, without one, on the caller's thread); the cleaner threads call the
loop only through ``_on_loop``; ``Throttler`` is shared by the threads and locks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import mmap
import os
import signal
import struct
import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from pybroker._native.cleaner import OffsetMap, Transactions
from pybroker._native.records import HEADER_SIZE, read_batch_header, scan_log
from pybroker.errors import CorruptRecordError, KafkaError
from pybroker.file_region import OpenFile
from pybroker.log.checkpoints import fsync_dir, read_offsets, write_offsets
from pybroker.log.log import CLEANED_SUFFIX, Log
from pybroker.log.log_config import LogConfig
from pybroker.log.log_manager import LogManager
from pybroker.log.log_segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    MAX_RELATIVE_OFFSET,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    file_name,
)
from pybroker.log.transaction_index import AbortedTxn, write_index

log = logging.getLogger("pybroker.log.cleaner")

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
CRASH_ENV = "PYBROKER_CLEANER_CRASH_AT"
_TIME_ENTRY = struct.Struct(">qI")
_T = TypeVar("_T")
Key = tuple[str, int]
ProducerOffsets = Callable[[str, int], Mapping[int, int]]


# How much nicer than the broker's other threads a cleaner thread runs: with few CPUs the
# cleaner must not take the event loop's turn (Kafka leaves this to the JVM's threads).
CLEANER_NICE = 10


def _lower_priority() -> None:
    """Linux schedules threads one by one: this thread gives way to the event loop and the
    network threads when they want a CPU, and has every cycle they leave."""
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid)
                                                 + CLEANER_NICE))
    except OSError as exc:  # not Linux, or a sandbox that refuses: full priority then
        log.info("log cleaner runs at the broker's priority: %s", exc)


@dataclasses.dataclass(frozen=True)
class CleanerConfig:
    """Kafka's ``log.cleaner.*`` broker settings."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_load_factor: float = 0.9
    io_buffer_size: int = 512 * 1024
    io_max_bytes_per_second: float = 1.7976931348623157e308
    backoff_ms: int = 15_000

    @classmethod
    def from_settings(cls, get: Callable[[str], object]) -> CleanerConfig:
        """From the broker settings (``get(key)``, e.g. ``BrokerConfig.__getitem__``)."""
        return cls(enable=bool(get("log.cleaner.enable")),
                   threads=max(1, int(str(get("log.cleaner.threads")))),
                   dedupe_buffer_size=int(str(get("log.cleaner.dedupe.buffer.size"))),
                   io_buffer_load_factor=float(str(get("log.cleaner.io.buffer.load.factor"))),
                   io_buffer_size=int(str(get("log.cleaner.io.buffer.size"))),
                   io_max_bytes_per_second=float(
                       str(get("log.cleaner.io.max.bytes.per.second"))),
                   backoff_ms=int(str(get("log.cleaner.backoff.ms"))))


class Throttler:
    """At most ``bytes_per_second`` over every caller together (Kafka's ``Throttler``:
    measured over 300 ms periods, the caller that finds the rate too high sleeps)."""

    PERIOD_S = 0.3

    def __init__(self, bytes_per_second: float,
                 sleep: Callable[[float], object] = time.sleep) -> None:
        self.bytes_per_second = bytes_per_second
        self._sleep = sleep
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._bytes = 0

    def maybe_throttle(self, nbytes: int) -> None:
        with self._lock:
            self._bytes += nbytes
            elapsed = time.monotonic() - self._start
            if elapsed < self.PERIOD_S:
                return
            wait = self._bytes / self.bytes_per_second - elapsed
            if wait > 0:
                self._sleep(wait)  # holding the lock: every thread waits its share
            self._start = time.monotonic()
            self._bytes = 0


@dataclasses.dataclass
class _Source:
    """One sealed segment as a cleaner thread reads it."""

    segment: LogSegment
    file: OpenFile           # keeps the descriptor open for the job
    base: int
    size: int                # bytes when the job was taken (sealed: it does not grow)
    next_base: int           # the next segment's base: every offset here is below it
    index_bytes: int
    time_index_bytes: int
    mtime: float


@dataclasses.dataclass
class _Job:
    key: Key
    log: Log
    config: LogConfig
    sources: list[_Source]   # from the log start up to the first uncleanable offset
    first_dirty: int
    first_uncleanable: int
    truncations: int
    producers: dict[int, int]
    now_ms: int
    aborted: dict[int, AbortedTxn]  # marker offset -> aborted transaction of the sources


@dataclasses.dataclass(frozen=True)
class CleanerState:
    """The cleaner's view of one compacted partition (``LogCleaner.states``)."""

    topic: str
    partition: int
    cleaned_up_to: int | None  # the checkpoint: offsets below it were cleaned (None: never)
    dirty_ratio: float         # what is compared with min.cleanable.dirty.ratio


class _Aborted(Exception):
    """The log changed under the cleaning, or the cleaner is stopping."""


class LogCleaner:
    """See module doc."""

    def __init__(self, logs: LogManager, config: CleanerConfig | None = None, *,
                 loop: asyncio.AbstractEventLoop | None = None,
                 producers: ProducerOffsets | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config or CleanerConfig()
        self._logs = logs
        self._loop = loop
        self._producers = producers
        self._clock = clock
        self._checkpoint_path = os.path.join(logs.data_dir, CHECKPOINT_FILE)
        self._checkpoints = read_offsets(self._checkpoint_path)
        self._checkpoint_lock = threading.Lock()  # one writer of the file at a time
        self._truncations: dict[Key, int] = {}    # Log.truncations at each checkpoint
        self._in_progress: set[Key] = set()
        self.uncleanable: set[Key] = set()
        self.cleanings = 0  # rounds completed: the stats file is written again after one
        self._stopping = threading.Event()
        # (a stop ends a throttled wait at once)
        self._throttler = Throttler(self.config.io_max_bytes_per_second, self._stopping.wait)
        # thread index -> thread; a thread whose index the config no longer has (fewer
        # threads) removes itself, under the lock, before it ends
        self._threads: dict[int, threading.Thread] = {}
        self._threads_lock = threading.Lock()
        # a thread's back-off ends early when the settings change (or the cleaner stops)
        self._reconfigured = threading.Condition(self._threads_lock)

    # -- lifecycle (event loop) ----------------------------------------------------------

    def start(self) -> None:
        if self.config.enable:
            self._start_threads()

    def _start_threads(self) -> None:
        """Start the threads the config counts that are not running."""
        with self._threads_lock:
            for i in range(self.config.threads):
                if i not in self._threads:
                    thread = threading.Thread(target=self._run, args=(i,), daemon=True,
                                              name=f"pybroker-log-cleaner-{i}")
                    self._threads[i] = thread
                    thread.start()

    def reconfigure(self, config: CleanerConfig) -> None:
        """New settings (Kafka's dynamic ``log.cleaner.*``; ``enable`` stays as started):
        the rate at once; a thread backing off starts its next round now, with the new
        back-off and offset map size; threads beyond a lower count end after their
        round, more start now."""
        with self._reconfigured:
            self.config = dataclasses.replace(config, enable=self.config.enable)
            self._reconfigured.notify_all()
        self._throttler.bytes_per_second = config.io_max_bytes_per_second
        if self.config.enable and not self._stopping.is_set():
            self._start_threads()

    def stop(self) -> None:
        """Stop the threads (a cleaning under way is abandoned: its files are leftovers
        the next load removes) and wait for them."""
        self._stopping.set()
        with self._reconfigured:
            self._reconfigured.notify_all()
            threads = list(self._threads.values())
        for thread in threads:
            thread.join()
        self._threads = {}

    def checkpoint(self, topic: str, partition: int) -> int | None:
        """The offset up to which ``topic``/``partition`` was cleaned, if it ever was."""
        return self._checkpoints.get((topic, partition))

    def states(self) -> list[CleanerState]:
        """Every compacted log's checkpoint and dirty ratio (event loop). Kafka reports
        these only as metrics and log lines; the broker writes them to its stats file,
        where ``pybroker topic describe`` reads them."""
        now = int(self._clock() * 1000)
        return [CleanerState(*key, self._checkpoints.get(key),
                             self._dirty_section(key, partition_log, now)[1])
                for key, partition_log in self._logs.logs() if partition_log.config.compacts]

    def clean_once(self) -> bool:
        """Clean the dirtiest log now, on this thread; False if none was cleanable (tests
        and tools: the threads do this in a loop)."""
        return self._clean_dirtiest(self._new_map(self.config))

    # -- the threads -----------------------------------------------------------------------

    @staticmethod
    def _new_map(config: CleanerConfig) -> OffsetMap:
        return OffsetMap(config.dedupe_buffer_size // config.threads,
                         config.io_buffer_load_factor)

    def _run(self, index: int) -> None:
        _lower_priority()
        offsets: OffsetMap | None = None
        shape: tuple[int, int, float] | None = None
        while not self._stopping.is_set():
            with self._threads_lock:
                config = self.config
                if index >= config.threads:
                    self._threads.pop(index, None)
                    return
            wanted = (config.dedupe_buffer_size, config.threads, config.io_buffer_load_factor)
            if offsets is None or shape != wanted:
                offsets, shape = self._new_map(config), wanted
            try:
                cleaned = self._clean_dirtiest(offsets)
            except _Aborted:
                cleaned = False
            except Exception:
                log.exception("log cleaner failed")
                cleaned = False
            if not cleaned:
                self._back_off(config)

    def _back_off(self, config: CleanerConfig) -> None:
        """Sleep ``backoff_ms``, less if the settings change or the cleaner stops."""
        with self._reconfigured:
            self._reconfigured.wait_for(
                lambda: self._stopping.is_set() or self.config is not config,
                config.backoff_ms / 1000)

    def _on_loop(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` on the event loop and return its result (directly without a loop)."""
        if self._loop is None:
            return fn()
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def call() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the waiting thread
                future.set_exception(exc)
        try:
            self._loop.call_soon_threadsafe(call)
        except RuntimeError as exc:  # the loop is closed
            raise _Aborted("event loop closed") from exc
        while True:
            try:
                return future.result(timeout=0.1)
            except concurrent.futures.TimeoutError:
                if self._stopping.is_set():
                    raise _Aborted("stopping") from None

    def _clean_dirtiest(self, offsets: OffsetMap) -> bool:
        job = self._on_loop(self._take_job)
        if job is None:
            return False
        end: int | None = None
        try:
            end = self._clean(job, offsets)
        except _Aborted as exc:
            log.info("%s: cleaning abandoned: %s", job.log.name, exc)
        except (KafkaError, OSError, MemoryError) as exc:
            log.error("%s: cannot clean, left uncleaned until restart: %s", job.log.name, exc)
            self._on_loop(lambda: self.uncleanable.add(job.key))
        finally:
            offsets.clear()  # its memory goes back to the system until the next round
            entries = self._on_loop(lambda: self._done(job, end))
        if end is not None:
            with self._checkpoint_lock:
                write_offsets(self._checkpoint_path, entries)
        return end is not None

    # -- choosing (event loop) -------------------------------------------------------------

    def _take_job(self) -> _Job | None:
        if self._stopping.is_set():
            return None
        now = int(self._clock() * 1000)
        best: tuple[bool, float, int, int, Key, Log] | None = None
        for key, partition_log in self._logs.logs():
            if not partition_log.config.compacts or key in self._in_progress or \
                    key in self.uncleanable:
                continue
            found = self._cleanable(key, partition_log, now)
            if found is not None and (best is None or found[:2] > best[:2]):
                best = (*found, key, partition_log)
        if best is None:
            return None
        _, _, first_dirty, upper, key, partition_log = best
        job = _Job(key, partition_log, partition_log.config, self._sources(partition_log, upper),
                   first_dirty, upper, partition_log.truncations, {}, now,
                   {txn.last_offset: txn for txn in partition_log.aborted_transactions(
                       partition_log.log_start_offset, upper)})
        if self._producers is not None:
            try:
                job.producers = dict(self._producers(*key))
            except KafkaError as exc:  # not (or no longer) a partition here
                log.info("%s: no producer state to keep (%s)", partition_log.name, exc)
        self._in_progress.add(key)
        return job

    def _cleanable(self, key: Key, partition_log: Log, now: int
                   ) -> tuple[bool, float, int, int] | None:
        """``_dirty_section`` of the log when it qualifies for cleaning now."""
        found = self._dirty_section(key, partition_log, now)
        must_clean, ratio = found[:2]
        if must_clean or ratio > partition_log.config.min_cleanable_dirty_ratio:
            return found
        return None

    def _dirty_section(self, key: Key, partition_log: Log, now: int
                       ) -> tuple[bool, float, int, int]:
        """(must clean now, dirty ratio, first dirty offset, first uncleanable offset); the
        ratio is 0 when nothing is cleanable. A few attribute reads per segment: this runs
        on the event loop for every compacted log."""
        config = partition_log.config
        segments = partition_log.segments
        start = partition_log.log_start_offset
        first_dirty = self._checkpoints.get(key, start)
        if not start <= first_dirty <= partition_log.log_end_offset or \
                self._truncations.get(key, partition_log.truncations) != partition_log.truncations:
            first_dirty = start
        upper = segments.active.base_offset
        stable = partition_log.last_stable_offset
        if stable < upper:
            holder = segments.floor(stable)
            upper = holder.base_offset if holder is not None else start
        clean_bytes = dirty_bytes = 0
        must_clean = False
        for i in range(len(segments) - 1):
            segment = segments[i]
            next_base = segments.next_base(i)
            if segment.base_offset >= upper or next_base is None or segment.file is None:
                upper = min(upper, segment.base_offset)
                break
            if next_base <= first_dirty:
                clean_bytes += segment.size
                continue
            if config.min_compaction_lag_ms > 0 and \
                    _largest_timestamp(segment) > now - config.min_compaction_lag_ms:
                upper = segment.base_offset
                break
            if dirty_bytes == 0 and segment.size:
                first_ts = segment.rolling_timestamp()
                must_clean = first_ts is not None and \
                    now - first_ts > config.max_compaction_lag_ms
            dirty_bytes += segment.size
        if upper <= first_dirty or not dirty_bytes:
            return False, 0.0, first_dirty, upper
        return must_clean, dirty_bytes / (clean_bytes + dirty_bytes), first_dirty, upper

    def _sources(self, partition_log: Log, upper: int) -> list[_Source]:
        """The sealed segments below ``upper``, as the cleaner thread reads them."""
        segments = partition_log.segments
        sources = []
        for i in range(len(segments) - 1):
            segment = segments[i]
            next_base = segments.next_base(i)
            if segment.base_offset >= upper or next_base is None or segment.file is None:
                break
            sources.append(_Source(segment, segment.file, segment.base_offset, segment.size,
                                   next_base, segment.offset_index.entries * 8,
                                   segment.time_index.entries * 12,
                                   os.fstat(segment.fd).st_mtime))
        return sources

    def _done(self, job: _Job, end: int | None) -> dict[Key, int]:
        """The cleaning of ``job`` ended (at ``end`` if it completed); returns the
        checkpoint entries to write."""
        self._in_progress.discard(job.key)
        if end is not None and self._logs.get(*job.key) is job.log:
            self._checkpoints[job.key] = end
            self._truncations[job.key] = job.truncations
            self.cleanings += 1
        self._checkpoints = {key: offset for key, offset in self._checkpoints.items()
                             if self._logs.get(*key) is not None}
        return dict(self._checkpoints)

    def _swap(self, job: _Job, group: list[_Source]) -> LogSegment | None:
        if self._stopping.is_set() or self._logs.get(*job.key) is not job.log:
            return None
        return job.log.replace_segments([source.segment for source in group], job.truncations)

    # -- cleaning (a cleaner thread) -------------------------------------------------------

    def _clean(self, job: _Job, offsets: OffsetMap) -> int:
        """Clean ``job``; returns the offset the round reached (the next first dirty)."""
        started = time.monotonic()
        end = self._build_map(job, offsets)
        read = written = 0
        transactions = Transactions(job.aborted.values())
        for group in self._groups(job, end):
            sizes = self._clean_group(job, offsets, transactions, group, end)
            read += sizes[0]
            written += sizes[1]
        elapsed = time.monotonic() - started
        log.info("%s: cleaned offsets [%d, %d): %d keys, %d bytes -> %d in %.3f s (%.1f MB/s)",
                 job.log.name, job.first_dirty, end, offsets.size, read, written, elapsed,
                 read / max(elapsed, 1e-9) / 1e6)
        return end

    def _build_map(self, job: _Job, offsets: OffsetMap) -> int:
        offsets.clear()
        transactions = Transactions(job.aborted.values())
        for source in job.sources:
            if source.next_base <= job.first_dirty:
                continue  # clean already
            full = self._walk(source, lambda chunk: offsets.add_batches(
                chunk, job.first_dirty, transactions))
            if full:
                break
            # offsets with no record (gaps, the rest of the segment) are covered too
            offsets.latest_offset = max(offsets.latest_offset, source.next_base - 1)
        return offsets.latest_offset + 1

    def _groups(self, job: _Job, end: int) -> list[list[_Source]]:
        """The segments below ``end`` in runs that fit one segment (Kafka's
        ``groupSegmentsBySize``)."""
        groups: list[list[_Source]] = []
        config = job.config
        for source in job.sources:
            if source.base >= end:
                break
            if groups:
                group = groups[-1]
                if sum(s.size for s in group) + source.size <= config.segment_bytes and \
                        sum(s.index_bytes for s in group) + source.index_bytes <= \
                        config.segment_index_bytes and \
                        sum(s.time_index_bytes for s in group) + source.time_index_bytes <= \
                        config.segment_index_bytes and \
                        (source.size == 0 or
                         source.next_base - 1 - group[0].base <= MAX_RELATIVE_OFFSET):
                    group.append(source)
                    continue
            groups.append([source])
        return groups

    def _walk(self, source: _Source, step: Callable[[bytes], tuple[int, bool]]) -> bool:
        """Feed ``source`` to ``step`` in chunks of whole batches (``step`` answers the
        bytes it consumed and whether to stop); True if it stopped."""
        position = 0
        want = self.config.io_buffer_size
        while position < source.size:
            if self._stopping.is_set():
                raise _Aborted("stopping")
            size = min(want, source.size - position)
            chunk = os.pread(source.file.fd, size, position)
            if len(chunk) < size:
                raise _Aborted(f"segment {source.base} shrank under the cleaning")
            self._throttler.maybe_throttle(size)
            consumed, stop = step(chunk)
            if stop:
                return True
            if consumed:
                position += consumed
                continue
            # the next batch is larger than the chunk: read it whole
            batch = read_batch_header(chunk).size if size >= HEADER_SIZE else 0
            if batch <= size or batch > source.size - position:
                raise CorruptRecordError(f"segment {source.base}: bad batch at {position}")
            want = batch
        return False

    def _clean_group(self, job: _Job, offsets: OffsetMap, transactions: Transactions,
                     group: list[_Source], end: int) -> tuple[int, int]:
        """Write the cleaned copy of ``group`` and have it swapped in; returns the bytes
        read and written."""
        base = group[0].base
        # (the .txnindex first: removed first if this fails, see Log.replace_segments)
        paths = {suffix: os.path.join(job.log.directory, file_name(base, suffix + CLEANED_SUFFIX))
                 for suffix in (TXN_INDEX_SUFFIX, LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)}
        written = 0
        try:
            fd = os.open(paths[LOG_SUFFIX], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                         0o644)
            try:
                def step(chunk: bytes) -> tuple[int, bool]:
                    nonlocal written
                    cleaned = offsets.clean_batches(chunk, job.now_ms,
                                                    job.config.delete_retention_ms,
                                                    job.producers, end, transactions)
                    _write_all(fd, cleaned.data)
                    written += len(cleaned.data)
                    self._throttler.maybe_throttle(len(cleaned.data))
                    return cleaned.consumed, False
                for source in group:
                    self._walk(source, step)
                os.fsync(fd)
            finally:
                os.close(fd)
            _write_indexes(paths, base, job.config.index_interval_bytes)
            write_index(paths[TXN_INDEX_SUFFIX],
                        [job.aborted[offset] for offset in transactions.kept_markers()
                         if offset in job.aborted])
            os.utime(paths[LOG_SUFFIX], (group[-1].mtime, group[-1].mtime))
            _crash_point("cleaned")
            swapped = self._on_loop(lambda: self._swap(job, group))
        except BaseException:
            for path in paths.values():
                if os.path.exists(path):
                    os.unlink(path)
            raise
        if swapped is None:
            raise _Aborted(f"the log changed under the cleaning of segment {base}")
        fsync_dir(os.path.dirname(paths[LOG_SUFFIX]))  # the swap's final names, off the loop
        _crash_point("swapped")
        return sum(source.size for source in group), written


def _largest_timestamp(segment: LogSegment) -> int:
    """A segment's largest record timestamp, its file's mtime if it has none (Kafka's
    ``largestTimestamp``)."""
    if segment.max_timestamp >= 0:
        return segment.max_timestamp
    return int(os.fstat(segment.fd).st_mtime * 1000)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _write_indexes(paths: dict[str, str], base: int, interval: int) -> None:
    """The offset and time index of the cleaned log file (one native scan, CRCs checked),
    with the final time index entry a rolled segment gets."""
    size = os.path.getsize(paths[LOG_SUFFIX])
    if size:
        with open(paths[LOG_SUFFIX], "rb") as f, \
                mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as data:
            scan = scan_log(data, 0, size, base, interval)
    else:
        scan = scan_log(b"", 0, 0, base, interval)
    if scan.error is not None:
        raise CorruptRecordError(f"cleaned segment {base}: {scan.error}")
    time_index = scan.time_index
    last = _TIME_ENTRY.unpack_from(time_index, len(time_index) - 12)[0] if time_index else -1
    if scan.batch_count and scan.max_timestamp > last:
        time_index += _TIME_ENTRY.pack(scan.max_timestamp, scan.offset_of_max_timestamp - base)
    for suffix, entries in ((INDEX_SUFFIX, scan.offset_index), (TIME_INDEX_SUFFIX, time_index)):
        with open(paths[suffix], "wb") as out:
            out.write(entries)
            out.flush()
            os.fsync(out.fileno())


def _crash_point(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        log.warning("crash point %s: killing the process", name)
        os.kill(os.getpid(), signal.SIGKILL)

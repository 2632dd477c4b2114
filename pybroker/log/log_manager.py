"""All partition logs of a broker, in one or more log directories (Kafka's ``LogManager``).

Each directory of ``log.dirs`` is laid out as Kafka's, with its own checkpoint files::

    orders-0/                            one directory per partition (log.py)
    orders-1/
    recovery-point-offset-checkpoint     per partition here: offset below which all is fsynced
    log-start-offset-checkpoint          per partition here: first readable offset
    replication-offset-checkpoint        per partition here: high watermark
    .kafka_cleanshutdown                 present only between a clean close and the next
                                         start: the logs need no recovery scan

A partition lives in one directory. A new one goes to the directory with the fewest
partitions (Kafka's rule), ties broken by the fewest bytes, then by the order of
``log.dirs``. The byte totals are at most ``DIR_BYTES_MAX_AGE_S`` old: summing every log's
size at each creation would cost seconds for a topic of thousands of partitions. Two
directories holding the same partition stop the start, as in Kafka. The first directory
(``data_dir``) also holds the broker's own files, which are not this module's business.

A failed directory (Kafka's LogDirFailureChannel): an I/O error that says the disk failed
(``log.is_dir_failure``) on an append, roll or flush of one of its logs, or on writing its
checkpoints, takes the whole directory offline: its logs leave this manager (descriptors
closed, nothing written), ``on_dir_failure(log_dir, partitions)`` tells the broker, which
takes those partitions offline, and the directory is used for nothing more (no
checkpoint, no marker, no new partition) until a restart tries it again. The other
directories go on being served. A directory that cannot be created or read at start is
offline from the start (the first one stops the start instead).

A replica moving to another directory (AlterReplicaLogDirs, Kafka's future log) has a
second, future log ``<topic>-<partition>.<uuid>-future`` in the destination, filled by
the broker's ``LogDirMover`` and swapped in by ``replace_with_future`` once it holds
everything: the future log is flushed and closed, the current directory renamed
``...-delete`` (removed in the background), the future one renamed to the partition's
name and opened again as its log. A stop in between leaves a future directory: at the
next load it becomes the partition's log if the partition has no other (the swap was
under way, and it is complete), else it is removed (the move is abandoned; Kafka resumes
it).

A deleted partition is gone from here at once and its descriptors are closed at once
(``Log.discard``; a region still being sent keeps its own); its directory is renamed
``<topic>-<partition>.<uuid>-delete`` and removed ``file.delete.delay.ms`` later by the
``LogDeleter``, off the event loop. Leftovers of a stop before the removal are removed
after ``load``, in the background.

Thread-safety: not thread-safe except ``new_log`` and ``sync_log_dirs`` (see them); the
broker's event loop calls everything else. A directory failure seen on another thread
(the flusher's) is handed to the event loop the manager was created on. Background threads: ``flusher`` fsyncs rolled
segments, as Kafka's scheduler does, and the ``LogDeleter`` renames and removes deleted
partition directories.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from pybroker.errors import InvalidTopicError, KafkaStorageError
from pybroker.log.checkpoints import (
    HIGH_WATERMARK_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    fsync_dir,
    read_offsets,
    write_offsets,
)
from pybroker.log.log import Log, is_dir_failure
from pybroker.log.log_config import LogConfig
from pybroker.log.log_deleter import LogDeleter
from pybroker.log.producer_state import DEFAULT_EXPIRATION_MS
from pybroker.log.state_machine import SNAPSHOT_BEHIND_BYTES

log = logging.getLogger("pybroker.log")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
CHECKPOINT_INTERVAL_MS = 60_000  # Kafka's log.flush.offset.checkpoint.interval.ms
DIR_BYTES_MAX_AGE_S = 1.0
_PARTITION_DIR = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]{1,249})-(?P<partition>\d+)$")
_DELETED_DIR = re.compile(r"^.+-\d+\.[0-9a-f]{32}-delete$")
FUTURE_SUFFIX = "-future"
_FUTURE_DIR = re.compile(r"^(?P<name>.+-\d+)\.[0-9a-f]{32}-future$")
_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")

Key = tuple[str, int]


def log_dir_of(partition_log: Log) -> str:
    """The log directory holding ``partition_log``."""
    return os.path.dirname(partition_log.directory)


class LogManager:
    """See module doc."""

    def __init__(self, log_dirs: str | Sequence[str], clock: Callable[[], float] = time.time,
                 producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS) -> None:
        """``log_dirs``: one directory or the list of ``log.dirs``, created if missing."""
        self.log_dirs = [os.path.normpath(d) for d in
                         ([log_dirs] if isinstance(log_dirs, str) else log_dirs)]
        self.data_dir = self.log_dirs[0]
        self._clock = clock
        self._producer_id_expiration_ms = producer_id_expiration_ms
        self._logs: dict[Key, Log] = {}
        self._futures: dict[Key, Log] = {}  # replicas moving to another directory
        self._deleter = LogDeleter()
        self._flusher = ThreadPoolExecutor(1, thread_name_prefix="pybroker-log-flush")
        self._last_checkpoint_ms = self._now_ms()
        # placement (new_log may run on other threads): partitions per directory, counted
        # from new_log on, and the byte totals that break ties
        self._placing = threading.Lock()
        self._partition_counts: collections.Counter[str] = collections.Counter()
        self._dir_bytes: dict[str, int] = {}
        self._dir_bytes_at = -DIR_BYTES_MAX_AGE_S
        self.offline_dirs: set[str] = set()
        # fn(log_dir, partitions it held): a directory failed (on the event loop)
        self.on_dir_failure: Callable[[str, list[Key]], None] | None = None
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # (tests drive a manager without a loop, on one thread)
            self._loop = None
        self._loop_thread = threading.get_ident()
        for log_dir in self.log_dirs:
            self._open_dir(log_dir, functools.partial(os.makedirs, log_dir, exist_ok=True))

    def _open_dir(self, log_dir: str, step: Callable[[], object]) -> bool:
        """``step`` at start on ``log_dir``; a failure takes it offline from the start,
        as Kafka starts without such a directory (the first one, which holds the
        broker's own files, stops the start instead)."""
        try:
            step()
            return True
        except OSError as exc:
            if log_dir == self.data_dir:
                raise
            log.error("log directory %s is unusable, offline until a restart: %s",
                      log_dir, exc)
            self.offline_dirs.add(log_dir)
            self._discard_logs_in(log_dir)  # (loaded before the error)
            return False

    def _discard_logs_in(self, log_dir: str) -> list[Key]:
        """Forget and discard the logs of ``log_dir`` (gone offline); their keys."""
        lost = [key for key, partition_log in self._logs.items()
                if log_dir_of(partition_log) == log_dir]
        for key in lost:
            self._logs.pop(key).discard()
        return lost

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # -- loading -------------------------------------------------------------------------

    def load(self, config_for: Callable[[str], LogConfig] | None = None) -> list[Log]:
        """Open every partition directory of every log directory, recovering those of a
        directory whose last stop was unclean (no clean-shutdown marker there).
        ``config_for(topic)`` gives each topic's settings (index interval, sizes); the
        default config otherwise."""
        started = time.monotonic()
        futures: list[str] = []
        for log_dir in self.online_dirs():
            self._open_dir(log_dir, functools.partial(self._load_dir, log_dir, config_for,
                                                      futures))
        for path in futures:
            self._load_future(path, config_for)
        log.info("loaded %d logs in %.3f s", len(self._logs), time.monotonic() - started)
        return list(self._logs.values())

    def _load_dir(self, log_dir: str, config_for: Callable[[str], LogConfig] | None,
                  futures: list[str]) -> None:
        """Load ``log_dir``'s partitions; its future logs go to ``futures``."""
        marker = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
        clean = os.path.exists(marker)
        recovery_points = read_offsets(os.path.join(log_dir, RECOVERY_POINT_FILE))
        start_offsets = read_offsets(os.path.join(log_dir, LOG_START_OFFSET_FILE))
        high_watermarks = read_offsets(os.path.join(log_dir, HIGH_WATERMARK_FILE))
        names = sorted(os.listdir(log_dir))
        if clean or any(_PARTITION_DIR.match(name) for name in names):
            log.info("loading logs from %s after %s shutdown", log_dir,
                     "a clean" if clean else "an unclean")
        else:  # nothing to recover, e.g. a new data dir: not an "unclean shutdown"
            log.info("loading logs from %s: no partitions yet", log_dir)
        for name in names:
            path = os.path.join(log_dir, name)
            if not os.path.isdir(path):
                continue
            if _DELETED_DIR.match(name):
                log.info("removing partition directory left from a deletion: %s", name)
                self._deleter.remove(path)
                continue
            if _FUTURE_DIR.match(name):
                futures.append(path)
                continue
            match = _PARTITION_DIR.match(name)
            if match is None:
                continue
            key = (match["topic"], int(match["partition"]))
            if key in self._logs:  # which one is right is not ours to guess (nor Kafka's)
                raise KafkaStorageError(f"partition {name} is in two log directories: "
                                        f"{log_dir_of(self._logs[key])} and {log_dir}")
            config = config_for(key[0]) if config_for else LogConfig()
            self._logs[key] = Log(path, config, clean=clean,
                                  recovery_point=recovery_points.get(key, 0),
                                  log_start_offset=start_offsets.get(key, 0),
                                  high_watermark=high_watermarks.get(key, 0),
                                  clock=self._clock, flusher=self._flusher,
                                  producer_id_expiration_ms=self._producer_id_expiration_ms,
                                  on_dir_failure=self._log_failed)
            self._partition_counts[log_dir] += 1
        if clean:
            os.unlink(marker)
            fsync_dir(log_dir)

    def _load_future(self, path: str, config_for: Callable[[str], LogConfig] | None) -> None:
        """A future log left by a stop: the partition's log if it has none (the stop came
        during the swap, after the old one was renamed away), else removed."""
        name = _FUTURE_DIR.match(os.path.basename(path))["name"]  # type: ignore[index]
        topic, _, index = name.rpartition("-")
        key = (topic, int(index))
        if key in self._logs:
            log.info("removing %s: the move of %s to another log directory was not "
                     "finished", path, name)
            self._deleter.remove(path)
            return
        final = os.path.join(os.path.dirname(path), name)
        log.warning("%s: finishing its move to %s, interrupted by the last stop", name, final)
        os.rename(path, final)
        fsync_dir(os.path.dirname(final))
        self._logs[key] = Log(final, config_for(topic) if config_for else LogConfig(),
                              clean=False, clock=self._clock, flusher=self._flusher,
                              producer_id_expiration_ms=self._producer_id_expiration_ms,
                              on_dir_failure=self._log_failed)
        self._partition_counts[os.path.dirname(final)] += 1

    # -- partitions ----------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None,
                      sync_dir: bool = True) -> Log:
        """The log of ``topic``/``partition``, created empty if new; a given ``config``
        replaces the settings of an existing log. ``sync_dir=False`` leaves the log
        directory's fsync to the caller (``sync_log_dirs``), for creating many at once."""
        found = self._logs.get((topic, partition))
        if found is not None:
            if config is not None and config != found.config:
                found.update_config(config)
            return found
        created = self.new_log(topic, partition, config)
        if sync_dir:
            fsync_dir(log_dir_of(created))
        return self.adopt(topic, partition, created)

    def new_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """The files of a new log, not yet one of this manager's (``adopt`` makes it so).
        Safe on any thread: it touches only the file system and the log it creates, so
        many logs can be created off the event loop (four file creations each, up to
        tens of milliseconds on a busy disk). Its directory is chosen as the module doc
        says."""
        if not _TOPIC.match(topic) or topic in (".", "..") or partition < 0:
            raise InvalidTopicError(f"illegal topic or partition {topic!r}/{partition}")
        self.finish_deletions(topic)  # a deleted log's directory may still have this name
        with self._placing:
            log_dir = self._next_log_dir()
            self._partition_counts[log_dir] += 1
        try:
            return Log(os.path.join(log_dir, f"{topic}-{partition}"), config or LogConfig(),
                       clock=self._clock, flusher=self._flusher,
                       producer_id_expiration_ms=self._producer_id_expiration_ms,
                       on_dir_failure=self._log_failed)
        except BaseException as exc:
            with self._placing:
                self._partition_counts[log_dir] -= 1
            if isinstance(exc, OSError):
                self._dir_failed_on_any_thread(log_dir, exc)
            raise

    def _next_log_dir(self) -> str:
        """The directory of the next new partition (holding ``_placing``)."""
        online = self.online_dirs()
        if not online:
            raise KafkaStorageError("every log directory is offline")
        if len(online) == 1:
            return online[0]
        fewest = min(self._partition_counts[d] for d in online)
        tied = [d for d in online if self._partition_counts[d] == fewest]
        if len(tied) == 1:
            return tied[0]
        now = time.monotonic()
        if now - self._dir_bytes_at >= DIR_BYTES_MAX_AGE_S:
            sizes: collections.Counter[str] = collections.Counter()
            for partition_log in list(self._logs.values()):
                sizes[log_dir_of(partition_log)] += partition_log.size()
            self._dir_bytes, self._dir_bytes_at = dict(sizes), now
        return min(tied, key=lambda d: self._dir_bytes.get(d, 0))  # (first of equals)

    def adopt(self, topic: str, partition: int, created: Log) -> Log:
        """Make a log from ``new_log`` this manager's (on the event loop)."""
        self._logs[(topic, partition)] = created
        log.info("created log %s", created.directory)
        return created

    def sync_log_dirs(self) -> None:
        """Make the creation of partition directories durable (after sync_dir=False).
        Safe on any thread (callers run it off the event loop)."""
        for log_dir in self.online_dirs():
            try:
                fsync_dir(log_dir)
            except OSError as exc:
                self._dir_failed_on_any_thread(log_dir, exc)
                if not is_dir_failure(exc):
                    raise

    def delete(self, topic: str, partition: int) -> bool:
        """Remove a partition: gone from here and its descriptors closed at once, its
        directory renamed in the background and removed ``file.delete.delay.ms`` later."""
        doomed = self._logs.pop((topic, partition), None)
        if doomed is None:
            return False
        self.abandon_future(topic, partition)
        doomed.discard()
        with self._placing:
            self._partition_counts[log_dir_of(doomed)] -= 1
        self._deleter.delete(doomed.directory, doomed.config.file_delete_delay_ms)
        return True

    # -- moves between directories ------------------------------------------------------

    def future(self, topic: str, partition: int) -> Log | None:
        return self._futures.get((topic, partition))

    def futures(self) -> list[tuple[Key, Log]]:
        return list(self._futures.items())

    def create_future(self, topic: str, partition: int, log_dir: str) -> Log:
        """An empty future log of the partition in ``log_dir`` (replacing an earlier
        future of it); its filler sets where it starts."""
        key = (topic, partition)
        current = self._logs[key]
        self.abandon_future(topic, partition)
        path = os.path.join(log_dir, f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_SUFFIX}")
        try:
            future = Log(path, current.config, clock=self._clock, flusher=self._flusher,
                         producer_id_expiration_ms=self._producer_id_expiration_ms,
                         on_dir_failure=self._log_failed)
        except OSError as exc:
            self._dir_failed_on_any_thread(log_dir, exc)
            raise
        self._futures[key] = future
        with self._placing:
            self._partition_counts[log_dir] += 1
        log.info("%s-%d: moving to %s (future log %s)", topic, partition, log_dir,
                 os.path.basename(path))
        return future

    def abandon_future(self, topic: str, partition: int) -> None:
        """Drop the partition's future log (its directory removed in the background)."""
        future = self._futures.pop((topic, partition), None)
        if future is None:
            return
        future.discard()
        with self._placing:
            self._partition_counts[log_dir_of(future)] -= 1
        self._deleter.remove(future.directory)

    def replace_with_future(self, topic: str, partition: int) -> Log:
        """The future log becomes the partition's log (Kafka's replaceCurrentWithFutureLog),
        as the module doc says; returns it. The caller has made sure it holds everything
        the current log holds and that nothing appends meanwhile (this does not await)."""
        key = (topic, partition)
        current, future = self._logs[key], self._futures.pop(key)
        future.flush()
        future.close()
        doomed = f"{current.directory}.{uuid.uuid4().hex}-delete"
        os.rename(current.directory, doomed)
        fsync_dir(log_dir_of(current))
        final = os.path.join(log_dir_of(future), f"{topic}-{partition}")
        os.rename(future.directory, final)
        fsync_dir(log_dir_of(future))
        moved = Log(final, current.config, log_start_offset=current.log_start_offset,
                    high_watermark=current.high_watermark, clock=self._clock,
                    flusher=self._flusher,
                    producer_id_expiration_ms=self._producer_id_expiration_ms,
                    on_dir_failure=self._log_failed)
        epochs = moved.leader_epoch_cache
        for epoch, start in current.leader_epoch_cache.entries():
            if epoch > epochs.latest_epoch:  # an epoch begun with no batch in it yet
                epochs.assign(epoch, start)
        self._logs[key] = moved
        current.discard()
        with self._placing:
            self._partition_counts[log_dir_of(current)] -= 1
        self._deleter.remove(doomed)
        self.checkpoint_soon()
        log.info("%s-%d: moved to %s", topic, partition, log_dir_of(moved))
        return moved

    def finish_deletions(self, topic: str) -> None:
        """Make the deletion of ``topic``'s partition directories durable now (a topic is
        created again under its name): renamed and the data directory fsynced."""
        self._deleter.finish(topic)

    def deletion_pending(self, topic: str) -> bool:
        """Whether a directory of deleted ``topic`` may still reappear after a crash (its
        rename is not yet done or not yet durable), or after a restart that finds an
        offline log directory back (its logs there could not be deleted)."""
        return self._deleter.pending(topic) or bool(self.offline_dirs)

    def logs(self) -> Iterator[tuple[Key, Log]]:
        return iter(list(self._logs.items()))

    def online_dirs(self) -> list[str]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def logs_by_dir(self) -> dict[str, list[tuple[Key, Log]]]:
        """Every online log directory (in ``log.dirs`` order) with the logs it holds."""
        by_dir: dict[str, list[tuple[Key, Log]]] = {d: [] for d in self.online_dirs()}
        for key, partition_log in self._logs.items():
            by_dir[log_dir_of(partition_log)].append((key, partition_log))
        return by_dir

    # -- failed directories ----------------------------------------------------------------

    def _log_failed(self, partition_log: Log, exc: OSError) -> None:
        """A log's ``on_dir_failure`` (any thread). A log no longer ours (deleted, its
        directory renamed under a background flush) says nothing of its directory."""
        ours = [*self._logs.values(), *self._futures.values()]  # (one copy: other threads)
        if not any(lg is partition_log for lg in ours):
            return
        self._dir_failed_on_any_thread(log_dir_of(partition_log), exc)

    def _dir_failed_on_any_thread(self, log_dir: str, exc: OSError) -> None:
        if not is_dir_failure(exc):
            return
        if self._loop is None or threading.get_ident() == self._loop_thread:
            self.fail_dir(log_dir, exc)
            return
        try:
            self._loop.call_soon_threadsafe(self.fail_dir, log_dir, exc)
        except RuntimeError:  # the loop is closed: the broker is gone, and so is the dir
            log.error("log directory %s failed after the broker stopped: %s", log_dir, exc)

    def fail_dir(self, log_dir: str, cause: OSError) -> None:
        """Take ``log_dir`` offline (see the module doc); once, later calls do nothing."""
        if log_dir in self.offline_dirs:
            return
        self.offline_dirs.add(log_dir)
        lost = self._discard_logs_in(log_dir)
        lost_keys = set(lost)
        for key, future in list(self._futures.items()):  # moves to or from it end
            if log_dir_of(future) == log_dir or key in lost_keys:
                del self._futures[key]
                future.discard()
        log.error("log directory %s failed (%s): its %d partitions are offline until a "
                  "restart; %d of %d directories are online", log_dir, cause, len(lost),
                  len(self.log_dirs) - len(self.offline_dirs), len(self.log_dirs))
        if self.on_dir_failure is not None:
            self.on_dir_failure(log_dir, lost)

    def _on_each_log(self, work: Callable[[Log], int | bool | None]) -> int:
        """``work`` on every log, summed; an I/O error of one log fails its directory
        (or, a space error, is logged) instead of stopping the others."""
        done = 0
        for _, partition_log in self.logs():
            if log_dir_of(partition_log) in self.offline_dirs:
                continue  # (failed during this round)
            try:
                done += int(work(partition_log) or 0)
            except OSError as exc:
                log.warning("%s: %s failed: %s", partition_log.name,
                            getattr(work, "__name__", "periodic work"), exc)
                self._log_failed(partition_log, exc)
        return done

    # -- periodic work ---------------------------------------------------------------------

    def expire_producers(self) -> int:
        """Forget idle producers in every log (``producer.id.expiration.ms``); returns how
        many. The broker calls this every ``producer.id.expiration.check.interval.ms``."""
        now = self._now_ms()
        return self._on_each_log(lambda lg: lg.producer_state.expire_idle(now))

    def run_retention(self) -> int:
        """Apply retention to every log; returns the number of segments deleted. The
        broker calls this every ``log.retention.check.interval.ms``."""
        def run(partition_log: Log) -> int:
            deleted = partition_log.delete_old_segments()
            partition_log.delete_expired_files()
            return deleted
        return self._on_each_log(run)

    def flush_due(self) -> None:
        """``flush.ms`` per log, and every minute the offset checkpoints and a snapshot of
        the state machines of each log that grew by ``SNAPSHOT_BEHIND_BYTES`` since its
        last one. The broker calls this every ``log.flush.scheduler.interval.ms``."""
        self._on_each_log(Log.flush_if_due)
        now = self._now_ms()
        if now - self._last_checkpoint_ms >= CHECKPOINT_INTERVAL_MS:
            self._on_each_log(lambda lg: lg.snapshot_state_if_behind(SNAPSHOT_BEHIND_BYTES))
            self.checkpoint_soon()

    def checkpoint(self) -> None:
        """Write the recovery point, log start and high watermark checkpoint files now."""
        self._write_checkpoints(self._checkpoint_offsets())

    def checkpoint_soon(self) -> None:
        """``checkpoint`` with the offsets of now, written by the flusher thread: three
        fsynced file replacements cost the event loop up to seconds on a busy disk.
        The flusher writes them in order, and ``close`` waits for it before its own."""
        offsets = self._checkpoint_offsets()
        self._flusher.submit(self._write_checkpoints, offsets)

    def _checkpoint_offsets(self) -> dict[str, dict[str, dict[Key, int]]]:
        """Log directory -> checkpoint file name -> its entries, for every online one."""
        self._last_checkpoint_ms = self._now_ms()
        return {log_dir: {
            RECOVERY_POINT_FILE: {key: lg.recovery_point for key, lg in logs},
            LOG_START_OFFSET_FILE: {key: lg.log_start_offset for key, lg in logs},
            HIGH_WATERMARK_FILE: {key: lg.high_watermark for key, lg in logs}}
            for log_dir, logs in self.logs_by_dir().items()}

    def _write_checkpoints(self, offsets: dict[str, dict[str, dict[Key, int]]]) -> None:
        """Write each directory's files; a directory that fails them fails (any thread)."""
        for log_dir, files in offsets.items():
            try:
                for name, entries in files.items():
                    write_offsets(os.path.join(log_dir, name), entries)
            except OSError as exc:
                log.error("writing the offset checkpoints in %s failed: %s", log_dir, exc)
                self._dir_failed_on_any_thread(log_dir, exc)

    def close(self, clean: bool = True) -> None:
        """Close every log. ``clean``: flush them, write the checkpoints and the
        clean-shutdown marker, so the next start skips recovery."""
        self._flusher.shutdown(wait=True)
        if clean:
            self._on_each_log(Log.flush)
        self.checkpoint()
        self._on_each_log(Log.close)
        self._logs.clear()
        for key, _ in self.futures():  # (the next load removes their directories)
            self.abandon_future(*key)
        self._deleter.close()
        if clean:
            for log_dir in self.online_dirs():
                with open(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE), "wb") as f:
                    os.fsync(f.fileno())
                fsync_dir(log_dir)
        log.info("closed logs in %s (%s)", ",".join(self.log_dirs),
                 "clean" if clean else "unclean")

"""All partition logs of a broker, in one data directory (Kafka's ``LogManager``).

Layout of ``data_dir``::

    orders-0/                            one directory per partition (log.py)
    orders-1/
    recovery-point-offset-checkpoint     per partition: offset below which all is fsynced
    log-start-offset-checkpoint          per partition: first readable offset
    replication-offset-checkpoint        per partition: high watermark
    .kafka_cleanshutdown                 present only between a clean close and the next
                                         start: the logs need no recovery scan

A deleted partition is gone from here at once and its descriptors are closed at once
(``Log.discard``; a region still being sent keeps its own); its directory is renamed
``<topic>-<partition>.<uuid>-delete`` and removed ``file.delete.delay.ms`` later by the
``LogDeleter``, off the event loop. Leftovers of a stop before the removal are removed
after ``load``, in the background.

Thread-safety: not thread-safe; the broker's event loop calls everything. Background
threads: ``flusher`` fsyncs rolled segments, as Kafka's scheduler does, and the
``LogDeleter`` renames and removes deleted partition directories.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from pybroker.errors import InvalidTopicError
from pybroker.log.checkpoints import (
    HIGH_WATERMARK_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    fsync_dir,
    read_offsets,
    write_offsets,
)
from pybroker.log.log import Log
from pybroker.log.log_config import LogConfig
from pybroker.log.log_deleter import LogDeleter
from pybroker.log.producer_state import DEFAULT_EXPIRATION_MS
from pybroker.log.state_machine import SNAPSHOT_BEHIND_BYTES

log = logging.getLogger("pybroker.log")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
CHECKPOINT_INTERVAL_MS = 60_000  # Kafka's log.flush.offset.checkpoint.interval.ms
_PARTITION_DIR = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]{1,249})-(?P<partition>\d+)$")
_DELETED_DIR = re.compile(r"^.+-\d+\.[0-9a-f]{32}-delete$")
_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class LogManager:
    """See module doc."""

    def __init__(self, data_dir: str, clock: Callable[[], float] = time.time,
                 producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS) -> None:
        self.data_dir = data_dir
        self._clock = clock
        self._producer_id_expiration_ms = producer_id_expiration_ms
        self._logs: dict[tuple[str, int], Log] = {}
        self._deleter = LogDeleter(data_dir)
        self._flusher = ThreadPoolExecutor(1, thread_name_prefix="pybroker-log-flush")
        self._last_checkpoint_ms = self._now_ms()
        os.makedirs(data_dir, exist_ok=True)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _path(self, name: str) -> str:
        return os.path.join(self.data_dir, name)

    # -- loading -------------------------------------------------------------------------

    def load(self, config_for: Callable[[str], LogConfig] | None = None) -> list[Log]:
        """Open every partition directory, recovering them if the last stop was unclean
        (no clean-shutdown marker). ``config_for(topic)`` gives each topic's settings
        (index interval, sizes); the default config otherwise."""
        marker = self._path(CLEAN_SHUTDOWN_FILE)
        clean = os.path.exists(marker)
        recovery_points = read_offsets(self._path(RECOVERY_POINT_FILE))
        start_offsets = read_offsets(self._path(LOG_START_OFFSET_FILE))
        high_watermarks = read_offsets(self._path(HIGH_WATERMARK_FILE))
        names = sorted(os.listdir(self.data_dir))
        if clean or any(_PARTITION_DIR.match(name) for name in names):
            log.info("loading logs from %s after %s shutdown", self.data_dir,
                     "a clean" if clean else "an unclean")
        else:  # nothing to recover, e.g. a new data dir: not an "unclean shutdown"
            log.info("loading logs from %s: no partitions yet", self.data_dir)
        started = time.monotonic()
        for name in names:
            path = self._path(name)
            if not os.path.isdir(path):
                continue
            if _DELETED_DIR.match(name):
                log.info("removing partition directory left from a deletion: %s", name)
                self._deleter.remove(path)
                continue
            match = _PARTITION_DIR.match(name)
            if match is None:
                continue
            key = (match["topic"], int(match["partition"]))
            config = config_for(key[0]) if config_for else LogConfig()
            self._logs[key] = Log(path, config, clean=clean,
                                  recovery_point=recovery_points.get(key, 0),
                                  log_start_offset=start_offsets.get(key, 0),
                                  high_watermark=high_watermarks.get(key, 0),
                                  clock=self._clock, flusher=self._flusher,
                                  producer_id_expiration_ms=self._producer_id_expiration_ms)
        if clean:
            os.unlink(marker)
            fsync_dir(self.data_dir)
        log.info("loaded %d logs in %.3f s", len(self._logs), time.monotonic() - started)
        return list(self._logs.values())

    # -- partitions ----------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None,
                      sync_dir: bool = True) -> Log:
        """The log of ``topic``/``partition``, created empty if new; a given ``config``
        replaces the settings of an existing log. ``sync_dir=False`` leaves the data
        directory's fsync to the caller (``sync_data_dir``), for creating many at once."""
        found = self._logs.get((topic, partition))
        if found is not None:
            if config is not None and config != found.config:
                found.update_config(config)
            return found
        created = self.new_log(topic, partition, config)
        if sync_dir:
            fsync_dir(self.data_dir)
        return self.adopt(topic, partition, created)

    def new_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """The files of a new log, not yet one of this manager's (``adopt`` makes it so).
        Safe on any thread: it touches only the file system and the log it creates, so
        many logs can be created off the event loop (four file creations each, up to
        tens of milliseconds on a busy disk)."""
        if not _TOPIC.match(topic) or topic in (".", "..") or partition < 0:
            raise InvalidTopicError(f"illegal topic or partition {topic!r}/{partition}")
        self.finish_deletions(topic)  # a deleted log's directory may still have this name
        return Log(self._path(f"{topic}-{partition}"), config or LogConfig(),
                   clock=self._clock, flusher=self._flusher,
                   producer_id_expiration_ms=self._producer_id_expiration_ms)

    def adopt(self, topic: str, partition: int, created: Log) -> Log:
        """Make a log from ``new_log`` this manager's (on the event loop)."""
        self._logs[(topic, partition)] = created
        log.info("created log %s", created.directory)
        return created

    def sync_data_dir(self) -> None:
        """Make the creation of partition directories durable (after sync_dir=False).
        Safe on any thread (callers run it off the event loop)."""
        fsync_dir(self.data_dir)

    def delete(self, topic: str, partition: int) -> bool:
        """Remove a partition: gone from here and its descriptors closed at once, its
        directory renamed in the background and removed ``file.delete.delay.ms`` later."""
        doomed = self._logs.pop((topic, partition), None)
        if doomed is None:
            return False
        doomed.discard()
        self._deleter.delete(doomed.directory, doomed.config.file_delete_delay_ms)
        return True

    def finish_deletions(self, topic: str) -> None:
        """Make the deletion of ``topic``'s partition directories durable now (a topic is
        created again under its name): renamed and the data directory fsynced."""
        self._deleter.finish(topic)

    def deletion_pending(self, topic: str) -> bool:
        """Whether a directory of deleted ``topic`` may still reappear after a crash (its
        rename is not yet done or not yet durable)."""
        return self._deleter.pending(topic)

    def logs(self) -> Iterator[tuple[tuple[str, int], Log]]:
        return iter(list(self._logs.items()))

    # -- periodic work ---------------------------------------------------------------------

    def expire_producers(self) -> int:
        """Forget idle producers in every log (``producer.id.expiration.ms``); returns how
        many. The broker calls this every ``producer.id.expiration.check.interval.ms``."""
        now = self._now_ms()
        return sum(lg.producer_state.expire_idle(now) for _, lg in self.logs())

    def run_retention(self) -> int:
        """Apply retention to every log; returns the number of segments deleted. The
        broker calls this every ``log.retention.check.interval.ms``."""
        deleted = 0
        for _, partition_log in self.logs():
            deleted += partition_log.delete_old_segments()
            partition_log.delete_expired_files()
        return deleted

    def flush_due(self) -> None:
        """``flush.ms`` per log, and every minute the offset checkpoints and a snapshot of
        the state machines of each log that grew by ``SNAPSHOT_BEHIND_BYTES`` since its
        last one. The broker calls this every ``log.flush.scheduler.interval.ms``."""
        for _, partition_log in self.logs():
            partition_log.flush_if_due()
        now = self._now_ms()
        if now - self._last_checkpoint_ms >= CHECKPOINT_INTERVAL_MS:
            for _, partition_log in self.logs():
                partition_log.snapshot_state_if_behind(SNAPSHOT_BEHIND_BYTES)
            self.checkpoint_soon()

    def checkpoint(self) -> None:
        """Write the recovery point, log start and high watermark checkpoint files now."""
        self._write_checkpoints(self._checkpoint_offsets())

    def checkpoint_soon(self) -> None:
        """``checkpoint`` with the offsets of now, written by the flusher thread: three
        fsynced file replacements cost the event loop up to seconds on a busy disk.
        The flusher writes them in order, and ``close`` waits for it before its own."""
        offsets = self._checkpoint_offsets()
        self._flusher.submit(self._write_checkpoints_logged, offsets)

    def _checkpoint_offsets(self) -> dict[str, dict[tuple[str, int], int]]:
        logs = self._logs.items()
        self._last_checkpoint_ms = self._now_ms()
        return {RECOVERY_POINT_FILE: {key: lg.recovery_point for key, lg in logs},
                LOG_START_OFFSET_FILE: {key: lg.log_start_offset for key, lg in logs},
                HIGH_WATERMARK_FILE: {key: lg.high_watermark for key, lg in logs}}

    def _write_checkpoints(self, offsets: dict[str, dict[tuple[str, int], int]]) -> None:
        for name, entries in offsets.items():
            write_offsets(self._path(name), entries)

    def _write_checkpoints_logged(self, offsets: dict[str, dict[tuple[str, int], int]]) -> None:
        try:
            self._write_checkpoints(offsets)
        except OSError as exc:
            log.error("writing the offset checkpoints in %s failed: %s", self.data_dir, exc)

    def close(self, clean: bool = True) -> None:
        """Close every log. ``clean``: flush them, write the checkpoints and the
        clean-shutdown marker, so the next start skips recovery."""
        self._flusher.shutdown(wait=True)
        if clean:
            for _, partition_log in self.logs():
                partition_log.flush()
        self.checkpoint()
        for _, partition_log in self.logs():
            partition_log.close()
        self._logs.clear()
        self._deleter.close()
        if clean:
            with open(self._path(CLEAN_SHUTDOWN_FILE), "wb") as f:
                os.fsync(f.fileno())
            fsync_dir(self.data_dir)
        log.info("closed logs in %s (%s)", self.data_dir, "clean" if clean else "unclean")

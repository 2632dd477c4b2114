"""Deleted partition directories: renamed, made durable and removed, on a thread of its own.

A deleted partition's directory ``<topic>-<partition>`` is renamed
``<topic>-<partition>.<uuid>-delete`` (Kafka's name), each log directory holding one is
fsynced once for all the renames queued together, and the renamed directory is removed
``file.delete.delay.ms`` after the deletion (a timer here, not the retention run). None of
it runs on the event loop: renaming and fsyncing the data directory per partition there
held the broker 37 s for one 5,000-partition topic, and the files waited for the next
retention run (up to 5 minutes) to be freed. The partition's descriptors are the log's
business and are closed at once (``Log.discard``); a region still being sent keeps its own
(``OpenFile``), so removing the files early never breaks a send.

``finish(topic)`` does the queued renames of one topic at once on the caller's thread, with
the fsync: a topic created again under the name of one being deleted must not find the old
directories where its new logs go, nor have its ``topics.json`` entry written while a
crash could still bring them back.

Thread-safety: ``delete``, ``remove``, ``finish``, ``pending`` and ``close`` may be called
from any thread (the event loop calls them). One condition guards the queues; a rename is
done holding it, so ``finish`` and the thread never rename the same directory twice, and
the loop waits at most one rename for it.
"""

from __future__ import annotations

import collections
import heapq
import logging
import os
import shutil
import threading
import time
import uuid

from pybroker.log.checkpoints import fsync_dir

log = logging.getLogger("pybroker.log")

DELETED_DIR_SUFFIX = "-delete"


def partition_topic(directory: str) -> str:
    """The topic of a partition directory ``.../<topic>-<partition>``."""
    return os.path.basename(directory).rpartition("-")[0]


class LogDeleter:
    """See module doc."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._renames: dict[str, float] = {}        # directory -> when it may be removed
        self._unsynced: set[str] = set()            # renamed; its log dir not fsynced since
        self._topics: collections.Counter[str] = collections.Counter()  # of both above
        self._removals: list[tuple[float, str]] = []  # heap of (due, renamed directory)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="pybroker-log-delete",
                                        daemon=True)
        self._thread.start()

    def delete(self, directory: str, delay_ms: int) -> None:
        """Rename ``directory`` soon and remove it ``delay_ms`` from now."""
        with self._cond:
            self._renames[directory] = time.monotonic() + delay_ms / 1000
            self._topics[partition_topic(directory)] += 1
            self._cond.notify()

    def remove(self, path: str) -> None:
        """Remove an already renamed directory (a leftover found at start) now."""
        with self._cond:
            heapq.heappush(self._removals, (0.0, path))
            self._cond.notify()

    def pending(self, topic: str) -> bool:
        """Whether a directory of ``topic`` is not yet renamed, or renamed but not durably."""
        with self._cond:
            return self._topics[topic] > 0

    def finish(self, topic: str) -> None:
        """Rename the queued directories of ``topic`` now and make every rename durable."""
        with self._cond:
            if not self._topics[topic]:
                return
            for directory in [d for d in self._renames if partition_topic(d) == topic]:
                self._rename(directory, self._renames.pop(directory))
        self._sync()

    def close(self) -> None:
        """Finish the renames, remove every renamed directory (due or not: nothing reads
        them any more) and stop the thread."""
        with self._cond:
            self._stopping = True
            self._removals = [(0.0, path) for _, path in self._removals]
            self._cond.notify()
        self._thread.join()

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._renames and not self._due():
                    if self._stopping and not self._removals:
                        return
                    self._cond.wait(self._removals[0][0] - time.monotonic()
                                    if self._removals else None)
            try:
                self._rename_queued()
                self._remove_due()
            except Exception:  # (an fsync failing: the renames stay unsynced, tried again)
                log.exception("deleting partition directories")

    def _due(self) -> bool:
        return bool(self._removals) and self._removals[0][0] <= time.monotonic()

    def _rename_queued(self) -> None:
        renamed = 0
        while True:
            with self._cond:
                if not self._renames:
                    break
                directory = next(iter(self._renames))
                self._rename(directory, self._renames.pop(directory))
            renamed += 1
        if renamed:
            self._sync()
            log.info("renamed %d deleted partition directories for removal", renamed)

    def _rename(self, directory: str, due: float) -> None:
        """Rename one directory (holding the condition) and schedule its removal."""
        renamed = f"{directory}.{uuid.uuid4().hex}{DELETED_DIR_SUFFIX}"
        try:
            os.rename(directory, renamed)
        except OSError as exc:
            log.error("cannot rename deleted partition directory %s: %s", directory, exc)
            self._settled(directory)
            return
        self._unsynced.add(directory)
        heapq.heappush(self._removals, (0.0 if self._stopping else due, renamed))
        self._cond.notify()

    def _sync(self) -> None:
        """fsync the log directories renamed in: every rename done before is durable."""
        with self._cond:
            synced = set(self._unsynced)
        if not synced:
            return
        for log_dir in {os.path.dirname(directory) for directory in synced}:
            fsync_dir(log_dir)
        with self._cond:
            synced &= self._unsynced  # (the other caller's fsync may have counted some)
            self._unsynced -= synced
            for directory in synced:
                self._settled(directory)

    def _settled(self, directory: str) -> None:
        """``directory``'s deletion can no longer be undone by a crash (holding the
        condition)."""
        topic = partition_topic(directory)
        self._topics[topic] -= 1
        if not self._topics[topic]:
            del self._topics[topic]

    def _remove_due(self) -> None:
        with self._cond:
            now = time.monotonic()
            due = []
            while self._removals and self._removals[0][0] <= now:
                due.append(heapq.heappop(self._removals)[1])
        for path in due:
            shutil.rmtree(path, ignore_errors=True)
            if os.path.exists(path):
                log.error("could not remove deleted partition directory %s", path)
        if due:
            log.info("removed %d deleted partition directories", len(due))

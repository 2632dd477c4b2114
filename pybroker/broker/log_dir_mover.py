"""Moves of replicas between this broker's log directories (AlterReplicaLogDirs; Kafka's
ReplicaAlterLogDirsManager and its thread).

A move fills the partition's future log (``LogManager.create_future``) from its current
log while the partition goes on being served: chunks of whole batches (``CHUNK_BYTES``)
read from the current log's files on a worker thread, appended to the future log as a
follower's are (offsets, leader epochs and producer state as they are). Once the future
log has caught up, the swap happens on the event loop, with no await between the last
check and the swap, at a moment no append of the partition is queued or being written:
the batches appended since the last chunk are copied then (up to ``SWAP_MAX_BYTES``, else
one more round), and ``LogManager.replace_with_future`` makes the future log the
partition's. Every append before the swap went to the old log and was copied, every one
after goes to the new log: nothing acknowledged is lost, and clients see no error.

A truncation of the current log (a follower's diverged tail) starts the copy again from
the log start, and so does retention moving the log start past what was copied. A move
ends without a swap (its future log removed) when the partition is deleted or goes
offline, a directory of the move fails, or a new request names another directory (then
a new move starts) or the current one.

Thread-safety: the event loop only; the copy's reads run on a worker thread, holding the
file regions they read (so the descriptors stay open).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

from pybroker.errors import KafkaStorageError
from pybroker.file_region import FileRegion
from pybroker.log.log_manager import LogManager, log_dir_of

if TYPE_CHECKING:
    from pybroker.broker.partition import Partition
    from pybroker.log.log import Log, ReadResult

log = logging.getLogger("pybroker.log")

CHUNK_BYTES = 1 << 20  # Kafka's replica.fetch.max.bytes default
SWAP_MAX_BYTES = 4 << 20  # copied inline at the swap (the loop waits for it), else a round

Key = tuple[str, int]


def _first_batch_offset(source: Log) -> int:
    """Where a copy of ``source`` starts: the base offset of the batch holding its log
    start (DeleteRecords may have moved the start inside a batch)."""
    found = source.read(source.log_start_offset, 1)
    return found.first_offset if found.size else source.log_start_offset


def _read_from(source: Log, offset: int) -> ReadResult:
    """A chunk of ``source`` from ``offset``, where the copy is: at most the base of the
    batch holding the log start, which is read by asking for the log start."""
    return source.read(max(offset, source.log_start_offset), CHUNK_BYTES)


def _read_regions(regions: list[FileRegion]) -> bytes:
    return b"".join(os.pread(r.fd, r.length, r.position) for r in regions)


class LogDirMover:
    """See module doc."""

    def __init__(self, logs: LogManager) -> None:
        self._logs = logs
        self._moves: dict[Key, asyncio.Task[None]] = {}

    def move(self, partition: Partition, log_dir: str) -> None:
        """Move ``partition``'s replica (it has one, online) to ``log_dir`` (one of the
        log directories, online). Nothing to do if it is there or moving there already;
        a move elsewhere is abandoned first. Raises ``OSError`` or ``KafkaStorageError``
        if the future log cannot be created."""
        key = (partition.topic, partition.index)
        future = self._logs.future(*key)
        if future is not None and log_dir_of(future) == log_dir and key in self._moves:
            return
        self.cancel(key)
        if log_dir_of(partition.log) == log_dir:
            return
        future = self._logs.create_future(partition.topic, partition.index, log_dir)
        self._moves[key] = asyncio.get_running_loop().create_task(
            self._run(partition, future), name=f"move {partition.topic}-{partition.index}")

    def cancel(self, key: Key) -> None:
        task = self._moves.pop(key, None)
        if task is not None:
            task.cancel()
        self._logs.abandon_future(*key)

    async def close(self) -> None:
        tasks = list(self._moves.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._moves.clear()

    async def _run(self, partition: Partition, future: Log) -> None:
        key = (partition.topic, partition.index)
        try:
            await self._copy(partition, future)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a read or write failing: the replica stays where it is
            log.warning("%s-%d: move to %s abandoned: %s", *key, log_dir_of(future), exc)
        finally:
            if self._moves.get(key) is asyncio.current_task():
                del self._moves[key]
                if self._logs.future(*key) is future:
                    self._logs.abandon_future(*key)

    def _still_moving(self, partition: Partition, source: Log, future: Log) -> bool:
        return (partition.log is source and not partition.deleted and not partition.offline
                and self._logs.future(partition.topic, partition.index) is future)

    async def _copy(self, partition: Partition, future: Log) -> None:
        source = partition.log
        truncations = source.truncations
        while self._still_moving(partition, source, future):
            start = _first_batch_offset(source)
            if source.truncations != truncations or future.log_end_offset < start:
                truncations = source.truncations
                future.truncate_fully_and_start_at(start)
            offset = future.log_end_offset
            if offset >= source.log_end_offset:
                await partition.appends_done()
                if self._still_moving(partition, source, future) and \
                        source.truncations == truncations and self._swap(partition, future):
                    return
                await asyncio.sleep(0)  # (appends came meanwhile: copy them first)
                continue
            regions = _read_from(source, offset).regions
            if not regions:  # (cannot be: below the log end there is a batch)
                raise KafkaStorageError(f"{source.name}: nothing to read at {offset}")
            data = await asyncio.to_thread(_read_regions, regions)
            if self._still_moving(partition, source, future) and \
                    source.truncations == truncations:
                future.append_as_follower(data)

    def _swap(self, partition: Partition, future: Log) -> bool:
        """Copy what was appended since the last chunk and swap, if nothing is being
        appended now; no await, so no append comes in between."""
        if partition.appending:
            return False
        source = partition.log
        copied = 0
        while future.log_end_offset < source.log_end_offset:
            result = _read_from(source, future.log_end_offset)
            copied += result.size
            if not result.size or copied > SWAP_MAX_BYTES:
                return False
            future.append_as_follower(_read_regions(result.regions))
        partition.log = self._logs.replace_with_future(partition.topic, partition.index)
        return True

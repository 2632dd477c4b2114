"""State derived from a partition's batches, kept by the log (Kafka's ``ProducerStateManager``
under ``UnifiedLog``; Redpanda's ``disk_log_impl`` telling its state machines when to
snapshot).

A ``LogStateMachine`` sees every batch of its partition once, in offset order, as a batch
header (``BatchInfo``: offsets, producer id and epoch, base sequence, timestamps, the
transactional and control bits) and never record by record. The ``Log`` drives it:

- append (leader, follower, and the replay below): ``apply`` for each batch written;
- segment roll: ``take_snapshot`` at the new segment's base offset, the log end, so an
  unclean restart replays at most the segments written since;
- clean close: ``take_snapshot`` at the log end, so a clean restart replays nothing;
- every minute, if more than ``SNAPSHOT_BEHIND_BYTES`` were appended since the last
  snapshot: ``take_snapshot`` at the log end, so a crash replays about that much at most
  even in a large active segment (the replay is a Python step per batch it applies).
  Such a snapshot, not at a segment base, is deleted (``delete_snapshot``) when the next
  one is taken, so a partition keeps one per segment and one more;
- truncation of the tail (a follower's diverged tail, a full restart at a new offset):
  ``truncate_to`` drops the snapshots above the new end, then the state is rebuilt as in
  recovery;
- deletion of the head (retention, DeleteRecords): ``truncate_head`` with the first offset
  the log still holds, so snapshots that could no longer be replayed from go;
- recovery (opening the log, and after a truncation): ``load_snapshot`` with the range of
  offsets the log can replay from; the log then replays every batch from the offset it
  returns, or, when no snapshot is usable, from the start of its last two segments
  (Kafka's ``LogLoader`` after an upgrade or without snapshots).

A snapshot at offset ``n`` describes the batches below ``n``. ``take_snapshot`` returns the
path it wrote, not yet fsynced: the log makes it durable (in the background after a roll,
at once on close), and a torn snapshot after a crash fails its check on load and an older
one is used.

``replay_in_slices`` feeds a log's batches into any consumer a slice of event-loop time at
a time, for state too large to load in one step (a coordinator's internal topic).

Not thread-safe: the log's event loop drives every call.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from pybroker._native.records import (
    HEADER_SIZE,
    BatchInfo,
    producer_batches,
    read_batch_header,
)

if TYPE_CHECKING:
    from pybroker.log.log import Log

# How much of the event loop a replay takes before giving the rest of the loop a turn.
REPLAY_SLICE_S = 0.01
# Appended bytes after which a log snapshots its state machines between rolls: the tail
# an earlier version replayed after a crash (~1 s of replay for one-record idempotent
# batches; a plain producer's batches are walked natively at ~1.5 GB/s).
SNAPSHOT_BEHIND_BYTES = 64 * 1024 * 1024


class LogStateMachine(Protocol):
    """See module doc."""

    # True when only batches with a producer id (control batches included) change the
    # state (producer state): the log then does not apply a plain producer's batch (the
    # common produce pays one comparison), and finds the batches to apply in a
    # follower's chunk or a replay with a native walk (``producer_batches``), so a plain
    # producer's batches cost no Python step.
    producer_batches_only: bool

    def apply(self, batch: BatchInfo, base_offset: int, log_append_time: int,
              now_ms: int) -> None:
        """``batch`` was written at ``base_offset`` (its header may carry the producer's
        offsets: a leader stamps them in the bytes, not in ``batch``), with
        ``log_append_time`` (-1: CreateTime) at wall-clock ``now_ms`` (in a replay, the
        replay's: :func:`replay`)."""

    def take_snapshot(self, offset: int) -> str | None:
        """Write the state (of the batches below ``offset``, the log end) to a snapshot
        named by ``offset``; returns the file written (not fsynced) or None if there was
        nothing to write."""

    def load_snapshot(self, first_offset: int, end_offset: int, now_ms: int) -> int | None:
        """Forget the state in memory and load the latest readable snapshot at an offset
        in [``first_offset``, ``end_offset``] (unreadable ones are deleted); the offset
        it describes, from which the log replays, or None if there is none."""

    def truncate_to(self, offset: int) -> None:
        """The log ends at ``offset`` now (-1: every offset is gone): delete the snapshots
        above it. The log rebuilds the state next (``load_snapshot`` and a replay)."""

    def truncate_head(self, offset: int) -> None:
        """The log no longer holds the offsets below ``offset``: snapshots below it can
        never be replayed from again."""

    def delete_snapshot(self, offset: int) -> None:
        """Delete the snapshot at ``offset`` if there is one (a later one replaces it)."""


def apply_chunk(machines: list[LogStateMachine], buf: memoryview | bytes, now_ms: int
                ) -> None:
    """Apply the batches of ``buf`` (whole valid batches that carry their offsets: a
    follower's chunk) to ``machines``: those with a producer id, found natively, when
    every machine is ``producer_batches_only``; else every one, a header read each."""
    if all(m.producer_batches_only for m in machines):
        batches, _ = producer_batches(buf, -1)
    else:
        batches, position = [], 0
        while position + HEADER_SIZE <= len(buf):
            batches.append(read_batch_header(buf, position))
            position += batches[-1].size
    for info in batches:
        log_append_time = info.max_timestamp if info.timestamp_type == 1 else -1
        for machine in machines:
            machine.apply(info, info.base_offset, log_append_time, now_ms)


def replay(machine: LogStateMachine, batches: Iterable[BatchInfo], now_ms: int) -> int:
    """Apply ``batches`` (headers read back from a log) to ``machine`` at wall-clock
    ``now_ms`` (the replay's: the log does not keep when a CreateTime batch was appended,
    and a batch's own timestamp is its producer's clock, possibly far in the past, so the
    replay's clock is the one bound that never makes state older than the append made
    it); returns how many."""
    count = 0
    for info in batches:
        log_append_time = info.max_timestamp if info.timestamp_type == 1 else -1
        machine.apply(info, info.base_offset, log_append_time, now_ms)
        count += 1
    return count


async def replay_in_slices(partition_log: Log, start: int,
                           consume: Callable[[BatchInfo, memoryview], None],
                           still_wanted: Callable[[], bool] | None = None,
                           slice_s: float = REPLAY_SLICE_S) -> int | None:
    """Feed every batch of ``partition_log`` from ``start`` to its end (the end when the
    replay starts) into ``consume``, giving the event loop back every ``slice_s``
    seconds, so other clients are served while a large log loads. After each pause
    ``still_wanted()`` is asked, and False ends the replay: None is returned. Otherwise
    the offset reached: everything below it was consumed. The log must not be truncated
    meanwhile: a coordinator loads a partition it leads, and stops (``still_wanted``)
    when it no longer does, before the fetcher may truncate it."""
    reached = start
    deadline = time.monotonic() + slice_s
    for info, data in partition_log.batches(start):
        consume(info, data)
        reached = info.base_offset + info.last_offset_delta + 1
        if time.monotonic() >= deadline:
            await asyncio.sleep(0)
            if still_wanted is not None and not still_wanted():
                return None
            deadline = time.monotonic() + slice_s
    return max(reached, start)


def snapshot_path(directory: str, offset: int) -> str:
    """``<directory>/<20-digit offset>.snapshot``, Kafka's name."""
    return os.path.join(directory, f"{offset:020d}.snapshot")

"""Leader epoch -> first offset of that epoch, persisted as ``leader-epoch-checkpoint``.

Replication uses it to find where a follower's log diverges from the leader's
(OffsetsForLeaderEpoch): ``end_offset_for_epoch`` answers where an epoch ended. Rules are
Kafka's ``LeaderEpochFileCache``: epochs and start offsets both strictly increase; a new
entry evicts the entries it contradicts; truncating the log drops the epochs that started
at or after the new end, and moving the log start offset moves the first epoch's start.
File format: checkpoints.py (entries ``epoch start_offset``). A new epoch (``assign``) is
written at once but not fsynced, as it happens on the produce path: ``dirty`` says an
fsync is owed, and the owning ``Log`` pays it off the event loop (its flusher thread) or
at flush and close. Truncations, rare and replication's business, are fsynced at once.

Thread-safety: none; the owning ``Log`` serialises every call.
"""

from __future__ import annotations

import bisect
import logging
import os

from pybroker.log.checkpoints import (
    LEADER_EPOCH_FILE,
    read_checkpoint,
    sync_checkpoint,
    write_checkpoint,
)

log = logging.getLogger("pybroker.log")

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, LEADER_EPOCH_FILE)
        rows = read_checkpoint(self.path, 2)
        self._epochs = [int(epoch) for epoch, _ in rows]
        self._starts = [int(start) for _, start in rows]
        self.dirty = False  # written since the last sync

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (first append of a new epoch)."""
        if epoch < 0 or start_offset < 0:
            return
        if self._epochs and self._epochs[-1] == epoch and self._starts[-1] <= start_offset:
            return  # the same epoch, already known to start no later
        keep = len(self._epochs)
        while keep and (self._epochs[keep - 1] >= epoch or self._starts[keep - 1] >= start_offset):
            keep -= 1
        if keep < len(self._epochs):
            log.info("%s: epoch %d at %d replaces %s", self.path, epoch, start_offset,
                     self.entries()[keep:])
        del self._epochs[keep:], self._starts[keep:]
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        self._save(durable=False)

    def truncate_from_end(self, end_offset: int) -> None:
        """The log now ends at ``end_offset``: forget epochs starting at or after it."""
        keep = bisect.bisect_left(self._starts, end_offset)
        if keep < len(self._epochs):
            del self._epochs[keep:], self._starts[keep:]
            self._save()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: the epoch holding it starts there."""
        first = bisect.bisect_right(self._starts, start_offset) - 1
        if first < 0 or (first == 0 and self._starts[0] == start_offset):
            return
        del self._epochs[:first], self._starts[:first]
        self._starts[0] = start_offset
        self._save()

    def end_offset_for_epoch(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end_offset)``: the largest known epoch <= ``epoch`` and the offset where
        it ended (the next epoch's start, or the log end for the latest epoch);
        ``(-1, -1)`` for an undefined or unknown-future epoch (Kafka's rules)."""
        if epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self._epochs[-1]:
            return epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return epoch, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]

    def epoch_at(self, offset: int) -> int:
        """The epoch of the batch holding ``offset`` (the latest epoch starting at or below
        it), UNDEFINED_EPOCH below the first. Two logs whose batches at ``offset`` have the
        same epoch hold the same records up to it (Kafka's log matching)."""
        index = bisect.bisect_right(self._starts, offset) - 1
        return self._epochs[index] if index >= 0 else UNDEFINED_EPOCH

    def clear(self) -> None:
        self._epochs.clear()
        self._starts.clear()
        self._save()

    def _save(self, durable: bool = True) -> None:
        write_checkpoint(self.path, self.entries(), durable=durable)
        self.dirty = not durable

    def sync(self) -> None:
        """fsync the checkpoint if it changed since the last sync (blocks: not on the loop)."""
        if self.dirty:
            self.dirty = False
            sync_checkpoint(self.path)

"""The aborted-transaction index of one segment: ``<base>.txnindex`` (Kafka's
``TransactionIndex``).

One entry per transaction whose abort marker lies in the segment, in the order the markers
were appended (so by ascending last offset), each Kafka's 34 big-endian bytes::

    version 2 (0) | producer id 8 | first offset 8 | last offset 8 (the marker) |
    last stable offset 8 (the partition's just after the abort)

A ``read_committed`` fetch lists the entries overlapping the offsets it returns
(``overlapping``); the consumer drops those producers' records from each first offset
until the marker. The last stable offset of an entry bounds the search: once an entry's
is above the fetch's upper bound, no later segment can hold an overlapping transaction
(Kafka's ``isComplete``).

The entries are kept in memory too (a list: aborts are rare next to records), so a fetch
reads no file; the file exists only once a segment has an entry. Appends are idempotent by
last offset (a replay of the log after a restart or a truncation appends again what is
there already). Written with ``os.write``, fsynced by ``flush`` with the segment's log. A
partial entry at the end (a crash tore it) is cut off when the file is opened; entries the
crash lost are appended again by the log's replay of its batches into the producer state.

Thread-safety: none; the owning segment's log serialises every call.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

ENTRY = struct.Struct(">hqqqq")  # version, producer id, first, last, last stable offset
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int         # the abort marker's offset
    last_stable_offset: int  # the partition's just after the marker


def write_index(path: str, entries: list[AbortedTxn]) -> None:
    """A whole index file of ``entries`` at ``path``, fsynced (the log cleaner's copy of a
    cleaned segment's index)."""
    with open(path, "wb") as f:
        f.write(b"".join(ENTRY.pack(VERSION, *txn) for txn in entries))
        f.flush()
        os.fsync(f.fileno())


class TransactionIndex:
    """See module doc."""

    __slots__ = ("path", "entries", "_fd")

    def __init__(self, path: str, create: bool = False) -> None:
        """Open the index at ``path`` if it exists (``create``: a new segment, a stale
        file of an older one at this base is deleted instead)."""
        self.path = path
        self.entries: list[AbortedTxn] = []
        self._fd = -1
        if create:
            self._unlink()
            return
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        whole = len(data) - len(data) % ENTRY.size
        self.entries = [AbortedTxn(*entry[1:]) for entry in ENTRY.iter_unpack(data[:whole])]
        if whole != len(data):
            os.truncate(path, whole)

    def append(self, txn: AbortedTxn) -> bool:
        """Add ``txn`` unless an entry at or after its marker is there (a replay);
        returns whether it was added."""
        if self.entries and self.entries[-1].last_offset >= txn.last_offset:
            return False
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND |
                               os.O_CLOEXEC, 0o644)
        os.write(self._fd, ENTRY.pack(VERSION, *txn))
        self.entries.append(txn)
        return True

    def overlapping(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """The entries of transactions holding offsets in [``fetch_offset``,
        ``upper_bound``), and whether the search is complete (an entry's last stable
        offset is above ``upper_bound``: later segments need not be searched)."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset > upper_bound:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset`` (the log ends there)."""
        keep = len(self.entries)
        while keep and self.entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(self.entries):
            return
        del self.entries[keep:]
        if os.path.exists(self.path):
            os.truncate(self.path, keep * ENTRY.size)

    def flush(self) -> None:
        if self._fd >= 0:
            os.fdatasync(self._fd)

    def rename(self, path: str) -> None:
        if os.path.exists(self.path):
            os.rename(self.path, path)
        self.path = path

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        self._unlink()

    def _unlink(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

"""The time index of one segment (``<base offset>.timeindex``): timestamp -> offset.

Entry, 12 bytes big-endian: timestamp i64 | relative offset u32. Written next to each
offset index entry, holding the largest timestamp seen so far in the segment and the
(last) offset of the batch that carried it, and only when that timestamp grew, so the
timestamps are strictly increasing even though record timestamps are not. A segment that
stops being active gets one last entry with its true largest timestamp (one slot is kept
free for it), which is how ``largest_timestamp`` is known again after a restart without
reading the log (Kafka's ``TimeIndex``).
"""

from __future__ import annotations

import struct

from pybroker._native.index import time_index_entries_below, time_index_floor
from pybroker.log.index_base import IndexBase

_ENTRY = struct.Struct(">qI")


class TimeIndex(IndexBase):
    """Thread-safety: none; the owning ``Log`` serialises every call."""

    ENTRY_SIZE = 12

    __slots__ = ("last_timestamp", "last_offset")

    def __init__(self, path: str, base_offset: int, max_index_size: int | None) -> None:
        self.last_timestamp = -1
        self.last_offset = base_offset
        super().__init__(path, base_offset, max_index_size)
        self._reload()

    def _reload(self) -> None:
        if self.entries:
            self.last_timestamp, relative = self.entry(self.entries - 1)
            self.last_offset = self.base_offset + relative
        else:
            self.last_timestamp, self.last_offset = -1, self.base_offset

    def entry(self, slot: int) -> tuple[int, int]:
        """``(timestamp, relative_offset)`` of one slot."""
        return _ENTRY.unpack_from(self._buffer(), slot * 12)

    @property
    def is_full(self) -> bool:
        # one slot stays free for the final entry written when the segment stops being active
        return self.entries >= self._capacity - 1

    def maybe_append(self, timestamp: int, offset: int, final: bool = False) -> None:
        """Add ``timestamp -> offset`` if the timestamp grew. ``final`` (roll, close) may use
        the reserved last slot, growing the file if even that is taken."""
        if timestamp <= self.last_timestamp or timestamp < 0:
            return
        if self.entries >= self._capacity - (0 if final else 1):
            if not final:
                return
            self.resize((self.entries + 1) * 12)
        assert self._mm is not None
        _ENTRY.pack_into(self._mm, self.entries * 12, timestamp, offset - self.base_offset)
        self.entries += 1
        self.last_timestamp, self.last_offset = timestamp, offset

    def scan_start(self, timestamp: int) -> int:
        """An offset before every record of this segment with timestamp >= ``timestamp``:
        the entry with the largest timestamp strictly below it (the records up to that
        entry's offset are all older), else the segment's base offset."""
        if not self.entries or timestamp <= 0:
            return self.base_offset
        found = time_index_floor(self._buffer(), self.entries, timestamp - 1)
        return self.base_offset if found is None else self.base_offset + found[1]

    def truncate_to(self, offset: int) -> None:
        """Drop the entries for offsets >= ``offset``."""
        if self.entries:
            self.truncate_entries(
                time_index_entries_below(self._buffer(), self.entries, offset - self.base_offset))

    def check(self, log_size: int) -> str | None:
        reason = super().check(log_size)
        if reason is None and self.entries:
            first, last = self.entry(0), self.entry(self.entries - 1)
            if last[0] < first[0] or last[1] < first[1]:
                reason = f"{self.path}: entries out of order ({first} .. {last})"
        return reason

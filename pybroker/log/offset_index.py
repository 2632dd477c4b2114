"""The offset index of one segment (``<base offset>.index``): offset -> file position.

Entry, 8 bytes big-endian: relative offset u32 (offset - segment base offset) | position
u32 (byte position of a batch in the ``.log``). Sparse: one entry per
``index.interval.bytes`` of log, keyed by the *last* offset of the batch that starts at
that position (Kafka's ``LogSegment.append``), so the floor entry of any target offset
points at a batch at or before the one holding it. Searches are native
(``offset_index_lookup``: warm tail first, well under a microsecond).
"""

from __future__ import annotations

import struct

from pybroker._native.index import (
    offset_index_entries_below,
    offset_index_lookup,
    offset_index_position_floor,
)
from pybroker.log.index_base import IndexBase

_ENTRY = struct.Struct(">II")


class OffsetIndex(IndexBase):
    """Thread-safety: none; the owning ``Log`` serialises every call."""

    ENTRY_SIZE = 8

    __slots__ = ("last_relative_offset",)

    def __init__(self, path: str, base_offset: int, max_index_size: int | None) -> None:
        self.last_relative_offset = -1
        super().__init__(path, base_offset, max_index_size)
        self._reload()

    def _reload(self) -> None:
        self.last_relative_offset = self.entry(self.entries - 1)[0] if self.entries else -1

    def entry(self, slot: int) -> tuple[int, int]:
        """``(relative_offset, position)`` of one slot."""
        return _ENTRY.unpack_from(self._buffer(), slot * 8)

    def append(self, offset: int, position: int) -> None:
        """Add ``offset -> position``; offsets must grow (a repeat is ignored)."""
        relative = offset - self.base_offset
        if relative <= self.last_relative_offset:
            return
        assert self._mm is not None and self.entries < self._capacity
        _ENTRY.pack_into(self._mm, self.entries * 8, relative, position)
        self.entries += 1
        self.last_relative_offset = relative

    def lookup(self, offset: int) -> int:
        """File position to start a forward scan for ``offset`` (0 if before every entry)."""
        if not self.entries:
            return 0
        return offset_index_lookup(self._buffer(), self.entries, offset - self.base_offset)[1]

    def truncate_to(self, offset: int) -> None:
        """Drop the entries for offsets >= ``offset``."""
        if self.entries:
            self.truncate_entries(
                offset_index_entries_below(self._buffer(), self.entries, offset - self.base_offset))

    def floor_position(self, position: int) -> int:
        """The largest indexed position <= ``position``, 0 if none: a batch boundary.

        It bounds a fetch read by bytes (``LogSegment.read``), so it runs on most reads
        of consumers catching up: a native search (0.2 us, not 3 us in Python)."""
        if not self.entries:
            return 0
        return offset_index_position_floor(self._buffer(), self.entries, position)

    def check(self, log_size: int) -> str | None:
        reason = super().check(log_size)
        if reason is None and self.entries:
            first, last = self.entry(0), self.entry(self.entries - 1)
            if last[1] >= log_size or last[0] < first[0] or last[1] < first[1]:
                reason = f"{self.path}: last entry {last} outside a log of {log_size} bytes"
        return reason

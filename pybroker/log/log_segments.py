"""The segments of one partition log, ordered by base offset (Kafka's ``LogSegments``).

Segment ``i`` holds the offsets ``[bases[i], bases[i + 1])``; the last one is the active
segment that appends go to. Lookups are a bisect over a plain list of base offsets, which
for the tens to thousands of segments of a partition beats any tree in Python.

Thread-safety: none; the owning ``Log`` serialises every call.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from pybroker.log.log_segment import LogSegment


class LogSegments:
    __slots__ = ("_bases", "_segments")

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._segments: list[LogSegment] = []

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(list(self._segments))

    def __getitem__(self, i: int) -> LogSegment:
        return self._segments[i]

    @property
    def active(self) -> LogSegment:
        return self._segments[-1]

    @property
    def first(self) -> LogSegment:
        return self._segments[0]

    def add(self, segment: LogSegment) -> None:
        """Insert ``segment``; one with the same base offset is replaced."""
        i = bisect.bisect_left(self._bases, segment.base_offset)
        if i < len(self._bases) and self._bases[i] == segment.base_offset:
            self._segments[i] = segment
        else:
            self._bases.insert(i, segment.base_offset)
            self._segments.insert(i, segment)

    def remove(self, segment: LogSegment) -> None:
        i = bisect.bisect_left(self._bases, segment.base_offset)
        if i < len(self._bases) and self._segments[i] is segment:
            del self._bases[i], self._segments[i]

    def replace(self, old: list[LogSegment], new: LogSegment) -> None:
        """Put ``new`` where the consecutive segments ``old`` were, in one step."""
        i = bisect.bisect_left(self._bases, old[0].base_offset)
        self._bases[i:i + len(old)] = [new.base_offset]
        self._segments[i:i + len(old)] = [new]

    def floor_index(self, offset: int) -> int:
        """Index of the segment that holds ``offset`` (the last base <= offset), -1 if none."""
        return bisect.bisect_right(self._bases, offset) - 1

    def floor(self, offset: int) -> LogSegment | None:
        i = bisect.bisect_right(self._bases, offset) - 1
        return self._segments[i] if i >= 0 else None

    def next_base(self, i: int) -> int | None:
        """Base offset of the segment after index ``i`` (None for the active segment)."""
        return self._bases[i + 1] if i + 1 < len(self._bases) else None

    def from_offset(self, offset: int) -> list[LogSegment]:
        """The segments that hold ``offset`` or anything after it."""
        return self._segments[max(self.floor_index(offset), 0):]

    def above(self, offset: int) -> list[LogSegment]:
        """The segments whose base offset is > ``offset``."""
        return self._segments[bisect.bisect_right(self._bases, offset):]

    def total_size(self) -> int:
        return sum(segment.size for segment in self._segments)

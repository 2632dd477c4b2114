"""A byte range of an open file, the unit the fetch path sends zero-copy.

The log answers reads with file regions instead of bytes so record data goes from the
page cache to the socket with sendfile/splice and never passes through Python.

A region also holds its segment's :class:`OpenFile`, so the file descriptor stays open
until the region has been sent, even if the segment is closed meanwhile (retention
deleting it while a slow consumer still reads it): closing the number under a send would
let the kernel give it to the next file or socket opened, and the rest of the send would
read from that.
"""

from __future__ import annotations

import os
from typing import NamedTuple


class OpenFile:
    """A file descriptor, closed when the last reference to this object goes (CPython
    frees it at once): its log segment holds one, every region read from it another."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __del__(self, _close=os.close) -> None:  # (bound now: at exit ``os`` may be gone)
        try:
            _close(self.fd)
        except OSError:
            pass


class FileRegion(NamedTuple):
    fd: int
    position: int
    length: int
    file: OpenFile | None = None  # keeps ``fd`` open while the region is in flight

"""A byte range of an open file, the unit the fetch path sends zero-copy.

The log answers reads with file regions instead of bytes so record data goes from the
page cache to the socket with sendfile/splice and never passes through Python.
"""

from __future__ import annotations

from typing import NamedTuple


class FileRegion(NamedTuple):
    fd: int
    position: int
    length: int

"""What the offset and time indexes share: a preallocated, memory-mapped file of entries.

File: packed fixed-size big-endian entries, no header (formats in offset_index.py and
time_index.py). While a segment is active its index files are preallocated to
``segment.index.bytes`` (rounded down to whole entries) so appends are a store into the
mapping, never a write() or a remap; the number of valid entries is kept here, because
the file size says nothing until the file is trimmed to ``entries * entry_size`` on roll
and on close (Kafka's ``AbstractIndex``). An existing file is therefore taken as trimmed
when opened; after a crash the tail segment's indexes are rebuilt from the log instead of
trusted (``LogSegment.recover``).

The mapping holds its own duplicate of the file descriptor (CPython's mmap dups it), so
no descriptor is kept here and an index costs one fd, not two. An empty index has no
mapping at all (zero-length maps are not allowed).

Thread-safety: none; the owning ``Log`` serialises every call.
"""

from __future__ import annotations

import mmap
import os


class IndexBase:
    """One memory-mapped index file; subclasses define the entry layout and searches."""

    ENTRY_SIZE = 0  # bytes per entry, set by subclasses

    __slots__ = ("path", "base_offset", "entries", "_mm", "_capacity", "_odd_size")

    def __init__(self, path: str, base_offset: int, max_index_size: int | None) -> None:
        """Open or create ``path``. With ``max_index_size`` (the active segment) the file is
        preallocated to that many bytes; without, it is mapped at its current size."""
        self.path = path
        self.base_offset = base_offset
        self._mm: mmap.mmap | None = None
        self._capacity = 0
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            self.entries = size // self.ENTRY_SIZE
            self._odd_size = size % self.ENTRY_SIZE != 0
            self._map(fd, size)
        finally:
            os.close(fd)
        if max_index_size is not None:
            self.resize(max_index_size)

    # -- mapping ---------------------------------------------------------------------

    def _map(self, fd: int, size: int) -> None:
        self._mm = mmap.mmap(fd, size) if size > 0 else None
        self._capacity = size // self.ENTRY_SIZE

    def resize(self, size: int) -> None:
        """Make room for ``size`` bytes of entries (never below the valid entries)."""
        size = max(size // self.ENTRY_SIZE, self.entries) * self.ENTRY_SIZE
        if size == self._capacity * self.ENTRY_SIZE:
            return
        if self._mm is not None and size > 0:
            self._mm.resize(size)  # ftruncate + mremap of the mapping's own fd
            self._capacity = size // self.ENTRY_SIZE
            return
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.ftruncate(fd, size)
            self._map(fd, size)
        finally:
            os.close(fd)

    def trim(self) -> None:
        """Cut the file to its valid entries (on roll and close)."""
        self.resize(self.entries * self.ENTRY_SIZE)

    @property
    def max_entries(self) -> int:
        return self._capacity

    @property
    def is_full(self) -> bool:
        return self.entries >= self._capacity

    @property
    def size_bytes(self) -> int:
        return self.entries * self.ENTRY_SIZE

    # -- contents ----------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every entry (before a rebuild)."""
        self.entries = 0
        self._odd_size = False
        self._reload()

    def load_entries(self, data: bytes) -> None:
        """Replace the contents with ``data`` (whole entries, as ``scan_log`` builds them)."""
        count = len(data) // self.ENTRY_SIZE
        if count > self._capacity:
            self.resize(count * self.ENTRY_SIZE)
        if count:
            assert self._mm is not None
            self._mm[:count * self.ENTRY_SIZE] = data[:count * self.ENTRY_SIZE]
        self.entries = count
        self._odd_size = False
        self._reload()

    def truncate_entries(self, count: int) -> None:
        """Keep only the first ``count`` entries."""
        if count < self.entries:
            self.entries = count
            self._reload()

    def _reload(self) -> None:
        """Refresh the cached last entry after the entries changed; subclasses override."""

    def raw(self) -> bytes:
        """The valid entries as bytes (tests and the dump tool)."""
        return b"" if self._mm is None else self._mm[:self.size_bytes]

    # -- files -------------------------------------------------------------------------

    def flush(self) -> None:
        if self._mm is not None and self.entries:
            pages = mmap.PAGESIZE * -(-self.size_bytes // mmap.PAGESIZE)
            self._mm.flush(0, min(pages, len(self._mm)))

    def rename(self, path: str) -> None:
        os.rename(self.path, path)
        self.path = path

    def close(self) -> None:
        """Trim to the valid entries and unmap."""
        if self._mm is None and self._capacity == 0:
            return
        self.trim()
        self.unmap()

    def unmap(self) -> None:
        """Drop the mapping without touching the file."""
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        self._capacity = 0

    def delete(self) -> None:
        self.unmap()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def check(self, log_size: int) -> str | None:
        """Why this index cannot be trusted for a segment of ``log_size`` bytes, or None."""
        if self._odd_size:
            return f"{self.path}: size is not a whole number of entries"
        return None

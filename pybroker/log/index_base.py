"""What the offset and time indexes share: a file of fixed-size entries, memory-mapped.

File: packed fixed-size big-endian entries, no header (formats in offset_index.py and
time_index.py), exactly ``entries * entry_size`` bytes once the segment is no longer
active (Kafka's trimmed ``AbstractIndex``), so an existing file's size gives its entries.

Where the entries live:

- inactive segment: a shared mapping of the file itself;
- active segment: an anonymous mapping of ``segment.index.bytes`` (Kafka's preallocation,
  but untouched pages cost no memory), written to the file with one ``pwrite`` when the
  segment rolls or closes (``trim``) and by ``flush``. Measured reason: stores into a
  *file* mapping that the kernel is writing back block in ``page_mkwrite`` until the
  writeback ends (stable pages), about 160 us per index entry under a stream of 1 MiB
  appends here, which halved append throughput. An active segment's index is rebuilt after
  a crash anyway (never trusted), so nothing is lost by not writing it earlier.

The mapping of a file holds its own duplicate of the descriptor (CPython's mmap dups
it), so none is kept here. An empty inactive index has no mapping (zero-length maps are
not allowed).

Thread-safety: none; the owning ``Log`` serialises every call.
"""

from __future__ import annotations

import mmap
import os


class IndexBase:
    """One index file; subclasses define the entry layout and searches."""

    ENTRY_SIZE = 0  # bytes per entry, set by subclasses

    __slots__ = ("path", "base_offset", "entries", "_mm", "_capacity", "_odd_size", "_anon",
                 "_saved")

    def __init__(self, path: str, base_offset: int, max_index_size: int | None) -> None:
        """Open or create ``path``. With ``max_index_size`` (the active segment) entries
        go to memory with room for that many bytes; without, the file is mapped."""
        self.path = path
        self.base_offset = base_offset
        self._mm: mmap.mmap | None = None
        self._capacity = 0
        self._anon = False
        self._saved = 0  # in memory: how many leading entries the file holds already
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            self.entries = size // self.ENTRY_SIZE
            self._odd_size = size % self.ENTRY_SIZE != 0
            self._map_file(fd, self.entries * self.ENTRY_SIZE)
        finally:
            os.close(fd)
        if max_index_size is not None:
            self.activate(max_index_size)

    # -- mapping ---------------------------------------------------------------------

    def _map_file(self, fd: int, size: int) -> None:
        self._mm = mmap.mmap(fd, size) if size > 0 else None
        self._capacity = size // self.ENTRY_SIZE
        self._anon = False

    def activate(self, max_index_size: int) -> None:
        """Hold the entries in memory with room for ``max_index_size`` bytes."""
        self._to_memory(max(max_index_size // self.ENTRY_SIZE, self.entries))

    def _to_memory(self, capacity: int) -> None:
        used = self.entries * self.ENTRY_SIZE
        memory = mmap.mmap(-1, max(capacity, 1) * self.ENTRY_SIZE)
        if used:
            memory[:used] = self._buffer()[:used]
        saved = self._saved if self._anon else self.entries
        self.unmap()
        self._saved = saved
        self._mm, self._capacity, self._anon = memory, capacity, True

    def resize(self, size: int) -> None:
        """Make room for ``size`` bytes of entries (never below the valid entries)."""
        capacity = max(size // self.ENTRY_SIZE, self.entries)
        if capacity == self._capacity:
            return
        if self._anon:
            self._to_memory(capacity)
            return
        self._write_file(capacity * self.ENTRY_SIZE)

    def trim(self) -> None:
        """Write the valid entries to the file, exactly sized, and map it (roll, close)."""
        if self._anon or self._capacity != self.entries:
            self._write_file(self.entries * self.ENTRY_SIZE)

    def _write_file(self, size: int) -> None:
        """Make the file ``size`` bytes holding the valid entries; map it."""
        used = self.entries * self.ENTRY_SIZE
        data = self._buffer()[:used] if self._anon and used else None
        self.unmap()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if data:
                os.pwrite(fd, data, 0)
            os.ftruncate(fd, size)
            self._map_file(fd, size)
        finally:
            os.close(fd)

    @property
    def is_full(self) -> bool:
        return self.entries >= self._capacity

    @property
    def size_bytes(self) -> int:
        return self.entries * self.ENTRY_SIZE

    # -- contents ----------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every entry (before a rebuild)."""
        self.entries = self._saved = 0
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
        self._saved = 0
        self._odd_size = False
        self._reload()

    def truncate_entries(self, count: int) -> None:
        """Keep only the first ``count`` entries."""
        if count < self.entries:
            self.entries = count
            self._saved = min(self._saved, count)
            self._reload()

    def _buffer(self) -> mmap.mmap:
        """The mapping of a non-empty index (callers check ``entries`` first)."""
        assert self._mm is not None
        return self._mm

    def _reload(self) -> None:
        """Refresh the cached last entry after the entries changed; subclasses override."""

    def raw(self) -> bytes:
        """The valid entries as bytes (tests and the dump tool)."""
        return b"" if self._mm is None else self._mm[:self.size_bytes]

    # -- files -------------------------------------------------------------------------

    def flush(self) -> None:
        """Make the entries durable: entries held in memory are first written to the
        file (only those not written yet), then the file is fdatasynced (which also
        writes back the dirty pages of a file mapping)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if self._anon:
                used = self.entries * self.ENTRY_SIZE
                start = self._saved * self.ENTRY_SIZE
                if used > start:
                    os.pwrite(fd, self._buffer()[start:used], start)
                os.ftruncate(fd, used)
                self._saved = self.entries
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def rename(self, path: str) -> None:
        os.rename(self.path, path)
        self.path = path

    def close(self) -> None:
        """Trim to the valid entries and unmap."""
        if self._mm is None and self._capacity == 0 and not self._anon:
            return
        self.trim()
        self.unmap()

    def unmap(self) -> None:
        """Drop the mapping without touching the file."""
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        self._capacity = 0
        self._anon = False

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

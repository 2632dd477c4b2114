"""The page cache around a run: conditioning guest memory, dropping a topic's pages,
measuring how much of a file set is resident.

Conditioning. On this VM a page of guest memory that was not touched recently costs a
host fault the first time it is written, so page-cache pages are cheap right after a
large file was freed and dear otherwise: the same produce run went 250k -> 586k msgs/s
(pybroker) and 153k -> 360k (Kafka) after writing and deleting a 3 GiB file. Whichever
broker wrote after a large free looked faster. ``condition`` writes and deletes N GiB
through the page cache of a directory's filesystem right before each measured run, so
every broker starts from the same warm state. N is capped to half of MemAvailable: more
would push out the broker's own pages and measure eviction instead.

Dropping. ``drop`` flushes each file (``fdatasync``: dirty pages cannot be dropped) and
asks the kernel to forget its pages (``posix_fadvise(POSIX_FADV_DONTNEED)``); pages a
process holds mapped (Kafka's mmapped indexes) stay. ``resident`` counts resident pages
with ``mincore(2)`` over a read-only shared mapping of each file, so the drop is checked,
not assumed.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import time
from typing import Any

import numpy as np

GIB = 1 << 30
CHUNK = 1 << 20


def mem_available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise OSError("no MemAvailable in /proc/meminfo")


def conditioning_dir(data_dir: str | None) -> str:
    """Where to write: beside the broker's data dir on its filesystem (never inside it,
    where a broker may take a stray file for a partition), else the temp directory."""
    if data_dir:
        parent = os.path.dirname(os.path.abspath(data_dir))
        if os.path.isdir(parent) and os.access(parent, os.W_OK):
            return parent
    return os.environ.get("TMPDIR") or "/tmp"


def conditioning_bytes(gib: float, directory: str) -> int:
    """What ``condition`` writes: ``gib`` GiB, at most half of MemAvailable and half of the
    free space, in whole chunks."""
    stat = os.statvfs(directory)
    cap = min(mem_available_bytes() // 2, stat.f_bavail * stat.f_frsize // 2)
    return min(int(gib * GIB), cap) // CHUNK * CHUNK


def condition(gib: float, directory: str) -> dict[str, Any]:
    """Write ``gib`` GiB of zeros to a file in ``directory`` and delete it; returns what
    was written and how long it took."""
    size = conditioning_bytes(gib, directory)
    path = os.path.join(directory, f".bench-conditioning-{os.getpid()}")
    zeros = bytes(CHUNK)
    started = time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(size // CHUNK):
            os.write(fd, zeros)
    finally:
        os.close(fd)
        os.unlink(path)
    return {"requested_gib": gib, "written_gib": round(size / GIB, 3),
            "capped": size < int(gib * GIB) // CHUNK * CHUNK, "directory": directory,
            "seconds": round(time.monotonic() - started, 3)}


def partition_files(data_dir: str, topic: str) -> list[str]:
    """Every file of the topic's partition directories (``<topic>-<n>``, Kafka's layout
    and pybroker's)."""
    out = []
    for name in sorted(os.listdir(data_dir)):
        prefix, _, index = name.rpartition("-")
        if prefix == topic and index.isdigit():
            directory = os.path.join(data_dir, name)
            out += [os.path.join(directory, f) for f in sorted(os.listdir(directory))
                    if os.path.isfile(os.path.join(directory, f))]
    return out


def drop(paths: list[str]) -> None:
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # a segment or index deleted meanwhile
            continue
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
_MAP_FAILED = ctypes.c_void_p(-1).value


def resident_pages(path: str, offset: int = 0, length: int | None = None
                   ) -> tuple[int, int]:
    """(resident pages, pages) of one file, or of the pages ``length`` bytes at
    ``offset`` touch, by mincore over a shared read-only mapping (mapping does not read
    the file; mincore reports the page cache and, unlike a read, starts no read-ahead)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0, 0
    try:
        size = os.fstat(fd).st_size
        pages = -(-size // mmap.PAGESIZE)
        if not pages:
            return 0, 0
        address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, _MAP_FAILED):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            vector = ctypes.create_string_buffer(pages)
            if _libc.mincore(address, size, vector) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            end = size if length is None else min(size, offset + length)
            first, last = offset // mmap.PAGESIZE, -(-end // mmap.PAGESIZE)
            touched = np.frombuffer(vector.raw, np.uint8)[first:last]
            return int((touched & 1).sum()), len(touched)
        finally:
            _libc.munmap(address, size)
    finally:
        os.close(fd)


def resident(paths: list[str]) -> dict[str, Any]:
    """Resident fraction of a file set: {"resident_pages", "pages", "fraction"}."""
    got = total = 0
    for path in paths:
        r, n = resident_pages(path)
        got += r
        total += n
    return {"resident_pages": got, "pages": total,
            "fraction": round(got / total, 4) if total else None}

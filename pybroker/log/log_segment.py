"""One segment of a partition log: ``<base>.log`` plus its ``.index`` and ``.timeindex``,
and ``.txnindex`` once a transaction aborted in it (transaction_index.py).

Files are named by the segment's base offset, 20 digits zero-padded (Kafka's
``LogFileUtils``): ``00000000000000001500.log`` holds record batches v2 back to back,
exactly as producers sent them with offsets stamped, from offset 1500 on.

Appends go through the native ``Appender`` (io_uring or pwritev) at the end position this
object tracks, so no file offset is shared with readers. A failed write is cut back out
of the file and its ``OSError`` raised (the ``Log`` reports it). Reads never copy data: they
answer ``(position, length)`` ranges of the open ``.log`` descriptor, and find those
positions with native header walks over a read-only mmap of the file (``_view``). The
mmap covers the bytes written when it was made and is remade, lazily, when a read needs
more; Python's mmap cannot map past the end of a file, and remapping on demand keeps the
file exactly its data (no preallocation to trim, Kafka's default).

Thread-safety: none; the owning ``Log`` serialises every call. Descriptors stay open
until ``close``/``delete`` so a region handed to the network layer stays sendable.
"""

from __future__ import annotations

import bisect
import logging
import mmap
import os
import struct

from pybroker._native.appender import Appender
from pybroker._native.records import (
    find_position,
    find_timestamp,
    read_batch_header,
    scan_log,
)
from pybroker.errors import KafkaStorageError
from pybroker.file_region import OpenFile
from pybroker.log.offset_index import OffsetIndex
from pybroker.log.time_index import TimeIndex
from pybroker.log.transaction_index import TransactionIndex

log = logging.getLogger("pybroker.log")

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
MAX_RELATIVE_OFFSET = 2**31 - 1  # Kafka keeps relative offsets within an int
_RECENT_BATCHES = 256  # batch positions remembered at the tail of the active segment
_OFFSET_ENTRY = struct.Struct(">II")


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class LogSegment:
    """Thread-safety: none (see module doc)."""

    __slots__ = ("directory", "base_offset", "fd", "file", "size", "offset_index", "time_index",
                 "txn_index", "index_interval_bytes", "max_timestamp", "offset_of_max_timestamp",
                 "next_offset", "created", "deleted", "_missing_indexes",
                 "_rolling_timestamp", "_bytes_since_index", "_appender", "_view",
                 "_recent", "_recent_lasts", "_touched")

    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int,
                 max_index_size: int | None, created: float, create: bool = False) -> None:
        """Open the files of segment ``base_offset`` in ``directory``. ``max_index_size``
        (the active segment) preallocates the indexes. Opening an existing segment reads
        nothing but file sizes: callers then ``load`` or ``recover`` it."""
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.created = created
        self.deleted = False
        if create:
            # a new segment: stale index files of an older one at this base go first
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                if os.path.exists(self.path(suffix)):
                    os.unlink(self.path(suffix))
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        self.fd = os.open(self.path(LOG_SUFFIX), flags, 0o644)
        # closes the fd once neither the segment nor a region in flight refers to it
        self.file: OpenFile | None = OpenFile(self.fd)
        self.size = os.fstat(self.fd).st_size
        if create and self.size:
            self.file = None
            raise KafkaStorageError(f"{self.path(LOG_SUFFIX)} exists and is not empty")
        # opening creates missing index files: note which were missing first
        self._missing_indexes = [self.path(suffix) for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
                                 if not os.path.exists(self.path(suffix))]
        self.offset_index = OffsetIndex(self.path(INDEX_SUFFIX), base_offset, max_index_size)
        self.time_index = TimeIndex(self.path(TIME_INDEX_SUFFIX), base_offset, max_index_size)
        self.txn_index = TransactionIndex(self.path(TXN_INDEX_SUFFIX), create)
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.next_offset = base_offset
        self._rolling_timestamp: int | None = None
        self._bytes_since_index = self.size
        self._appender: Appender | None = None
        self._view: mmap.mmap | None = None
        self._recent: list[tuple[int, int, int]] = []  # (position, base offset, size)
        self._recent_lasts: list[int] = []              # their last offsets, for bisect
        # Written, truncated or recovered since opening: until then an empty segment has
        # nothing to make durable (a clean stop of idle partitions syncs nothing).
        self._touched = False

    def path(self, suffix: str) -> str:
        return os.path.join(self.directory, file_name(self.base_offset, suffix))

    def __repr__(self) -> str:
        return (f"LogSegment({self.path(LOG_SUFFIX)}, size={self.size}, "
                f"offsets={self.base_offset}..{self.next_offset})")

    # -- opening -----------------------------------------------------------------------

    def index_problem(self) -> str | None:
        """Why the index files cannot be trusted as they are, or None."""
        if self._missing_indexes:
            return f"{', '.join(self._missing_indexes)} missing"
        return self.offset_index.check(self.size) or self.time_index.check(self.size)

    def load(self) -> str | None:
        """Take the indexes as they are (after a clean shutdown). Returns why the segment
        must be recovered instead, or None."""
        problem = self.index_problem()
        if problem:
            return problem
        tail = self.load_tail()
        if tail.valid_end != self.size:
            return f"{self.path(LOG_SUFFIX)}: bad batch at {tail.valid_end}: {tail.error}"
        return None

    def recover(self) -> int:
        """Validate every batch (CRC included), cut the file after the last good one and
        rebuild both indexes from the scan; returns the number of bytes cut. One native
        call over the whole file: no Python work per batch (Kafka's ``recover``)."""
        self._missing_indexes = []
        self._touched = True
        scan = self._scan(0, self.size, populate=True)
        truncated = self.size - scan.valid_end
        if truncated:
            log.warning("%s: %s at byte %d; truncating %d bytes", self.path(LOG_SUFFIX),
                        scan.error, scan.valid_end, truncated)
            self._truncate_file(scan.valid_end)
        self.offset_index.load_entries(scan.offset_index)
        self.time_index.load_entries(scan.time_index)
        self.next_offset = scan.next_offset if scan.batch_count else self.base_offset
        self.txn_index.truncate_to(self.next_offset)  # the log replay appends the rest
        self.max_timestamp = scan.max_timestamp if scan.batch_count else -1
        self.offset_of_max_timestamp = (scan.offset_of_max_timestamp if scan.batch_count
                                        else self.base_offset)
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp,
                                     final=True)
        self._bytes_since_index = self._bytes_after_last_entry()
        return truncated

    def _scan(self, start: int, end: int, populate: bool = False):
        if end <= start:
            return scan_log(b"", 0, 0, self.base_offset, self.index_interval_bytes)
        # MAP_POPULATE: recovery reads every byte once, so fault the pages in with one
        # call instead of one fault per 4 KiB page (matters at >= 1 GB/s).
        flags = mmap.MAP_SHARED | (mmap.MAP_POPULATE if populate else 0)
        view = mmap.mmap(self.fd, end, flags=flags, prot=mmap.PROT_READ)
        try:
            return scan_log(view, start, end, self.base_offset, self.index_interval_bytes)
        finally:
            view.close()

    # -- appending ---------------------------------------------------------------------

    def activate(self, max_index_size: int) -> None:
        """Make this the segment appends go to: indexes in memory with full room."""
        self.offset_index.activate(max_index_size)
        self.time_index.activate(max_index_size)

    def deactivate(self) -> None:
        """Stop being the active segment (roll): final time index entry, trimmed indexes."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp,
                                     final=True)
        self.offset_index.trim()
        self.time_index.trim()
        if self._appender is not None:
            self._appender.close()
            self._appender = None

    def append(self, buffers: list, nbytes: int, last_offset: int, max_timestamp: int,
               offset_entries: bytes | None = None, entries_base: int = 0,
               record_count: int = 1) -> int:
        """Write ``buffers`` (``nbytes`` in all; whole batches whose last offset is
        ``last_offset``) at the end; returns the position they start at.

        Index: without ``offset_entries``, one entry when more than
        ``index.interval.bytes`` were written since the last one, keyed by ``last_offset``
        at the start position (Kafka's ``LogSegment.append``; the leader appends one batch
        at a time). A follower's chunk of many batches passes the entries ``scan_log``
        built over the chunk alone (relative to offset ``entries_base`` and to the chunk's
        first byte); they are shifted to this segment and file position here."""
        position = self.size
        try:
            written = (self._appender or self._appender_for_writes()).append(buffers, position)
        except OSError:
            self._cut_back(position)
            raise
        self._appended(position, written, nbytes, last_offset, max_timestamp,
                       offset_entries, entries_base, record_count)
        return position

    def fits(self, size: int, last_offset: int, max_timestamp: int, segment_bytes: int,
             roll_ms: int) -> bool:
        """Whether a batch of ``size`` bytes ending at ``last_offset`` can be appended
        here without a roll (``Log._maybe_roll``'s reasons: bytes, relative offset range,
        a full index, ``roll_ms`` past the first batch's timestamp). Conservative: an
        empty segment, or one whose first batch had no timestamp, says no (``Log.append``
        decides those)."""
        rolling = self._rolling_timestamp
        return 0 < self.size <= segment_bytes - size and rolling is not None and \
            last_offset - self.base_offset <= MAX_RELATIVE_OFFSET and \
            max_timestamp - rolling <= roll_ms and \
            not self.offset_index.is_full and not self.time_index.is_full

    async def append_async(self, buffers: list) -> tuple[int, int]:
        """``append`` (the leader's form) with the write awaited, not blocking the loop.
        Returns ``(position, bytes written)``; nothing here changes until the caller,
        having checked nothing else changed the log meanwhile, calls ``appended_async``
        (or ``discard_write``)."""
        position = self.size
        try:
            written = await self._appender_for_writes().append_async(buffers, position)
        except OSError:
            self._cut_back(position)
            raise
        return position, written

    def appended_async(self, position: int, written: int, nbytes: int, last_offset: int,
                       max_timestamp: int, record_count: int) -> None:
        """Account for an ``append_async`` write at ``position`` (see ``append``)."""
        self._appended(position, written, nbytes, last_offset, max_timestamp, None, 0,
                       record_count)

    def discard_write(self, position: int) -> None:
        """An asynchronous write at ``position`` is not wanted (the log changed while it
        was in flight): cut the file back to this segment's size if it lies past it."""
        if self.fd >= 0 and position >= self.size:
            os.ftruncate(self.fd, self.size)

    def _appender_for_writes(self) -> Appender:
        if self._appender is None:
            self._appender = Appender(self.fd)
        return self._appender

    @property
    def writing(self) -> bool:
        """An asynchronous write to this segment is still in the kernel's hands."""
        return self._appender is not None and self._appender.writing

    def _cut_back(self, position: int) -> None:
        """A write failed: part of its bytes may be in the file, cut back to the last good
        batch (unless the segment was closed or cut shorter while an asynchronous write
        was out)."""
        if self.fd >= 0 and self.size >= position:
            os.ftruncate(self.fd, position)

    def _appended(self, position: int, written: int, nbytes: int, last_offset: int,
                  max_timestamp: int, offset_entries: bytes | None, entries_base: int,
                  record_count: int) -> None:
        if written != nbytes:
            raise KafkaStorageError(f"{self.path(LOG_SUFFIX)}: wrote {written} of {nbytes}")
        if position == 0:
            self._rolling_timestamp = max_timestamp if max_timestamp >= 0 else None
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        self.size = position + nbytes
        self._touched = True
        self.next_offset = last_offset + 1
        if offset_entries is None:
            if self._bytes_since_index > self.index_interval_bytes:
                self._add_index_entry(last_offset, position)
            self._bytes_since_index += nbytes
            # Where the latest batches are (inline: the one-record produce path): consumers
            # and followers read at the tail, and answering them from here saves
            # remapping the grown file for a header walk.
            recent = self._recent
            if len(recent) >= _RECENT_BATCHES:
                del recent[:_RECENT_BATCHES // 2], self._recent_lasts[:_RECENT_BATCHES // 2]
            recent.append((position, last_offset - record_count + 1, nbytes))
            self._recent_lasts.append(last_offset)
            return
        self._forget_recent()
        if offset_entries:
            # per index entry (one per index.interval.bytes), never per batch
            for relative, pos in _OFFSET_ENTRY.iter_unpack(offset_entries):
                if not self.offset_index.is_full:
                    self._add_index_entry(entries_base + relative, position + pos)
            self._bytes_since_index = self._bytes_after_last_entry()
        else:
            self._bytes_since_index += nbytes

    def _forget_recent(self) -> None:
        self._recent.clear()
        self._recent_lasts.clear()

    def _bytes_after_last_entry(self) -> int:
        """Bytes written after the position of the last offset index entry."""
        entries = self.offset_index.entries
        return self.size - (self.offset_index.entry(entries - 1)[1] if entries else 0)

    def _add_index_entry(self, offset: int, position: int) -> None:
        self.offset_index.append(offset, position)
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self._bytes_since_index = 0

    def rolling_timestamp(self) -> int | None:
        """Timestamp of the first batch, which ``segment.ms`` counts from (None if empty or
        the batch has no timestamp, then the file creation time counts)."""
        if self._rolling_timestamp is None and self.size:
            ts = read_batch_header(self._view_all()).max_timestamp
            self._rolling_timestamp = ts if ts >= 0 else None
        return self._rolling_timestamp

    # -- reading -----------------------------------------------------------------------

    def _view_all(self) -> mmap.mmap:
        """A read-only map of the written bytes (callers check ``size`` > 0)."""
        view = self._view
        if view is None or len(view) < self.size:
            # Dropped, not closed: closing would fail while a caller still holds an
            # exported buffer of it; the old mapping goes with its last reference.
            view = self._view = mmap.mmap(self.fd, self.size, flags=mmap.MAP_SHARED,
                                          prot=mmap.PROT_READ)
            # Only batch headers are read through this map, on the event loop. A fault
            # on a cold page would otherwise read around it by the device's read-ahead
            # (8 MiB on this project's hosts) while every connection waits; the data
            # itself goes out by sendfile, which reads ahead on a cold-read thread.
            view.madvise(mmap.MADV_RANDOM)
        return view

    def find(self, offset: int) -> tuple[int, int, int] | None:
        """``(position, base_offset, size)`` of the first batch whose last offset >=
        ``offset``; None if there is none."""
        if offset >= self.next_offset or not self.size:
            return None
        recent = self._recent
        if recent and offset >= recent[0][1]:
            return recent[bisect.bisect_left(self._recent_lasts, offset)]
        start = self.offset_index.lookup(offset)
        found = find_position(self._view_all(), start, self.size, offset)
        return None if found is None else (found[0], found[1].base_offset, found[1].size)

    def position_of(self, offset: int) -> int:
        """Position of the first batch with last offset >= ``offset``; the end if none."""
        found = self.find(offset)
        return self.size if found is None else found[0]

    def read(self, offset: int, max_bytes: int, max_position: int,
             min_one: bool) -> tuple[int, int, int] | None:
        """``(position, length, first batch base offset)`` of the whole batches from the
        one holding ``offset`` up to ``max_bytes`` and ``max_position``; with ``min_one``
        the first batch even if larger than ``max_bytes`` (KIP-74), else length 0 when
        it does not fit. None when no batch here holds ``offset`` or later (or the first
        such batch starts at or past ``max_position``)."""
        found = self.find(offset)
        if found is None:
            return None
        start, base, size = found
        if start >= max_position:
            return None
        limit = start + max_bytes
        if max_position <= limit:
            return start, max_position - start, base
        end = self._batch_end_below(start, size, limit)
        if end == start and min_one:
            end = start + size
        return start, end - start, base

    def _batch_end_below(self, start: int, first_size: int, limit: int) -> int:
        """A batch boundary in ``[start, limit]`` (``limit`` inside the segment), the last
        one but at most ``index.interval.bytes`` of small batches: the offset index's
        entry at or below ``limit``. No header is read for it, so a read of data that left
        the page cache faults nothing in on the event loop here (the region's bytes go
        out from a cold-read thread). Only when no entry lies past ``start`` (a limit
        within about one index interval of ``start``) are the headers walked."""
        indexed = self.offset_index.floor_position(limit)
        if indexed > start:
            return indexed
        position = start + first_size
        if position > limit:
            return start
        view = self._view_all()
        while True:
            end = position + read_batch_header(view, position).size
            if end > limit:
                return position
            position = end

    def find_timestamp(self, timestamp: int, min_offset: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with timestamp >= ``timestamp``."""
        if self.max_timestamp < timestamp or not self.size:
            return None
        begin = max(self.time_index.scan_start(timestamp), min_offset)
        start = self.offset_index.lookup(begin)
        found = find_timestamp(self._view_all(), start, self.size, timestamp)
        if found is None:
            return None
        return max(found[1], min_offset), found[2]

    # -- changing ----------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop the batches holding offsets >= ``offset`` (whole batches: one that holds
        ``offset`` goes entirely). Returns the bytes removed."""
        position = self.position_of(offset)
        removed = self.size - position
        if not removed:
            return 0
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self._truncate_file(position)
        self.load_tail()
        if not position:
            self._rolling_timestamp = None
        return removed

    def load_tail(self):
        """Set next offset and largest timestamp from the indexes and a scan of the tail
        after the last offset index entry (at most ``index.interval.bytes`` plus one
        batch, CRCs checked); returns the scan."""
        start = self.offset_index.lookup(self.base_offset + MAX_RELATIVE_OFFSET)
        tail = self._scan(start, self.size)
        self.next_offset = tail.next_offset if tail.batch_count else self.base_offset
        self.max_timestamp = self.time_index.last_timestamp
        self.offset_of_max_timestamp = self.time_index.last_offset
        if tail.batch_count and tail.max_timestamp > self.max_timestamp:
            self.max_timestamp = tail.max_timestamp
            self.offset_of_max_timestamp = tail.offset_of_max_timestamp
        self._bytes_since_index = self.size - start
        return tail

    def _truncate_file(self, size: int) -> None:
        self._forget_recent()
        self._view = None
        os.ftruncate(self.fd, size)
        self.size = size
        self._touched = True

    def flush(self) -> None:
        """Make the log and the index entries durable (fdatasync, msync)."""
        if not self._touched and self.size == 0:
            return  # never written since opened: three fdatasyncs would sync nothing
        os.fdatasync(self.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def rename_deleted(self) -> None:
        """First step of deletion: ``.deleted`` names, so a restart finishes the job. The
        log descriptor stays open for reads in flight until ``delete``."""
        for index in (self.offset_index, self.time_index):
            if os.path.exists(index.path):
                index.rename(index.path + DELETED_SUFFIX)
        self.txn_index.rename(self.txn_index.path + DELETED_SUFFIX)
        os.rename(self.path(LOG_SUFFIX), self.path(LOG_SUFFIX + DELETED_SUFFIX))
        self.deleted = True

    def delete(self) -> None:
        """Close and unlink every file of the segment."""
        self._close_log()
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        suffix = LOG_SUFFIX + (DELETED_SUFFIX if self.deleted else "")
        try:
            os.unlink(self.path(suffix))
        except FileNotFoundError:
            pass

    def discard(self) -> None:
        """Close the files without writing anything (the partition is deleted)."""
        self.offset_index.unmap()
        self.time_index.unmap()
        self.txn_index.close()
        self._close_log()

    def close(self) -> None:
        """Trim the indexes (keeping the final time index entry) and close the files."""
        if self.fd < 0:
            return
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp,
                                     final=True)
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        self._close_log()

    def _close_log(self) -> None:
        if self._appender is not None:
            self._appender.close()
            self._appender = None
        self._view = None
        if self.fd >= 0:
            self.file = None  # the fd closes now, or when the last region read is sent
            self.fd = -1

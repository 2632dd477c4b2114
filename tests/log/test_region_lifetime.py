"""A file region keeps its segment's file open until it has been sent: retention (or
DeleteRecords) may delete the segment while a slow consumer's fetch of it is still going
out, and closing the fd then would let the next open file or socket take its number, so
the rest of the send would read someone else's bytes."""

from __future__ import annotations

import gc
import os
import tempfile

from pybroker._native.records import validate_batch
from pybroker.log.log import Log
from pybroker.log.log_config import LogConfig
from tests.log.helpers import make_batch


def _fd_is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def test_a_region_of_a_deleted_segment_still_reads_that_segment():
    with tempfile.TemporaryDirectory() as d:
        # file.delete.delay.ms=0: the segment is closed and unlinked at once
        config = LogConfig(segment_bytes=4096, file_delete_delay_ms=0)
        log = Log(os.path.join(d, "t-0"), config)
        for i in range(20):
            batch = make_batch(3, value_size=400, tag=i)
            log.append(batch, validate_batch(batch))
        log.high_watermark = log.log_end_offset
        [region] = log.read(0, 1 << 20).regions[:1]
        expected = os.pread(region.fd, region.length, region.position)
        first_segment = log.segments.first

        log.delete_records_before(log.segments[2].base_offset)
        assert first_segment.fd == -1 and first_segment not in list(log.segments)
        assert not os.path.exists(first_segment.path(".log"))

        opened = [os.open(os.devnull, os.O_RDONLY) for _ in range(8)]
        try:
            assert region.fd not in opened, "the region's fd number was reused"
            assert os.pread(region.fd, region.length, region.position) == expected
        finally:
            for fd in opened:
                os.close(fd)

        fd = region.fd
        del region
        gc.collect()
        assert not _fd_is_open(fd), "the fd outlived the last region read from it"
        log.close()

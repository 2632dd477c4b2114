"""Partition log behaviour with real files: appends, reads as file regions, rolls,
indexes, timestamps, truncation, DeleteRecords, retention, reopen."""

from __future__ import annotations

import logging
import os

import pytest

from bench.driver import pagecache
from pybroker._native.records import decode_records, read_batch_header, scan_log
from pybroker.errors import MessageTooLargeError, OffsetOutOfRangeError
from pybroker.log.log import Log
from pybroker.log.log_config import LogConfig
from pybroker.log.log_segment import LOG_SUFFIX
from tests.log.helpers import append, make_batch, read_all, region_bytes

SMALL = {"segment.bytes": 4096, "index.interval.bytes": 512, "file.delete.delay.ms": 0}


class Clock:
    """An injected clock (seconds, as time.time)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def open_log(path, props=None, **kwargs) -> Log:
    return Log(str(path), LogConfig.from_properties({**SMALL, **(props or {})}), **kwargs)


def fill(log, batches: int, count: int = 3, value_size: int = 100, timestamp: int = 1_000):
    """Append ``batches`` batches; returns the stamped bytes of each (from the file)."""
    infos = [append(log, make_batch(count, value_size, timestamp + 10 * i, tag=i))
             for i in range(batches)]
    return infos


def test_append_assigns_offsets_and_read_returns_the_exact_bytes(tmp_path):
    log = open_log(tmp_path / "t-0")
    written = []
    for i in range(40):
        batch = make_batch(count=i % 4 + 1, tag=i)
        info = append(log, batch, leader_epoch=3)
        assert info.base_offset == (written[-1][1] + 1 if written else 0)
        assert info.last_offset - info.base_offset == i % 4
        written.append((info.base_offset, info.last_offset, bytes(batch)))
    assert log.log_end_offset == written[-1][1] + 1
    assert len(log.segments) > 3, "4 KiB segments must have rolled"
    # every batch read alone comes back byte for byte as stamped
    for base, last, stamped in written:
        for offset in (base, last):
            result = log.read(offset, 1, min_one=True)
            assert result.first_offset == base
            assert region_bytes(result) == stamped
    assert read_all(log) == b"".join(b for _, _, b in written)
    header = read_batch_header(written[5][2])
    assert (header.base_offset, header.partition_leader_epoch) == (written[5][0], 3)
    log.close()


def test_read_bounds_bytes_whole_batches_and_high_watermark(tmp_path):
    log = open_log(tmp_path / "t-0", {"segment.bytes": 1 << 20})
    infos = fill(log, 20)
    size = infos[0].size
    # whole batches only: 2.5 batches of budget returns 2
    result = log.read(0, size * 5 // 2)
    assert result.size == 2 * size and len(result.regions) == 1
    # min_one: one batch even when larger than max_bytes; without it nothing
    assert log.read(0, 10).size == size
    assert log.read(0, 10, min_one=False).size == 0
    # bounded by max_offset: batches entirely below it
    bound = infos[4].base_offset + 1  # inside batch 4: batch 4 is not complete below
    result = log.read(0, 1 << 20, max_offset=bound)
    assert result.size == 4 * size
    assert log.read(infos[4].base_offset, 1 << 20, max_offset=bound).size == 0
    # reading at the end is empty, past it or below the start is out of range
    assert log.read(log.log_end_offset, 100).regions == []
    with pytest.raises(OffsetOutOfRangeError):
        log.read(log.log_end_offset + 1, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    log.close()


def test_a_byte_bounded_read_is_whole_batches_within_an_index_interval_of_full(tmp_path):
    """Where a read bounded by bytes ends comes from the offset index, never from walking
    batch headers (those may have left the page cache): the region is whole batches, at
    most max_bytes, and short of it by less than index.interval.bytes and one batch."""
    interval = 1024
    log = open_log(tmp_path / "t-0", {"segment.bytes": 1 << 20,
                                      "index.interval.bytes": interval})
    infos = [append(log, make_batch(1 + i % 5, 60 + 37 * (i % 7), tag=i)) for i in range(300)]
    assert len(log.segments) == 1
    positions = [0]
    for info in infos:
        positions.append(positions[-1] + info.size)
    boundaries = set(positions)
    largest = max(info.size for info in infos)
    segment_size = positions[-1]
    for first in (0, 7, 100, 201):
        start = positions[first]
        for max_bytes in range(largest, 40_000, 997):
            result = log.read(infos[first].base_offset, max_bytes)
            end = start + result.size
            assert end in boundaries, "a batch cut in two"
            assert result.size <= max_bytes
            assert result.size > min(max_bytes, segment_size - start) - interval - largest
    # batches larger than the interval each have an entry: the bound is exact
    log = open_log(tmp_path / "t-1", {"segment.bytes": 1 << 20, "index.interval.bytes": 100})
    infos = [append(log, make_batch(3, 100 + i, tag=i)) for i in range(40)]
    for max_bytes in range(infos[0].size, 6_000, 211):
        fit = 0
        for info in infos:
            if fit + info.size > max_bytes:
                break
            fit += info.size
        assert log.read(0, max_bytes).size == fit
    log.close()


def test_a_byte_bounded_read_of_cold_data_reads_no_header_past_its_start(tmp_path):
    """Finding where a read ends touches no page of the segment past its first batch
    (on the event loop that would wait for the disk): after a read of 6.5 batches'
    worth of cold data, the batch after the 6 whole ones is still not cached."""
    log = open_log(tmp_path / "t-0", {"segment.bytes": 8 << 20})
    infos = [append(log, make_batch(16, 1000, tag=i)) for i in range(64)]  # ~16 KiB each
    append(log, make_batch(1, 10, tag=99))  # the tail the log remembers is not read below
    path = log.segments[0].path(LOG_SUFFIX)
    pagecache.drop([path])
    after = sum(info.size for info in infos[:6])
    assert pagecache.resident_pages(path)[0] == 0
    result = log.read(0, after + infos[6].size // 2)
    assert result.size == after
    assert pagecache.resident_pages(path, after, infos[6].size)[0] == 0
    log.close()


def test_read_spans_segments(tmp_path):
    log = open_log(tmp_path / "t-0")
    fill(log, 30)
    assert len(log.segments) >= 3
    result = log.read(0, 1 << 20)
    assert len(result.regions) == len(log.segments)
    assert result.size == sum(s.size for s in log.segments)
    log.close()


def test_indexes_are_sparse_and_match_a_rebuild(tmp_path):
    log = open_log(tmp_path / "t-0", {"segment.bytes": 1 << 20, "index.interval.bytes": 1000})
    infos = fill(log, 60)
    segment = log.segments.active
    size = infos[0].size
    entries = segment.offset_index.entries
    # one entry per index.interval.bytes of log (the first once more than that was
    # written before it), so entries are just over 1000 bytes apart
    positions = [0] + [segment.offset_index.entry(i)[1] for i in range(entries)]
    gaps = [b - a for a, b in zip(positions, positions[1:], strict=False)]
    assert entries > 10 and all(1000 < gap <= 1000 + size for gap in gaps)
    # the native recovery scan builds the same entries as the appends did
    with open(segment.path(".log"), "rb") as f:
        data = f.read()
    scan = scan_log(data, 0, len(data), segment.base_offset, 1000)
    assert scan.offset_index == segment.offset_index.raw()
    assert scan.time_index == segment.time_index.raw()
    log.close()


def test_offset_for_timestamp(tmp_path):
    log = open_log(tmp_path / "t-0")
    infos = fill(log, 30, count=3, timestamp=10_000)  # batch i: 10000 + 10i + (0..2)
    assert len(log.segments) > 2
    for i in (0, 7, 29):
        found = log.offset_for_timestamp(10_000 + 10 * i + 1)
        assert found == (10_000 + 10 * i + 1, infos[i].base_offset + 1)
        # between batches: the next batch's first record
        if i < 29:
            found = log.offset_for_timestamp(10_000 + 10 * i + 5)
            assert found == (10_000 + 10 * (i + 1), infos[i + 1].base_offset)
    assert log.offset_for_timestamp(0) == (10_000, 0)
    assert log.offset_for_timestamp(10**12) is None
    assert log.offset_for_timestamp(-2).offset == 0
    assert log.offset_for_timestamp(-1).offset == log.log_end_offset
    assert log.offset_for_timestamp(-3) == (10_000 + 290 + 2, infos[-1].last_offset)
    log.close()


def test_log_append_time_topic_stamps_the_batch(tmp_path):
    clock = Clock(2_000_000.0)
    log = open_log(tmp_path / "t-0", {"message.timestamp.type": "LogAppendTime"}, clock=clock)
    batch = make_batch(timestamp=5)
    info = append(log, batch)
    assert info.log_append_time == info.max_timestamp == 2_000_000_000
    header = read_batch_header(region_bytes(log.read(0, 1000)))
    assert header.timestamp_type == 1 and header.max_timestamp == 2_000_000_000
    records = decode_records(region_bytes(log.read(0, 1000)))
    assert [r.timestamp for r in records] == [2_000_000_000] * 3
    log.close()


def test_batch_larger_than_max_message_bytes_is_refused(tmp_path):
    log = open_log(tmp_path / "t-0", {"max.message.bytes": 1000})
    with pytest.raises(MessageTooLargeError):
        append(log, make_batch(count=3, value_size=500))
    assert log.log_end_offset == 0
    log.close()


def test_truncate_to(tmp_path):
    log = open_log(tmp_path / "t-0")
    infos = fill(log, 30)
    log.leader_epoch_cache.assign(5, infos[20].base_offset)
    keep = infos[12]
    segments_before = len(log.segments)
    # truncating inside a batch removes that whole batch
    assert log.truncate_to(keep.base_offset + 1)
    assert log.log_end_offset == keep.base_offset
    assert len(log.segments) < segments_before
    assert log.leader_epoch_cache.entries()[-1][1] < keep.base_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(keep.base_offset + 1, 100)
    expected = read_all(log)
    # appends continue at the new end, and survive a clean reopen
    info = append(log, make_batch(tag=99))
    assert info.base_offset == keep.base_offset
    log.close()
    log = open_log(tmp_path / "t-0")
    assert log.log_end_offset == info.last_offset + 1
    assert read_all(log).startswith(expected)
    assert not log.truncate_to(log.log_end_offset)
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (0, 0, 1)
    log.close()


def test_delete_records_before_moves_the_start_and_drops_segments(tmp_path):
    log = open_log(tmp_path / "t-0")
    infos = fill(log, 30)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(10)  # above the high watermark (still 0)
    log.high_watermark = log.log_end_offset
    target = infos[20].base_offset + 1
    assert log.delete_records_before(target) == target
    assert log.log_start_offset == target
    assert log.segments.first.base_offset <= target
    assert all(s.base_offset <= target for s in list(log.segments)[:1])
    with pytest.raises(OffsetOutOfRangeError):
        log.read(target - 1, 100)
    assert log.read(target, 100).first_offset == infos[20].base_offset
    log.close()


def test_retention_by_time_with_injected_clock(tmp_path):
    clock = Clock(1_000.0)  # ms 1_000_000
    log = open_log(tmp_path / "t-0", {"retention.ms": 60_000}, clock=clock)
    for i in range(30):
        append(log, make_batch(timestamp=1_000_000 + 1000 * i, tag=i))
    log.high_watermark = log.log_end_offset
    segments = list(log.segments)
    assert log.delete_old_segments() == 0
    # 61 s after the first segment's newest record: exactly that segment goes
    clock.now = (segments[0].max_timestamp + 60_001) / 1000
    assert log.delete_old_segments() == 1
    assert log.log_start_offset == segments[1].base_offset
    assert not os.path.exists(segments[0].path(".log"))
    # everything old, active segment included: a new empty active segment remains
    clock.now = 10_000.0
    log.delete_old_segments()
    assert len(log.segments) == 1 and log.segments.active.size == 0
    assert log.log_start_offset == log.log_end_offset == 90
    append(log, make_batch(timestamp=10_000_000))
    assert log.read(90, 1000).first_offset == 90
    log.close()


def test_retention_by_size_and_delayed_file_deletion(tmp_path):
    clock = Clock()
    log = open_log(tmp_path / "t-0", {"retention.bytes": 8192, "retention.ms": -1,
                                      "file.delete.delay.ms": 30_000}, clock=clock)
    fill(log, 40)
    log.high_watermark = log.log_end_offset
    total = log.size()
    doomed = list(log.segments)[0]
    fd = doomed.fd
    deleted = log.delete_old_segments()
    assert deleted >= 1
    # Kafka's rule: whole segments from the oldest while the rest stays >= retention.bytes
    assert log.size() >= 8192 > log.size() - log.segments.first.size
    assert total - log.size() >= doomed.size
    # renamed at once, the descriptor still readable, unlinked after the delay
    assert os.path.exists(doomed.path(".log.deleted"))
    assert os.pread(fd, 10, 0)
    assert log.delete_expired_files() == 0
    clock.now += 31
    assert log.delete_expired_files() == deleted
    assert not os.path.exists(doomed.path(".log.deleted"))
    log.close()


def test_retention_minus_one_keeps_everything(tmp_path):
    clock = Clock()
    log = open_log(tmp_path / "t-0", {"retention.ms": -1, "retention.bytes": -1}, clock=clock)
    fill(log, 30)
    log.high_watermark = log.log_end_offset
    clock.now += 10**9
    assert log.delete_old_segments() == 0
    log.close()


def test_roll_on_segment_ms(tmp_path):
    clock = Clock()
    log = open_log(tmp_path / "t-0", {"segment.ms": 1000, "segment.bytes": 1 << 20},
                   clock=clock)
    append(log, make_batch(timestamp=1_000))
    append(log, make_batch(timestamp=1_500))
    assert len(log.segments) == 1
    append(log, make_batch(timestamp=2_100))  # 1.1 s after the first batch
    assert len(log.segments) == 2 and log.segments.active.base_offset == 6
    log.close()


def test_clean_reopen_does_not_scan_and_rebuilds_a_bad_index(tmp_path, caplog):
    log = open_log(tmp_path / "t-0")
    fill(log, 30)
    end, segments = log.log_end_offset, [s.base_offset for s in log.segments]
    expected = read_all(log)
    log.close()
    caplog.set_level(logging.INFO, logger="pybroker.log")
    log = open_log(tmp_path / "t-0")
    assert "recovered" not in caplog.text
    assert (log.log_end_offset, [s.base_offset for s in log.segments]) == (end, segments)
    assert read_all(log) == expected
    first = log.segments.first
    log.close()
    # a damaged index (not a whole number of entries) and a missing one are rebuilt
    with open(first.path(".index"), "ab") as f:
        f.write(b"\x01\x02\x03")
    os.unlink(log.segments.active.path(".timeindex"))
    caplog.clear()
    log = open_log(tmp_path / "t-0")
    assert caplog.text.count("rebuilding indexes") == 2
    assert read_all(log) == expected
    assert log.offset_for_timestamp(1_000 + 10 * 29) is not None
    log.close()


def test_follower_append_keeps_offsets_and_epochs(tmp_path):
    leader = open_log(tmp_path / "leader-0")
    for i in range(10):
        append(leader, make_batch(tag=i), leader_epoch=1 if i < 5 else 2)
    leader.high_watermark = leader.log_end_offset
    follower = open_log(tmp_path / "follower-0")
    offset = 0
    while offset < leader.log_end_offset:
        data = region_bytes(leader.read(offset, 1500, min_one=True))
        info = follower.append_as_follower(data)
        offset = info.last_offset + 1
    assert follower.log_end_offset == leader.log_end_offset
    assert read_all(follower) == read_all(leader)
    assert follower.leader_epoch_cache.entries() == leader.leader_epoch_cache.entries() \
        == [(1, 0), (2, 15)]
    leader.close()
    follower.close()


def test_flush_messages_moves_the_recovery_point_and_writes_the_indexes(tmp_path):
    log = open_log(tmp_path / "t-0", {"flush.messages": 6, "segment.bytes": 1 << 20})
    append(log, make_batch(count=3))
    assert log.recovery_point == 0
    append(log, make_batch(count=3))
    assert log.recovery_point == 6
    # the active segment's indexes live in memory; a flush writes them to their files
    for i in range(20):
        append(log, make_batch(count=3, timestamp=2000 + 10 * i))
    segment = log.segments.active
    for index, suffix in ((segment.offset_index, ".index"), (segment.time_index, ".timeindex")):
        assert index.entries > 2
        with open(segment.path(suffix), "rb") as f:
            assert f.read() == index.raw()
    log.truncate_to(20)
    log.flush()
    with open(segment.path(".index"), "rb") as f:
        assert f.read() == segment.offset_index.raw()
    log.close()


def test_flush_ms_with_injected_clock(tmp_path):
    clock = Clock()
    log = open_log(tmp_path / "t-0", {"flush.ms": 1000}, clock=clock)
    append(log, make_batch())
    assert not log.flush_if_due()
    clock.now += 1.5
    assert log.flush_if_due() and log.recovery_point == 3
    log.close()


def test_roll_on_full_index_and_on_relative_offset_overflow(tmp_path):
    # 96 bytes: 12 offset entries, 8 time entries of which 7 usable (one kept for the
    # final entry at roll)
    log = open_log(tmp_path / "t-0", {"segment.bytes": 1 << 20, "index.interval.bytes": 0,
                                      "segment.index.bytes": 96})
    for i in range(10):
        append(log, make_batch(count=1, timestamp=1000 + i))
    first, second = list(log.segments)
    assert first.time_index.entries == 7 and second.base_offset == 8  # batch 0 has none
    # a follower batch 2^31 offsets ahead cannot be indexed relative to this segment
    from pybroker._native.records import encode_batch
    far = 2**31 + 100
    log.append_as_follower(encode_batch([b"v"], timestamps=[5000], base_offset=far))
    assert log.segments.active.base_offset == far and log.log_end_offset == far + 1
    assert region_bytes(log.read(far, 100))[:8] == far.to_bytes(8, "big")
    log.close()
    log.close()  # closing twice is harmless
    reopened = open_log(tmp_path / "t-0")
    assert reopened.log_end_offset == far + 1
    reopened.close()


def test_log_config_from_kafka_properties():
    config = LogConfig.from_properties({"segment.bytes": "2048", "retention.ms": -1,
                                        "cleanup.policy": "compact,delete",
                                        "message.timestamp.type": "LogAppendTime",
                                        "flush.ms": None})
    assert (config.segment_bytes, config.retention_ms, config.deletes) == (2048, -1, True)
    assert config.log_append_time and not config.flushes_by_time
    assert config.to_properties()["index.interval.bytes"] == 4096
    from pybroker.errors import InvalidConfigError
    for bad in ({"segment.bytes": "0"}, {"no.such.key": 1}, {"cleanup.policy": "x"},
                {"message.timestamp.type": "Now"}, {"retention.ms": "soon"}):
        with pytest.raises(InvalidConfigError):
            LogConfig.from_properties(bad)

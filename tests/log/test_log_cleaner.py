"""The log cleaner on real logs: one round of cleaning, the swap, and the recovery of a
swap a crash interrupted (the ``.cleaned``/``.swap`` leftovers)."""

from __future__ import annotations

import os
import shutil
import threading
import time

from pybroker._native.records import (
    decode_records,
    encode_batch,
    read_batch_header,
    validate_batch,
)
from pybroker.log.log import CLEANED_SUFFIX, SWAP_SUFFIX
from pybroker.log.log_cleaner import CHECKPOINT_FILE, CleanerConfig, LogCleaner, Throttler
from pybroker.log.log_config import LogConfig
from pybroker.log.log_manager import LogManager
from pybroker.log.log_segment import LOG_SUFFIX, file_name
from tests.log.helpers import read_all, region_bytes

COMPACT = LogConfig.from_properties({"cleanup.policy": "compact", "segment.bytes": 2048,
                                     "file.delete.delay.ms": 0})


def produce(partition_log, records) -> None:
    """One batch per (key, value) pair, the high watermark moved to the end."""
    now = int(time.time() * 1000)
    for key, value in records:
        batch = bytearray(encode_batch([value], [key], [now]))
        partition_log.append(batch, validate_batch(batch))
    partition_log.high_watermark = partition_log.log_end_offset


def records_of(data: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    out, position = [], 0
    while position < len(data):
        size = read_batch_header(data, position).size
        out += [(r.offset, r.key, r.value) for r in decode_records(data[position:position + size])]
        position += size
    return out


def changelog(n: int = 300) -> list[tuple[bytes, bytes | None]]:
    """Updates of ten keys, k3 deleted at the end of each hundred."""
    return [(b"k%d" % (i % 10), None if i % 100 == 93 else b"v%d" % i) for i in range(n)]


def expected_after(written, end: int):
    """The model: below ``end`` the latest record of each key, from ``end`` on all."""
    latest = {key: offset for offset, (key, _) in enumerate(written) if offset < end}
    return [(offset, key, value) for offset, (key, value) in enumerate(written)
            if offset >= end or latest[key] == offset]


def test_one_round_keeps_the_latest_record_of_each_key(tmp_path):
    manager = LogManager(str(tmp_path))
    partition_log = manager.get_or_create("changes", 0, COMPACT)
    written = changelog()
    produce(partition_log, written)
    cleaner = LogCleaner(manager, CleanerConfig(dedupe_buffer_size=1 << 20))
    assert cleaner.clean_once()
    end = cleaner.checkpoint("changes", 0)
    assert end == partition_log.segments.active.base_offset
    expected = expected_after(written, end)
    assert records_of(read_all(partition_log)) == expected
    assert partition_log.log_end_offset == len(written)
    assert not cleaner.clean_once()  # nothing dirty enough now
    # restarts read the same log and the same checkpoint
    manager.close()
    manager = LogManager(str(tmp_path))
    manager.load(lambda topic: COMPACT)
    partition_log = manager.get("changes", 0)
    assert records_of(read_all(partition_log)) == expected
    assert LogCleaner(manager).checkpoint("changes", 0) == end
    assert (tmp_path / CHECKPOINT_FILE).exists()
    manager.close()


def test_tombstones_go_after_delete_retention(tmp_path):
    manager = LogManager(str(tmp_path))
    config = LogConfig.from_properties({**COMPACT.to_properties(), "delete.retention.ms": 100,
                                        "min.cleanable.dirty.ratio": 0.01})
    partition_log = manager.get_or_create("changes", 0, config)
    written = changelog(200)
    produce(partition_log, written)
    clock = [time.time()]
    cleaner = LogCleaner(manager, CleanerConfig(dedupe_buffer_size=1 << 20),
                         clock=lambda: clock[0])
    segments_before = len(partition_log.segments)
    for round in range(2):  # the second round cleans the tombstone: its horizon is set
        assert cleaner.clean_once()
        assert (193, b"k3", None) in records_of(read_all(partition_log))
        produce(partition_log, [(b"other%d" % i, b"x%d" % round) for i in range(60)])
    clock[0] += 1.0  # past the tombstone's delete horizon
    assert cleaner.clean_once()
    # cleaned segments are merged: fewer now, with 120 more records, than at first
    assert len(partition_log.segments) < segments_before
    survivors = records_of(read_all(partition_log))
    assert not any(key == b"k3" for _, key, _ in survivors)
    assert [r for r in survivors if r[0] < 200] == \
        [r for r in expected_after(written, 200) if r[1] != b"k3"]
    manager.close()


def test_swap_refused_after_a_truncation(tmp_path):
    manager = LogManager(str(tmp_path))
    partition_log = manager.get_or_create("changes", 0, COMPACT)
    produce(partition_log, changelog())
    old = list(partition_log.segments)[:2]
    base = old[0].base_offset
    for suffix in (".log", ".index", ".timeindex"):
        (tmp_path / "changes-0" / file_name(base, suffix + CLEANED_SUFFIX)).write_bytes(b"")
    before = read_all(partition_log)
    partition_log.truncate_to(partition_log.log_end_offset - 1)
    assert partition_log.replace_segments(old, partition_log.truncations - 1) is None
    assert not [n for n in os.listdir(tmp_path / "changes-0") if n.endswith(CLEANED_SUFFIX)]
    assert read_all(partition_log) == before[:len(read_all(partition_log))]
    manager.close()


def _two_segment_swap(tmp_path, rename_old: bool):
    """A log whose first two segments are merged into one ``.swap`` file, as a crash
    after the swap was decided leaves it; the old files as they were (or renamed
    ``.deleted`` with ``rename_old``)."""
    manager = LogManager(str(tmp_path))
    partition_log = manager.get_or_create("changes", 0, COMPACT)
    produce(partition_log, changelog())
    expected = read_all(partition_log)
    first, second = list(partition_log.segments)[:2]
    manager.close()
    directory = tmp_path / "changes-0"
    with open(directory / file_name(first.base_offset, LOG_SUFFIX + SWAP_SUFFIX), "wb") as f:
        for segment in (first, second):
            f.write((directory / file_name(segment.base_offset, LOG_SUFFIX)).read_bytes())
    (directory / file_name(0, ".index" + CLEANED_SUFFIX)).write_bytes(b"junk")
    if rename_old:
        for segment in (first, second):
            for suffix in (".log", ".index", ".timeindex"):
                path = directory / file_name(segment.base_offset, suffix)
                os.rename(path, str(path) + ".deleted")
    os.unlink(tmp_path / ".kafka_cleanshutdown")  # as after a crash
    return expected, second.base_offset


def test_load_finishes_a_decided_swap(tmp_path):
    for rename_old in (False, True):
        shutil.rmtree(tmp_path, ignore_errors=True)
        os.makedirs(tmp_path)
        expected, second_base = _two_segment_swap(tmp_path, rename_old)
        manager = LogManager(str(tmp_path))
        manager.load(lambda topic: COMPACT)
        partition_log = manager.get("changes", 0)
        assert read_all(partition_log) == expected
        names = os.listdir(tmp_path / "changes-0")
        assert file_name(second_base, LOG_SUFFIX) not in names
        assert not [n for n in names if n.endswith((SWAP_SUFFIX, CLEANED_SUFFIX, ".deleted"))]
        manager.close()


def test_load_discards_an_undecided_swap(tmp_path):
    manager = LogManager(str(tmp_path))
    partition_log = manager.get_or_create("changes", 0, COMPACT)
    produce(partition_log, changelog())
    expected = read_all(partition_log)
    manager.close()
    directory = tmp_path / "changes-0"
    for suffix in (".log", ".index", ".timeindex"):
        (directory / file_name(0, suffix + CLEANED_SUFFIX)).write_bytes(b"partial")
    manager = LogManager(str(tmp_path))
    manager.load(lambda topic: COMPACT)
    assert read_all(manager.get("changes", 0)) == expected
    assert not [n for n in os.listdir(directory) if n.endswith(CLEANED_SUFFIX)]
    manager.close()


def test_regions_read_before_a_swap_are_still_served(tmp_path):
    for delay in (0, 60_000):
        manager = LogManager(str(tmp_path / str(delay)))
        config = LogConfig.from_properties({**COMPACT.to_properties(),
                                            "file.delete.delay.ms": delay})
        partition_log = manager.get_or_create("changes", 0, config)
        produce(partition_log, changelog())
        before = partition_log.read(0, 1 << 20)
        expected = region_bytes(before)
        assert LogCleaner(manager, CleanerConfig(dedupe_buffer_size=1 << 20)).clean_once()
        assert region_bytes(partition_log.read(0, 1 << 20)) != expected
        assert region_bytes(before) == expected  # the old segments' descriptors live on
        manager.close()


def test_max_compaction_lag_rolls_the_active_segment_of_a_compacted_log():
    compacted = LogConfig.from_properties({"cleanup.policy": "compact,delete",
                                           "max.compaction.lag.ms": 1000})
    assert compacted.roll_ms == 1000
    assert LogConfig.from_properties({"max.compaction.lag.ms": 1000}).roll_ms == \
        LogConfig().segment_ms
    assert LogConfig.from_properties({"cleanup.policy": "compact", "segment.ms": 500,
                                      "segment.jitter.ms": 100}).roll_ms == 400


def test_rolled_by_max_compaction_lag(tmp_path):
    manager = LogManager(str(tmp_path))
    config = LogConfig.from_properties({"cleanup.policy": "compact",
                                        "max.compaction.lag.ms": 1000})
    partition_log = manager.get_or_create("changes", 0, config)
    for ts in (10_000, 10_500, 11_001):
        batch = bytearray(encode_batch([b"v"], [b"k"], [ts]))
        partition_log.append(batch, validate_batch(batch))
    assert [s.base_offset for s in partition_log.segments] == [0, 2]
    manager.close()


def test_the_last_batch_of_each_producer_stays(tmp_path):
    manager = LogManager(str(tmp_path))
    partition_log = manager.get_or_create("changes", 0, COMPACT)
    now = int(time.time() * 1000)
    batch = bytearray(encode_batch([b"old"] * 3, [b"a", b"b", b"c"], [now] * 3,
                                   producer_id=42, producer_epoch=3, base_sequence=7))
    partition_log.append(batch, validate_batch(batch))
    produce(partition_log, changelog())
    produce(partition_log, [(b"a", b"new"), (b"b", b"new"), (b"c", b"new")])
    produce(partition_log, changelog(40))
    cleaner = LogCleaner(manager, CleanerConfig(dedupe_buffer_size=1 << 20),
                         producers=lambda topic, partition: {42: 2})
    assert cleaner.clean_once()
    first = next(partition_log.batches(0))[0]
    assert (first.base_offset, first.last_offset, first.records_count) == (0, 2, 0)
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (42, 3, 7)
    manager.close()


def test_throttler_asks_for_the_sleep_that_brings_the_rate_down():
    sleeps: list[float] = []
    throttler = Throttler(10_000, sleeps.append)
    throttler.maybe_throttle(50_000)
    assert not sleeps  # inside the first measuring period
    time.sleep(Throttler.PERIOD_S)
    throttler.maybe_throttle(0)
    # 50 kB at 10 kB/s take 5 s: the caller sleeps what is left of them
    assert len(sleeps) == 1 and 4.0 < sleeps[0] < 5.0 - Throttler.PERIOD_S + 0.01
    throttler.maybe_throttle(0)
    assert len(sleeps) == 1  # a new period began


def test_compaction_lags_decide_when_a_log_is_cleaned(tmp_path):
    manager = LogManager(str(tmp_path))
    clock = [time.time()]
    lagged = LogConfig.from_properties({**COMPACT.to_properties(),
                                        "min.compaction.lag.ms": 60_000})
    partition_log = manager.get_or_create("changes", 0, lagged)
    produce(partition_log, changelog())
    cleaner = LogCleaner(manager, CleanerConfig(dedupe_buffer_size=1 << 20),
                         clock=lambda: clock[0])
    assert not cleaner.clean_once()  # every record is younger than the lag
    clock[0] += 61
    assert cleaner.clean_once()
    # below min.cleanable.dirty.ratio, a log is cleaned once its oldest dirty record is
    # older than max.compaction.lag.ms
    idle = LogConfig.from_properties({**COMPACT.to_properties(),
                                      "min.cleanable.dirty.ratio": 1,
                                      "max.compaction.lag.ms": 120_000})
    partition_log.update_config(idle)
    produce(partition_log, changelog(100))
    assert not cleaner.clean_once()
    clock[0] += 121
    assert cleaner.clean_once()
    manager.close()


def _cleaner_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate()
                  if t.name.startswith("pybroker-log-cleaner-") and t.is_alive())


def test_reconfigure_changes_the_thread_count_and_ends_backing_off_at_once(tmp_path):
    manager = LogManager(str(tmp_path))
    hour = 3_600_000
    cleaner = LogCleaner(manager, CleanerConfig(threads=1, backoff_ms=hour,
                                                dedupe_buffer_size=1 << 20))
    cleaner.start()
    try:
        assert _cleaner_threads() == ["pybroker-log-cleaner-0"]
        cleaner.reconfigure(CleanerConfig(threads=3, backoff_ms=hour, dedupe_buffer_size=3 << 20,
                                          io_max_bytes_per_second=1e6))
        assert _cleaner_threads() == [f"pybroker-log-cleaner-{i}" for i in range(3)]
        assert cleaner._throttler.bytes_per_second == 1e6
        # the two extra threads back off for an hour: the change wakes them, and they end
        cleaner.reconfigure(CleanerConfig(threads=1, backoff_ms=hour,
                                          dedupe_buffer_size=1 << 20))
        deadline = time.monotonic() + 30
        while len(_cleaner_threads()) > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _cleaner_threads() == ["pybroker-log-cleaner-0"]
    finally:
        cleaner.stop()
        manager.close()
    assert _cleaner_threads() == []

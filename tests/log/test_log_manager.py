"""LogManager with a real data directory: load/close, the clean-shutdown marker, the
offset checkpoint files, partition deletion; and the leader epoch checkpoint."""

from __future__ import annotations

import logging
import os

import pytest

from pybroker.errors import InvalidTopicError, KafkaStorageError
from pybroker.log.checkpoints import (
    HIGH_WATERMARK_FILE,
    LEADER_EPOCH_FILE,
    read_checkpoint,
    write_checkpoint,
)
from pybroker.log.leader_epoch_cache import LeaderEpochCache
from pybroker.log.log_config import LogConfig
from pybroker.log.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from tests.log.helpers import append, make_batch, read_all

CONFIG = LogConfig.from_properties({"segment.bytes": 4096, "file.delete.delay.ms": 0})


def test_clean_close_writes_marker_and_checkpoints_and_load_removes_it(tmp_path, caplog):
    data = str(tmp_path)
    manager = LogManager(data)
    assert manager.load() == []
    logs = {p: manager.get_or_create("my-topic", p, CONFIG) for p in range(3)}
    for p, log in logs.items():
        for i in range(5 * (p + 1)):
            append(log, make_batch(tag=i))
        log.high_watermark = log.log_end_offset - 1
    expected = {p: read_all(log) for p, log in logs.items()}
    manager.close()
    assert os.path.exists(os.path.join(data, CLEAN_SHUTDOWN_FILE))
    assert sorted(read_checkpoint(os.path.join(data, HIGH_WATERMARK_FILE), 3)) == [
        ["my-topic", "0", "14"], ["my-topic", "1", "29"], ["my-topic", "2", "44"]]
    caplog.set_level(logging.INFO, logger="pybroker.log")
    manager = LogManager(data)
    loaded = manager.load(lambda topic: CONFIG)
    assert len(loaded) == 3 and "recovered" not in caplog.text
    assert not os.path.exists(os.path.join(data, CLEAN_SHUTDOWN_FILE))
    for p in range(3):
        log = manager.get("my-topic", p)
        assert read_all(log) == expected[p]
        assert (log.high_watermark, log.recovery_point) == (15 * (p + 1) - 1, 15 * (p + 1))
    # no marker now: an unclean stop makes the next load scan from the recovery point
    manager.close(clean=False)
    caplog.clear()
    manager = LogManager(data)
    manager.load(lambda topic: CONFIG)
    assert "recovered" in caplog.text
    assert read_all(manager.get("my-topic", 2)) == expected[2]
    manager.close()


def test_delete_partition_renames_then_removes(tmp_path):
    manager = LogManager(str(tmp_path))
    log = manager.get_or_create("gone", 0, LogConfig.from_properties(
        {"file.delete.delay.ms": 60_000}))
    append(log, make_batch())
    region = log.read(0, 1000).regions[0]
    assert manager.delete("gone", 0)
    assert manager.get("gone", 0) is None
    # closed at once, but a region being sent keeps its descriptor
    assert log.segments.active.fd == -1
    assert len(os.pread(region.fd, region.length, region.position)) == region.length
    manager.finish_deletions("gone")  # (the rename is otherwise the deleter thread's)
    leftovers = [n for n in os.listdir(tmp_path) if n.endswith("-delete")]
    assert len(leftovers) == 1 and not os.path.exists(tmp_path / "gone-0")
    assert not manager.deletion_pending("gone")
    # a new partition of the same name starts empty
    assert manager.get_or_create("gone", 0).log_end_offset == 0
    manager.close()
    assert not [n for n in os.listdir(tmp_path) if n.endswith("-delete")]


def test_illegal_topic_names_are_refused(tmp_path):
    manager = LogManager(str(tmp_path))
    for name in ("../x", "a/b", "", "x" * 250):
        with pytest.raises(InvalidTopicError):
            manager.get_or_create(name, 0)
    manager.close()


def test_leader_epoch_cache_rules_and_checkpoint_round_trip(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    cache.assign(1, 0)
    cache.assign(1, 5)          # same epoch, later offset: nothing changes
    cache.assign(3, 10)
    cache.assign(4, 25)
    assert cache.entries() == [(1, 0), (3, 10), (4, 25)]
    with open(tmp_path / LEADER_EPOCH_FILE) as f:
        assert f.read() == "0\n3\n1 0\n3 10\n4 25\n"  # Kafka's file format
    assert LeaderEpochCache(str(tmp_path)).entries() == cache.entries()
    assert cache.end_offset_for_epoch(4, 40) == (4, 40)
    assert cache.end_offset_for_epoch(3, 40) == (3, 25)
    assert cache.end_offset_for_epoch(2, 40) == (1, 10)   # unknown epoch: the one below
    assert cache.end_offset_for_epoch(0, 40) == (0, 0)    # below every epoch
    assert cache.end_offset_for_epoch(5, 40) == (-1, -1)  # above every epoch
    cache.assign(2, 12)        # an older epoch at a later offset evicts what it contradicts
    assert cache.entries() == [(1, 0), (2, 12)]
    cache.assign(3, 20)
    cache.truncate_from_end(20)
    assert cache.entries() == [(1, 0), (2, 12)]
    cache.truncate_from_start(15)
    assert cache.entries() == [(2, 15)]
    assert LeaderEpochCache(str(tmp_path)).entries() == [(2, 15)]


def test_malformed_checkpoint_is_an_error(tmp_path):
    path = str(tmp_path / "cp")
    write_checkpoint(path, [("a", 0, 5)])
    assert read_checkpoint(path, 3) == [["a", "0", "5"]]
    with open(path, "w") as f:
        f.write("0\n2\na 0 5\n")
    with pytest.raises(KafkaStorageError):
        read_checkpoint(path, 3)


def test_rolled_segments_are_flushed_so_unclean_recovery_scans_only_the_tail(tmp_path, caplog):
    data = str(tmp_path)
    manager = LogManager(data)
    log = manager.get_or_create("t", 0, CONFIG)
    for i in range(40):
        append(log, make_batch(tag=i))
    segments = len(log.segments)
    assert segments > 3
    expected = read_all(log)
    manager._flusher.shutdown(wait=True)  # the background fsyncs of rolled segments
    assert log.recovery_point == log.segments.active.base_offset
    manager.checkpoint()
    # a crash now: no marker, files left as they are (not closed, indexes not trimmed)
    caplog.set_level(logging.INFO, logger="pybroker.log")
    reopened = LogManager(data)
    reopened.load(lambda topic: CONFIG)
    assert "recovered 1 segments" in caplog.text
    assert read_all(reopened.get("t", 0)) == expected
    reopened.close()
    log.close()

"""LogManager over several log directories (``log.dirs`` with a list), on real files:
placement of new partitions, each directory's own checkpoints and clean-shutdown marker,
recovery of every directory, deletion in any of them."""

from __future__ import annotations

import os

import pytest

from pybroker.errors import KafkaStorageError
from pybroker.log.checkpoints import HIGH_WATERMARK_FILE, RECOVERY_POINT_FILE, read_offsets
from pybroker.log.log_config import LogConfig
from pybroker.log.log_manager import CLEAN_SHUTDOWN_FILE, LogManager, log_dir_of
from tests.log.helpers import append, make_batch, read_all

CONFIG = LogConfig.from_properties({"segment.bytes": 4096, "file.delete.delay.ms": 0})


def dirs_of(tmp_path, count: int) -> list[str]:
    return [str(tmp_path / f"disk{i}") for i in range(count)]


def test_new_partitions_go_to_the_directory_with_fewest(tmp_path):
    dirs = dirs_of(tmp_path, 3)
    manager = LogManager(dirs)
    manager.load()
    placed = [log_dir_of(manager.get_or_create("t", p, CONFIG)) for p in range(7)]
    assert placed == [dirs[0], dirs[1], dirs[2], dirs[0], dirs[1], dirs[2], dirs[0]]
    assert manager.delete("t", 1) and manager.delete("t", 4)  # dirs[1] now has none
    assert log_dir_of(manager.get_or_create("u", 0, CONFIG)) == dirs[1]
    by_dir = manager.logs_by_dir()
    assert list(by_dir) == dirs
    assert sorted(key for key, _ in by_dir[dirs[0]]) == [("t", 0), ("t", 3), ("t", 6)]
    assert [key for key, _ in by_dir[dirs[1]]] == [("u", 0)]
    manager.close()


def test_equal_counts_are_broken_by_bytes(tmp_path):
    dirs = dirs_of(tmp_path, 2)
    manager = LogManager(dirs)
    manager.load()
    big, small = (manager.get_or_create("t", p, CONFIG) for p in range(2))
    for i in range(20):
        append(big, make_batch(tag=i))
    append(small, make_batch(tag=0))
    manager.close()
    manager = LogManager(dirs)  # a fresh manager: byte totals read now
    manager.load(lambda topic: CONFIG)
    assert log_dir_of(manager.get_or_create("next", 0, CONFIG)) == dirs[1]
    manager.close()


def test_every_directory_keeps_its_own_checkpoints_and_is_recovered(tmp_path):
    dirs = dirs_of(tmp_path, 3)
    manager = LogManager(dirs)
    manager.load()
    logs = {p: manager.get_or_create("t", p, CONFIG) for p in range(6)}
    for p, plog in logs.items():
        for i in range(3 + p):
            append(plog, make_batch(tag=i))
        plog.high_watermark = plog.log_end_offset
    expected = {p: read_all(plog) for p, plog in logs.items()}
    manager.close()
    for i, log_dir in enumerate(dirs):
        assert os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE))
        mine = {("t", i), ("t", i + 3)}  # placed round-robin
        assert set(read_offsets(os.path.join(log_dir, HIGH_WATERMARK_FILE))) == mine
        assert set(read_offsets(os.path.join(log_dir, RECOVERY_POINT_FILE))) == mine
    manager = LogManager(dirs)
    assert len(manager.load(lambda topic: CONFIG)) == 6
    for p in range(6):
        plog = manager.get("t", p)
        assert log_dir_of(plog) == dirs[p % 3]
        assert read_all(plog) == expected[p]
        assert plog.high_watermark == 3 * (3 + p)
    assert manager.delete("t", 5)
    manager.close(clean=False)  # the deletion is done by close; the next load recovers
    manager = LogManager(dirs)
    manager.load(lambda topic: CONFIG)
    assert sorted(key for key, _ in manager.logs()) == [("t", p) for p in range(5)]
    assert not [name for name in os.listdir(dirs[2]) if name.startswith("t-5")]
    manager.close()


def test_a_partition_in_two_directories_stops_the_load(tmp_path):
    dirs = dirs_of(tmp_path, 2)
    for log_dir in dirs:
        os.makedirs(os.path.join(log_dir, "t-0"))
    manager = LogManager(dirs)
    with pytest.raises(KafkaStorageError, match="two log directories"):
        manager.load()
    manager.close(clean=False)


def test_a_future_log_swaps_in_and_a_stop_mid_swap_finishes_it(tmp_path):
    dirs = dirs_of(tmp_path, 2)
    manager = LogManager(dirs)
    manager.load()
    plog = manager.get_or_create("t", 0, CONFIG)
    for i in range(30):
        append(plog, make_batch(tag=i))
    plog.high_watermark = plog.log_end_offset
    expected = read_all(plog)
    future = manager.create_future("t", 0, dirs[1])
    future.append_as_follower(expected)
    moved = manager.replace_with_future("t", 0)
    assert manager.get("t", 0) is moved and log_dir_of(moved) == dirs[1]
    assert read_all(moved) == expected and moved.high_watermark == plog.log_end_offset
    assert manager.futures() == []
    # a future left with no current log (a stop between the two renames) becomes the log;
    # one left beside a current log (a move not finished) is removed
    manager.close()
    os.rename(os.path.join(dirs[1], "t-0"), os.path.join(dirs[1], "t-0." + "a" * 32 + "-future"))
    unfinished = LogManager(dirs)
    unfinished.load(lambda topic: CONFIG)
    assert read_all(unfinished.get("t", 0)) == expected
    other = unfinished.get_or_create("u", 0, CONFIG)
    elsewhere = dirs[1] if log_dir_of(other) == dirs[0] else dirs[0]
    leftover = unfinished.create_future("u", 0, elsewhere)
    leftover_path = leftover.directory
    unfinished.close()
    os.makedirs(leftover_path)  # (close removed it; a stop would have left it)
    again = LogManager(dirs)
    again.load(lambda topic: CONFIG)
    assert sorted(key for key, _ in again.logs()) == [("t", 0), ("u", 0)]
    again.close()
    assert not os.path.exists(leftover_path)

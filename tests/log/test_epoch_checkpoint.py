"""The leader-epoch checkpoint written on the produce path: complete at once, fsync owed.

A partition's first append writes a new epoch; that write used to fsync the file and the
directory on the event loop. Now the file is replaced whole at once and the fsync happens
on the log's flusher thread, or at flush/close without one.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from pybroker.log.checkpoints import LEADER_EPOCH_FILE, read_checkpoint
from pybroker.log.leader_epoch_cache import LeaderEpochCache
from pybroker.log.log import Log
from tests.log.helpers import append, make_batch


def test_first_append_writes_epoch_and_flusher_syncs_it(tmp_path):
    flusher = ThreadPoolExecutor(1)
    log = Log(str(tmp_path / "t-0"), flusher=flusher)
    append(log, make_batch(), leader_epoch=0)
    append(log, make_batch(), leader_epoch=3)
    flusher.shutdown(wait=True)
    assert not log.leader_epoch_cache.dirty  # handed to the flusher thread
    assert read_checkpoint(str(tmp_path / "t-0" / LEADER_EPOCH_FILE), 2) == [["0", "0"],
                                                                               ["3", "3"]]
    log.close()
    assert LeaderEpochCache(str(tmp_path / "t-0")).entries() == [(0, 0), (3, 3)]


def test_without_flusher_flush_and_close_pay_the_fsync(tmp_path):
    log = Log(str(tmp_path / "t-0"))
    append(log, make_batch(), leader_epoch=2)
    assert log.leader_epoch_cache.dirty
    log.flush()
    assert not log.leader_epoch_cache.dirty
    append(log, make_batch(), leader_epoch=5)
    assert log.leader_epoch_cache.dirty
    log.close()
    assert not log.leader_epoch_cache.dirty
    reopened = Log(str(tmp_path / "t-0"))
    assert reopened.leader_epoch_cache.entries() == [(2, 0), (5, 3)]
    reopened.close()


def test_truncation_is_written_durably_at_once(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    cache.assign(1, 0)
    cache.assign(2, 10)
    assert cache.dirty
    cache.truncate_from_end(10)
    assert not cache.dirty and LeaderEpochCache(str(tmp_path)).entries() == [(1, 0)]


def test_epoch_at_an_offset(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    assert cache.epoch_at(0) == -1  # nothing known
    for epoch, start in ((1, 0), (4, 3), (6, 5)):
        cache.assign(epoch, start)
    assert [cache.epoch_at(o) for o in range(8)] == [1, 1, 1, 4, 4, 6, 6, 6]
    cache.truncate_from_start(4)  # the first epoch now starts at the log start
    assert cache.epoch_at(3) == -1 and cache.epoch_at(4) == 4

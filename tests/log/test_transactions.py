"""Transactions on a partition log: the last stable offset, and the aborted-transaction
index (``.txnindex``) across append, roll, restart, truncation, recovery and deletion."""

from __future__ import annotations

import os
import struct

from pybroker._native.records import CONTROL_ABORT, CONTROL_COMMIT
from pybroker.log import dump
from pybroker.log.log import Log
from pybroker.log.log_config import LogConfig
from pybroker.log.transaction_index import AbortedTxn
from tests.log.helpers import TransactionWriter as Writer
from tests.log.helpers import region_bytes


def _entries(path: str) -> list[tuple[int, ...]]:
    with open(path, "rb") as f:
        return list(struct.iter_unpack(">hqqqq", f.read()))


def test_the_last_stable_offset_stops_at_the_earliest_open_transaction(tmp_path):
    plog = Log(str(tmp_path / "t-0"))
    w = Writer(plog)
    w.data()
    first = w.data(7, transactional=True)
    assert plog.last_stable_offset == first
    second = w.data(8, transactional=True)
    w.data(7, transactional=True)  # the same transaction goes on
    w.data()
    assert plog.last_stable_offset == first
    w.marker(7, CONTROL_COMMIT)
    assert plog.last_stable_offset == second
    w.marker(8, CONTROL_COMMIT)
    assert plog.last_stable_offset == plog.high_watermark == plog.log_end_offset
    plog.high_watermark = first  # below the high watermark, it bounds
    assert plog.last_stable_offset == first
    assert plog.aborted_transactions(0, plog.log_end_offset) == []
    assert not os.path.exists(os.path.join(plog.directory, f"{0:020d}.txnindex"))
    plog.close()


def test_an_abort_is_indexed_in_kafkas_format_and_listed_to_overlapping_reads(tmp_path,
                                                                            capsys):
    plog = Log(str(tmp_path / "t-0"))
    w = Writer(plog)
    w.data()                                     # 0-1
    first = w.data(7, transactional=True)        # 2-3
    other = w.data(8, transactional=True)        # 4-5
    abort = w.marker(7, CONTROL_ABORT)           # 6
    assert plog.last_stable_offset == other
    txn = AbortedTxn(7, first, abort, other)     # the stable offset just after: 8's start
    index = os.path.join(plog.directory, f"{0:020d}.txnindex")
    assert _entries(index) == [(0, *txn)]
    assert dump.main([index]) == 0
    assert f"version: 0 producerId: 7 firstOffset: {first} lastOffset: {abort} " \
           f"lastStableOffset: {other}" in capsys.readouterr().out
    assert plog.aborted_transactions(0, plog.last_stable_offset) == [txn]
    assert plog.aborted_transactions(abort + 1, plog.log_end_offset) == []  # all before
    assert plog.aborted_transactions(0, first) == []                        # all after
    end = w.marker(8, CONTROL_COMMIT)
    assert plog.last_stable_offset == end + 1
    assert plog.aborted_transactions(3, end + 1) == [txn]
    plog.close()


def test_the_index_and_open_transactions_survive_roll_and_restart(tmp_path):
    directory = str(tmp_path / "t-0")
    plog = Log(directory)
    w = Writer(plog)
    first = w.data(7, transactional=True)
    open_first = w.data(9, transactional=True)   # still open at the restart
    plog.roll()
    abort = w.marker(7, CONTROL_ABORT)           # in the second segment
    second_base = plog.segments.active.base_offset
    plog.close()

    plog = Log(directory, high_watermark=10**9)
    assert plog.last_stable_offset == open_first
    txn = AbortedTxn(7, first, abort, open_first)
    assert plog.segments.first.txn_index.entries == []
    assert plog.segments.active.txn_index.entries == [txn]
    assert _entries(os.path.join(directory, f"{second_base:020d}.txnindex")) == [(0, *txn)]
    assert plog.aborted_transactions(0, plog.log_end_offset) == [txn]
    w = Writer(plog)
    w.sequences = {9: 2}
    w.marker(9, CONTROL_ABORT)
    assert plog.last_stable_offset == plog.log_end_offset
    assert [t.producer_id for t in plog.aborted_transactions(0, plog.log_end_offset)] == [7, 9]
    plog.close()


def _aborted_then_open(plog: Log) -> tuple[int, int, int]:
    """A plain batch, producer 7's aborted transaction, producer 8's open one: the first
    offset of 7's, its marker's, and the first offset of 8's."""
    w = Writer(plog)
    w.data()
    first = w.data(7, transactional=True)
    abort = w.marker(7, CONTROL_ABORT)
    return first, abort, w.data(8, transactional=True)


def test_truncation_cuts_the_index_and_reopens_the_transaction(tmp_path):
    plog = Log(str(tmp_path / "t-0"))
    first, abort, _ = _aborted_then_open(plog)
    assert plog.aborted_transactions(0, plog.log_end_offset) != []
    plog.truncate_to(abort)
    assert plog.aborted_transactions(0, plog.log_end_offset) == []
    assert _entries(os.path.join(plog.directory, f"{0:020d}.txnindex")) == []
    plog.high_watermark = plog.log_end_offset
    assert plog.last_stable_offset == first  # its marker is gone: open again
    plog.truncate_to(first)
    assert plog.last_stable_offset == plog.log_end_offset == first
    plog.close()


def test_recovery_rebuilds_the_index_from_the_log(tmp_path):
    """A crash that lost the index file and the snapshots: the replay after an unclean
    open files the abort again."""
    directory = str(tmp_path / "t-0")
    plog = Log(directory)
    first, abort, open_first = _aborted_then_open(plog)
    plog.flush()
    for name in os.listdir(directory):  # what an unsynced write would lose
        if name.endswith((".txnindex", ".snapshot")):
            os.unlink(os.path.join(directory, name))
    reopened = Log(directory, clean=False, recovery_point=0, high_watermark=10**9)
    assert reopened.aborted_transactions(0, reopened.log_end_offset) == [
        AbortedTxn(7, first, abort, abort + 1)]
    assert reopened.last_stable_offset == open_first
    reopened.close()


def test_the_index_goes_with_its_segment(tmp_path):
    plog = Log(str(tmp_path / "t-0"), LogConfig(file_delete_delay_ms=0))
    w = Writer(plog)
    w.data(7, transactional=True)
    w.marker(7, CONTROL_ABORT)
    plog.roll()
    w.data()
    index = os.path.join(plog.directory, f"{0:020d}.txnindex")
    assert os.path.exists(index)
    plog.delete_records_before(plog.segments.active.base_offset)
    assert not os.path.exists(index)
    assert plog.aborted_transactions(plog.log_start_offset, plog.log_end_offset) == []
    plog.close()


def test_a_follower_indexes_the_aborts_of_the_chunks_it_appends(tmp_path):
    leader = Log(str(tmp_path / "leader-0"))
    first, abort, open_first = _aborted_then_open(leader)
    chunk = region_bytes(leader.read(0, 1 << 20))
    follower = Log(str(tmp_path / "follower-0"))
    follower.append_as_follower(chunk)
    follower.high_watermark = follower.log_end_offset
    assert follower.aborted_transactions(0, follower.log_end_offset) == \
        leader.aborted_transactions(0, leader.log_end_offset) == \
        [AbortedTxn(7, first, abort, abort + 1)]
    assert follower.last_stable_offset == open_first
    leader.close()
    follower.close()

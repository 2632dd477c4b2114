"""ProducerStateTable on its own: Kafka's sequence and epoch rules, snapshots, expiry."""

from __future__ import annotations

import pytest

from pybroker.broker.producer_ids import ProducerIdManager
from pybroker.broker.producer_state import INT32_MAX, ProducerStateTable, last_sequence
from pybroker.errors import InvalidProducerEpochError, OutOfOrderSequenceError


def append(table: ProducerStateTable, pid: int, epoch: int, seq: int, n: int, offset: int,
           now: int = 1000) -> int:
    """Check then record like Partition.append; returns the offset the batch got."""
    duplicate = table.check(pid, epoch, seq, n - 1)
    if duplicate is not None:
        return duplicate.first_offset
    table.record(pid, epoch, seq, n - 1, offset, -1, now)
    return offset


def test_duplicates_of_the_last_five_batches_only():
    table = ProducerStateTable()
    for i in range(7):
        assert append(table, 1, 0, i * 2, 2, 100 + i * 2) == 100 + i * 2
    assert append(table, 1, 0, 4, 2, 999) == 104  # third of the last five
    with pytest.raises(OutOfOrderSequenceError):
        append(table, 1, 0, 0, 2, 999)  # too old to be remembered: not next in sequence
    with pytest.raises(OutOfOrderSequenceError):
        append(table, 1, 0, 4, 3, 999)  # same start, different end: not a retry


def test_unknown_producer_accepts_any_sequence_and_sequences_wrap():
    table = ProducerStateTable()
    assert append(table, 9, 3, INT32_MAX - 1, 2, 0) == 0
    assert last_sequence(INT32_MAX - 1, 1) == INT32_MAX
    assert append(table, 9, 3, 0, 1, 2) == 2  # wrapped past INT32_MAX to 0
    with pytest.raises(InvalidProducerEpochError):
        append(table, 9, 2, 1, 1, 3)
    with pytest.raises(OutOfOrderSequenceError):
        append(table, 9, 4, 5, 1, 3)  # a new epoch must start at 0
    assert append(table, 9, 4, 0, 1, 3) == 3


def test_snapshot_round_trip_and_expiry():
    table = ProducerStateTable()
    append(table, 1, 0, 0, 3, 10, now=5_000)
    append(table, 2, 0, 0, 1, 13, now=9_000)
    restored = ProducerStateTable.from_json(table.to_json())
    assert append(restored, 1, 0, 0, 3, 99) == 10
    assert restored.expire(before_ms=6_000) == 1
    assert set(restored.producers) == {2}


def test_producer_ids_are_never_reused(tmp_path):
    first = ProducerIdManager(str(tmp_path), block_size=10)
    ids = [first.new_id() for _ in range(3)]
    second = ProducerIdManager(str(tmp_path), block_size=10)  # a crash: block not used up
    assert second.new_id() > max(ids)
    pid, epoch = second.init_producer("txn")
    assert second.init_producer("txn") == (pid, epoch + 1)
    assert ProducerIdManager(str(tmp_path)).init_producer("txn") == (pid, epoch + 2)

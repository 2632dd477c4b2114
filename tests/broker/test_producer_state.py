"""ProducerStateTable on its own: Kafka's sequence and epoch rules, snapshots, expiry;
and a partition's snapshot against a log that was truncated under it."""

from __future__ import annotations

import pytest

from pybroker._native.records import encode_batch
from pybroker.broker.partition import Partition
from pybroker.broker.producer_ids import ProducerIdManager
from pybroker.broker.producer_state import INT32_MAX, ProducerStateTable, last_sequence
from pybroker.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from pybroker.log.log import Log


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


def _follower(directory: str) -> Partition:
    partition = Partition("t", 0, Log(directory), broker_id=2, is_leader=False)
    partition.restore_producers(None)
    return partition


def _batch(offset: int, seq: int, epoch: int, count: int = 2) -> bytes:
    return encode_batch([b"v%d" % (seq + i) for i in range(count)], base_offset=offset,
                        producer_id=7, producer_epoch=0, base_sequence=seq,
                        partition_leader_epoch=epoch)


def test_a_snapshot_past_a_truncation_is_not_trusted(tmp_path):
    """Producer 7 wrote seq 0-5 in epoch 1; this replica took 4-5 at offsets 4-5 and
    snapshotted there. A new leader (epoch 2) never had 4-5: the replica truncates to 4 and
    takes the leader's own seq 4-5, written at offsets 4-5 again, then crashes. Restarted,
    the snapshot's offset is still in the log but its epoch there is not: it describes
    batches that are gone, and the state comes from the log instead."""
    directory = str(tmp_path / "t-0")
    partition = _follower(directory)
    for offset in (0, 2, 4):
        partition.append_as_follower(_batch(offset, offset, epoch=1), 0, 0)
    snapshot = partition.producer_snapshot()
    assert snapshot is not None and snapshot["offset"] == 6 and snapshot["epoch"] == 1
    partition.truncate_to(4)
    partition.append_as_follower(_batch(4, 4, epoch=2, count=3), 0, 0)  # seq 4-6
    partition.log.close()

    restarted = _follower(directory)  # replays the log
    expected = restarted.producers.to_json()
    restarted.restore_producers(snapshot)
    assert restarted.producers.to_json() == expected
    [entry] = expected.values()
    assert entry["batches"][-1][:3] == [4, 6, 4]  # seq 4-6 at offset 4, as in the log
    restarted.log.close()


def test_a_snapshot_of_the_same_log_is_used(tmp_path):
    directory = str(tmp_path / "t-0")
    partition = _follower(directory)
    for offset in (0, 2):
        partition.append_as_follower(_batch(offset, offset, epoch=1), 0, 0)
    snapshot = partition.producer_snapshot()
    assert snapshot is not None
    partition.log.close()
    restarted = Partition("t", 0, Log(directory), broker_id=2, is_leader=False)
    # a snapshot taken is believed over the log (it is how state older than the replayed
    # tail survives): a marker entry proves which one was used
    snapshot["producers"]["99"] = {"epoch": 0, "last_ms": 0, "batches": []}
    restarted.restore_producers(snapshot)
    assert 99 in restarted.producers.producers and 7 in restarted.producers.producers
    restarted.log.close()

"""Idempotent-producer state as a state machine of the log: Kafka's sequence and epoch
rules, the snapshot file format, and the log's hooks (snapshots at roll and close, replay
from the last one after a crash, truncation, deletion of the head)."""

from __future__ import annotations

import logging
import os
import struct
import tempfile
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker._native.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    encode_batch,
    encode_control_batch,
    read_batch_header,
    validate_batch,
)
from pybroker.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from pybroker.log import dump
from pybroker.log.log import Log
from pybroker.log.log_config import LogConfig
from pybroker.log.producer_state import (
    INT32_MAX,
    BatchMetadata,
    CorruptSnapshotError,
    ProducerEntry,
    ProducerState,
    decode_snapshot,
    encode_snapshot,
    last_sequence,
)
from pybroker.log.state_machine import replay


def append(table: ProducerState, pid: int, epoch: int, seq: int, n: int, offset: int,
           now: int = 1000) -> int:
    """Check then record like Partition.append; returns the offset the batch got."""
    duplicate = table.check(pid, epoch, seq, n - 1)
    if duplicate is not None:
        return duplicate.first_offset
    table.record(pid, epoch, seq, n - 1, offset, -1, now)
    return offset


def test_duplicates_of_the_last_five_batches_only():
    table = ProducerState()
    for i in range(7):
        assert append(table, 1, 0, i * 2, 2, 100 + i * 2) == 100 + i * 2
    assert append(table, 1, 0, 4, 2, 999) == 104  # third of the last five
    with pytest.raises(OutOfOrderSequenceError):
        append(table, 1, 0, 0, 2, 999)  # too old to be remembered: not next in sequence
    with pytest.raises(OutOfOrderSequenceError):
        append(table, 1, 0, 4, 3, 999)  # same start, different end: not a retry


def test_unknown_producer_accepts_any_sequence_and_sequences_wrap():
    table = ProducerState()
    assert append(table, 9, 3, INT32_MAX - 1, 2, 0) == 0
    assert last_sequence(INT32_MAX - 1, 1) == INT32_MAX
    assert append(table, 9, 3, 0, 1, 2) == 2  # wrapped past INT32_MAX to 0
    with pytest.raises(InvalidProducerEpochError):
        append(table, 9, 2, 1, 1, 3)
    with pytest.raises(OutOfOrderSequenceError):
        append(table, 9, 4, 5, 1, 3)  # a new epoch must start at 0
    assert append(table, 9, 4, 0, 1, 3) == 3


# the snapshot format -------------------------------------------------------------------


def _producers() -> dict[int, ProducerEntry]:
    table = ProducerState()
    for i in range(7):  # more than the five cached batches
        append(table, 2**40 + 1, 3, i * 2, 2, 100 + i * 2, now=5_000 + i)
    append(table, 7, 0, INT32_MAX, 2, 200, now=9_000)  # a wrapped sequence
    table.producers[8] = ProducerEntry(1, 10, coordinator_epoch=4)  # no batch yet
    return table.producers


def test_snapshot_round_trip():
    producers = _producers()
    data = encode_snapshot(1234, producers)
    assert data[:4] == b"PBPS" and struct.unpack(">h", data[4:6]) == (3,)
    restored = decode_snapshot(data, 1234)
    assert restored == producers
    assert list(restored[2**40 + 1].batches)[0] == BatchMetadata(4, 5, 104, 105, -1)
    assert decode_snapshot(encode_snapshot(0, {}), 0) == {}


def test_a_version_1_snapshot_reads_with_no_open_transaction():
    """What brokers before transactions wrote: producers without the transaction field."""
    from pybroker._native.crc32c import crc32c
    body = struct.pack(">qi", 50, 1) + struct.pack(">qhqB", 9, 2, 7_000, 1) + \
        struct.pack(">iiqqq", 0, 1, 48, 49, -1)
    data = b"PBPS" + struct.pack(">hI", 1, crc32c(body)) + body
    entry = decode_snapshot(data, 50)[9]
    assert (entry.epoch, entry.last_ms, entry.txn_first_offset) == (2, 7_000, -1)
    assert list(entry.batches) == [BatchMetadata(0, 1, 48, 49, -1)]


def test_a_version_2_snapshot_reads_with_no_coordinator_epoch():
    """What brokers before DescribeProducers wrote: the transaction, no coordinator epoch."""
    from pybroker._native.crc32c import crc32c
    body = struct.pack(">qi", 50, 1) + struct.pack(">qhqqB", 9, 2, 7_000, 48, 1) + \
        struct.pack(">iiqqq", 0, 1, 48, 49, -1)
    data = b"PBPS" + struct.pack(">hI", 2, crc32c(body)) + body
    entry = decode_snapshot(data, 50)[9]
    assert (entry.epoch, entry.txn_first_offset, entry.coordinator_epoch) == (2, 48, -1)
    assert list(entry.batches) == [BatchMetadata(0, 1, 48, 49, -1)]


def test_a_markers_coordinator_epoch_is_its_producers(tmp_path):
    state = ProducerState(str(tmp_path))
    state.apply(validate_batch(encode_batch([b"a"], producer_id=4, producer_epoch=0,
                                            base_sequence=0, transactional=True)), 30, -1, 0)
    state.apply(read_batch_header(encode_control_batch(4, 0, CONTROL_COMMIT, 7)), 31, -1, 0)
    assert state.producers[4].coordinator_epoch == 7
    state.apply(validate_batch(encode_batch([b"b"], producer_id=4, producer_epoch=1,
                                            base_sequence=0)), 32, -1, 0)
    assert state.producers[4].coordinator_epoch == 7  # an epoch bump keeps it
    state.take_snapshot(33)
    assert state.load_snapshot(0, 33, 0) == 33
    assert state.producers[4].coordinator_epoch == 7


def _apply(state: ProducerState, data: bytes, offset: int) -> None:
    """Check and apply a batch as ``Partition.append`` does for a coordinator's batch."""
    info = read_batch_header(data)
    if info.is_control:
        state.check_marker(info.producer_id, info.producer_epoch, info.coordinator_epoch)
    else:
        state.check_epoch(info.producer_id, info.producer_epoch)
    state.apply(info, offset, -1, 1_000)


def test_markers_are_fenced_by_producer_and_coordinator_epoch():
    """Kafka's marker checks: an older producer epoch is INVALID_PRODUCER_EPOCH, an
    older coordinator epoch TRANSACTION_COORDINATOR_FENCED; a marker of a newer epoch
    moves the producer to it, so its next batch starts again at sequence 0."""
    state = ProducerState()
    assert append(state, 5, 1, 0, 2, 10) == 10
    state.begin_transaction(5, 1, 10)
    _apply(state, encode_control_batch(5, 1, CONTROL_COMMIT, 3), 12)
    assert state.first_unstable_offset() is None
    with pytest.raises(TransactionCoordinatorFencedError):
        _apply(state, encode_control_batch(5, 1, CONTROL_COMMIT, 2), 13)
    _apply(state, encode_control_batch(5, 2, CONTROL_ABORT, 3), 13)  # epoch bumped
    assert state.producers[5].epoch == 2 and not state.producers[5].batches
    with pytest.raises(InvalidProducerEpochError):
        _apply(state, encode_control_batch(5, 1, CONTROL_ABORT, 4), 14)
    with pytest.raises(InvalidProducerEpochError):  # a coordinator's data batch too
        _apply(state, encode_batch([b"o"], producer_id=5, producer_epoch=1,
                                   transactional=True), 14)
    with pytest.raises(OutOfOrderSequenceError):
        append(state, 5, 2, 2, 1, 14)
    assert append(state, 5, 2, 0, 1, 14) == 14
    assert state.producers[5].coordinator_epoch == 3  # kept across epochs
    _apply(state, encode_control_batch(6, 0, CONTROL_COMMIT, 4), 15)  # an unknown producer
    assert state.producers[6].coordinator_epoch == 4
    with pytest.raises(TransactionCoordinatorFencedError):
        _apply(state, encode_control_batch(6, 0, CONTROL_COMMIT, 3), 16)


def test_a_coordinators_transactional_batch_opens_the_producers_transaction():
    """A transactional offset commit carries no sequence: it opens the transaction all
    the same, and its marker closes it."""
    state = ProducerState()
    _apply(state, encode_batch([b"o"], [b"k"], producer_id=8, producer_epoch=4,
                               transactional=True), 20)
    assert state.first_unstable_offset() == 20 and state.producers[8].epoch == 4
    _apply(state, encode_control_batch(8, 4, CONTROL_COMMIT, 0), 21)
    assert state.first_unstable_offset() is None


def test_an_open_transaction_round_trips_through_a_snapshot(tmp_path):
    state = ProducerState(str(tmp_path))
    state.apply(validate_batch(encode_batch([b"a"], producer_id=4, producer_epoch=0,
                                            base_sequence=0, transactional=True)), 30, -1, 0)
    assert state.first_unstable_offset() == 30
    state.take_snapshot(31)
    state.ongoing = {}
    assert state.load_snapshot(0, 31, 0) == 31
    assert state.ongoing == {4: 30} and state.producers[4].txn_first_offset == 30
    assert state.expire(10**12) == 0  # a producer in a transaction is not expired


def test_a_marker_under_a_bumped_epoch_fences_the_older_one():
    """A coordinator fencing a producer aborts its transaction under the next epoch: the
    fenced instance's next batch is refused on every partition that got the marker."""
    from pybroker._native.records import CONTROL_ABORT, encode_control_batch, read_batch_header

    state = ProducerState()
    state.apply(validate_batch(encode_batch([b"a"], producer_id=4, producer_epoch=0,
                                            base_sequence=0, transactional=True)), 30, -1, 0)
    state.apply(read_batch_header(encode_control_batch(4, 1, CONTROL_ABORT, 0)), 31, -1, 5)
    assert state.first_unstable_offset() is None
    assert state.producers[4].epoch == 1 and state.producers[4].last_ms == 5
    with pytest.raises(InvalidProducerEpochError):
        state.check(4, 0, 1, 0)
    assert state.check(4, 1, 0, 0) is None  # the new instance starts at sequence 0


@pytest.mark.parametrize("damage", ["flip", "truncate", "extend", "offset", "version"])
def test_snapshot_check_refuses_a_damaged_file(damage):
    data = bytearray(encode_snapshot(1234, _producers()))
    named = 1234
    if damage == "flip":
        data[-3] ^= 0x10
    elif damage == "truncate":
        del data[-5:]
    elif damage == "extend":
        data += b"\0"
    elif damage == "offset":
        named = 1235  # a file renamed: it describes another offset
    else:
        data[5] = 9
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(data), named)


def test_a_torn_snapshot_is_deleted_and_the_previous_one_used(tmp_path):
    state = ProducerState(str(tmp_path))
    append(state, 1, 0, 0, 2, 0)
    state.take_snapshot(2)
    append(state, 1, 0, 2, 2, 2)
    path = state.take_snapshot(4)
    assert path is not None
    with open(path, "r+b") as f:
        f.truncate(30)  # what a crash can leave of a file not yet fsynced
    reloaded = ProducerState(str(tmp_path))
    assert reloaded.load_snapshot(0, 10, now_ms=2_000) == 2
    assert [b.first_seq for b in reloaded.producers[1].batches] == [0]
    assert sorted(os.listdir(tmp_path)) == [f"{2:020d}.snapshot"]


def test_loading_forgets_expired_producers(tmp_path):
    state = ProducerState(str(tmp_path), expiration_ms=1_000)
    append(state, 1, 0, 0, 1, 0, now=5_000)
    append(state, 2, 0, 0, 1, 1, now=9_000)
    state.take_snapshot(2)
    assert state.load_snapshot(0, 2, now_ms=9_500) == 2
    assert set(state.producers) == {2}


# the log's hooks -----------------------------------------------------------------------


def idempotent(seq: int, count: int = 2, pid: int = 7, epoch: int = 0,
               value_size: int = 10) -> bytearray:
    return bytearray(encode_batch([b"%d" % (seq + i) + b"x" * value_size
                                   for i in range(count)],
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq))


def stopped_clock() -> float:
    """A broker clock that never moves: replays and appends read the same time."""
    return 1_800_000_000.0


def log_append(plog: Log, batch: bytearray) -> int:
    return plog.append(batch, validate_batch(batch)).base_offset


def snapshots(directory) -> list[int]:
    return sorted(int(n.split(".")[0]) for n in os.listdir(directory)
                  if n.endswith(".snapshot"))


def small_segments() -> LogConfig:
    return LogConfig.from_properties({"segment.bytes": "1024", "file.delete.delay.ms": "0"})


def test_snapshots_at_roll_and_close_and_no_replay_after_a_clean_close(tmp_path, caplog):
    directory = tmp_path / "t-0"
    plog = Log(str(directory), small_segments())
    for seq in range(0, 60, 2):
        log_append(plog, idempotent(seq, value_size=40))
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) > 3
    assert snapshots(directory) == bases[1:]  # one at each roll, at the new segment's base
    end = plog.log_end_offset
    plog.flush()
    plog.close()
    assert snapshots(directory)[-1] == end
    caplog.clear()
    caplog.set_level(logging.INFO, "pybroker.log")
    reopened = Log(str(directory), small_segments(), clean=True)
    assert "replayed" not in caplog.text
    entry = reopened.producer_state.producers[7]
    assert [b.first_seq for b in entry.batches] == [50, 52, 54, 56, 58]
    reopened.close()


def test_a_crash_replays_only_from_the_last_snapshot(tmp_path, caplog):
    """Producer 5 wrote once, long before the crash; only snapshots can remember it."""
    directory = tmp_path / "t-0"
    plog = Log(str(directory), small_segments(), clock=stopped_clock)
    log_append(plog, idempotent(0, pid=5))
    for seq in range(0, 80, 2):
        log_append(plog, idempotent(seq, value_size=40))
    last_roll = plog.segments.active.base_offset
    end = plog.log_end_offset
    caplog.clear()
    caplog.set_level(logging.INFO, "pybroker.log")
    crashed = Log(str(directory), small_segments(), clean=False, clock=stopped_clock)  # a crash
    assert crashed.log_end_offset == end
    assert f"replayed {(end - last_roll) // 2} batches from offset {last_roll}" in caplog.text
    assert crashed.producer_state.producers == plog.producer_state.producers
    assert crashed.producer_state.check(5, 0, 0, 1) == BatchMetadata(0, 1, 0, 1, -1)
    crashed.close()


def test_truncation_removes_snapshots_above_and_rebuilds_the_state(tmp_path):
    directory = tmp_path / "t-0"
    plog = Log(str(directory), small_segments())
    for seq in range(0, 60, 2):
        log_append(plog, idempotent(seq, value_size=40))
    taken = snapshots(directory)
    cut = taken[1] + 3  # inside the segment after the second snapshot
    plog.truncate_to(cut)
    end = plog.log_end_offset
    assert end == cut - 1  # whole batches: the one holding the cut goes
    assert snapshots(directory) == [s for s in taken if s <= end]
    batches = plog.producer_state.producers[7].batches
    assert batches[-1].last_offset == end - 1 and batches[-1].last_seq == end - 1
    # a retry of a batch that was cut off is in sequence again, not a duplicate
    assert plog.producer_state.check(7, 0, end, 1) is None
    plog.truncate_fully_and_start_at(500)
    assert snapshots(directory) == [] and plog.producer_state.producers == {}
    plog.close()


def test_snapshots_go_with_the_segments_deleted_from_the_head(tmp_path):
    directory = tmp_path / "t-0"
    plog = Log(str(directory), small_segments())
    log_append(plog, idempotent(0, pid=5))
    for seq in range(0, 60, 2):
        log_append(plog, idempotent(seq, value_size=40))
    plog.high_watermark = plog.log_end_offset
    third = plog.segments[2].base_offset
    plog.delete_records_before(third + 1)
    assert plog.segments.first.base_offset == third
    assert snapshots(directory)[0] == third
    assert 5 in plog.producer_state.producers  # Kafka keeps producers past retention
    plog.close()
    crashed = Log(str(directory), small_segments(), clean=False,
                  log_start_offset=third + 1)
    assert 5 in crashed.producer_state.producers  # from the snapshot, not the log
    crashed.close()


def _batch(offset: int, seq: int, epoch: int, count: int = 2) -> bytes:
    return encode_batch([b"v%d" % (seq + i) for i in range(count)], base_offset=offset,
                        producer_id=7, producer_epoch=0, base_sequence=seq,
                        partition_leader_epoch=epoch)


def test_a_follower_that_truncated_and_crashed_comes_back_with_the_new_batches(tmp_path):
    """Producer 7 wrote seq 0-5 in epoch 1; this replica took 4-5 at offsets 4-5 and
    closed cleanly (a snapshot at 6). A new leader (epoch 2) never had 4-5: the replica
    truncates to 4 (the snapshot at 6 goes) and takes the leader's own seq 4-6 at offset
    4, then crashes. Restarted, the state is that of the log, not of the lost snapshot."""
    directory = str(tmp_path / "t-0")
    plog = Log(directory)
    for offset in (0, 2, 4):
        plog.append_as_follower(_batch(offset, offset, epoch=1))
    plog.close()
    assert snapshots(directory) == [6]
    plog = Log(directory, clean=True)
    plog.truncate_to(4)
    assert snapshots(directory) == []
    plog.append_as_follower(_batch(4, 4, epoch=2, count=3))  # seq 4-6
    restarted = Log(directory, clean=False)
    [entry] = restarted.producer_state.producers.values()
    assert entry.batches[-1] == BatchMetadata(4, 6, 4, 6, -1)
    restarted.close()


def test_a_log_that_grew_snapshots_between_rolls_and_keeps_one_such_snapshot(tmp_path,
                                                                             caplog):
    directory = tmp_path / "t-0"
    # the broker's clock is an hour ahead of the producer's (the batches' CreateTime)
    clock = [time.time() + 3600]
    plog = Log(str(directory), clock=lambda: clock[0])  # 1 GiB segments: no roll here
    for seq in range(0, 20, 2):
        log_append(plog, idempotent(seq))
    assert not plog.snapshot_state_if_behind(max_bytes=1 << 20)  # not that far behind
    assert plog.snapshot_state_if_behind(max_bytes=0)
    assert snapshots(directory) == [20]
    for seq in range(20, 30, 2):
        log_append(plog, idempotent(seq))
    assert plog.snapshot_state_if_behind(max_bytes=0)
    assert snapshots(directory) == [30]  # the one at 20 was replaced
    log_append(plog, idempotent(30))
    caplog.set_level(logging.INFO, "pybroker.log")
    appended_ms = int(clock[0] * 1000)
    clock[0] += 5
    crashed = Log(str(directory), clean=False, clock=lambda: clock[0])
    assert "replayed 1 batches from offset 30" in caplog.text
    assert {pid: (e.epoch, list(e.batches)) for pid, e in crashed.producer_state.producers.items()} \
        == {pid: (e.epoch, list(e.batches)) for pid, e in plog.producer_state.producers.items()}
    # the replayed batch's last_ms is the replay's clock, never earlier than the append's
    # (not the batch's own timestamp: the producer's clock)
    assert [e.last_ms for e in plog.producer_state.producers.values()] == [appended_ms]
    assert [e.last_ms for e in crashed.producer_state.producers.values()] == \
        [int(clock[0] * 1000)]
    crashed.roll()
    assert snapshots(directory) == [32]  # a roll replaces it too
    crashed.close()


# model test: whatever happens, the state is the state of the batches in the log -------

OPS = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 3), st.integers(1, 3), st.booleans()),
    st.tuples(st.just("roll")),
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("snapshot_if_behind")),
    st.tuples(st.just("reopen"), st.booleans()),
), min_size=1, max_size=40)


def _projection(state: ProducerState) -> dict[int, tuple[int, list[BatchMetadata]]]:
    """What decides idempotence (epoch and cached batches), not the expiry clock."""
    return {pid: (e.epoch, list(e.batches)) for pid, e in state.producers.items()}


def _from_scratch(plog: Log) -> dict[int, tuple[int, list[BatchMetadata]]]:
    state = ProducerState()  # through the Python header walk, not the native one
    replay(state, (info for info, _ in plog.batches(plog.segments.first.base_offset)), 0)
    return _projection(state)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_producer_state_is_always_that_of_the_log(ops):
    """Appends, rolls, truncations, snapshots between rolls and reopens, clean or after a
    crash: the producer state equals a replay of the whole log from scratch (nothing is
    deleted from the head here, so the log holds every batch that made the state)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m-0")
        config = LogConfig.from_properties({"segment.bytes": "600", "file.delete.delay.ms": "0"})
        plog = Log(path, config)
        try:
            for op in ops:
                if op[0] == "append":
                    _, pid, count, bump = op
                    entry = plog.producer_state.producers.get(pid)
                    epoch = 0 if entry is None else entry.epoch + bump
                    seq = 0 if entry is None or bump else entry.last_seq + 1
                    log_append(plog, idempotent(seq, count, pid=pid, epoch=epoch))
                elif op[0] == "roll":
                    plog.roll()
                elif op[0] == "truncate":
                    plog.truncate_to(int(plog.log_end_offset * op[1]))
                elif op[0] == "snapshot_if_behind":
                    plog.snapshot_state_if_behind(0)
                else:
                    if op[1]:
                        plog.close()
                        plog = Log(path, config, clean=True)
                    else:  # a crash: the open log is dropped, not closed
                        crashed, plog = plog, Log(path, config, clean=False)
                        crashed.discard()
                assert _projection(plog.producer_state) == _from_scratch(plog)
        finally:
            plog.close()


def test_the_dump_tool_prints_a_snapshot_and_refuses_a_torn_one(tmp_path, capsys):
    state = ProducerState(str(tmp_path))
    append(state, 7, 2, 0, 3, 40)
    path = state.take_snapshot(43)
    assert path is not None
    assert dump.main([path]) == 0
    out = capsys.readouterr().out
    assert "producer state below offset 43" in out
    assert "producerId: 7 producerEpoch: 2 coordinatorEpoch: -1 lastAppendMs: 1000 " \
           "currentTxnFirstOffset: -1 " \
           "batches: [seq 0-2 offsets 40-42 timestamp -1]" in out and "OK: 1 producers" in out
    with open(path, "r+b") as f:
        f.truncate(20)
    assert dump.main([path]) == 1
    assert "CORRUPT" in capsys.readouterr().out

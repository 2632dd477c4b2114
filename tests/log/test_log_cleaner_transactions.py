"""The log cleaner on logs with transactions (Kafka's rules, KIP-98): aborted records go
and never shadow committed ones, markers stay while their transaction has a batch and go
after their delete horizon, the cleaned segment's ``.txnindex`` keeps the aborts still in
it (across a restart and a crash in the swap), and nothing past the last stable offset
is cleaned."""

from __future__ import annotations

import os
import time

from pybroker._native.records import CONTROL_ABORT, CONTROL_COMMIT, decode_records
from pybroker.log.log import CLEANED_SUFFIX, SWAP_SUFFIX
from pybroker.log.log_cleaner import CleanerConfig, LogCleaner
from pybroker.log.log_config import LogConfig
from pybroker.log.log_manager import LogManager
from pybroker.log.log_segment import LOG_SUFFIX, TXN_INDEX_SUFFIX, file_name
from pybroker.log.producer_state import ProducerState
from pybroker.log.state_machine import replay
from pybroker.log.transaction_index import AbortedTxn, write_index
from tests.log.helpers import TransactionWriter as Writer

CONFIG = LogConfig.from_properties({"cleanup.policy": "compact", "segment.bytes": 1024,
                                    "file.delete.delay.ms": 0, "delete.retention.ms": 100,
                                    "min.cleanable.dirty.ratio": 0.01})


def fill(w: Writer, n: int, tag: bytes = b"f") -> None:
    """Plain updates of five keys: enough of them roll segments and make the log dirty."""
    for i in range(n):
        w.data(keys=[b"f%d" % (i % 5)], values=[tag + b"%d" % i])


def batches(plog) -> list[tuple[int, bool, int, list[tuple[int, bytes | None, bytes | None]]]]:
    """(base offset, is control, producer id, records (offset, key, value)) per batch."""
    return [(info.base_offset, info.is_control, info.producer_id,
             [(r.offset, r.key, r.value) for r in decode_records(bytes(data))])
            for info, data in plog.batches(plog.log_start_offset)]


def data_records(plog) -> list[tuple[int, bytes | None, bytes | None]]:
    return [r for _, control, _, records in batches(plog) if not control for r in records]


def markers(plog) -> list[int]:
    return [base for base, control, _, _ in batches(plog) if control]


def cleaner_at(manager, clock: list[float], **kwargs) -> LogCleaner:
    return LogCleaner(manager, CleanerConfig(dedupe_buffer_size=1 << 20),
                      clock=lambda: clock[0], **kwargs)


def test_aborted_records_go_and_markers_go_once_their_transaction_is_empty(tmp_path):
    manager = LogManager(str(tmp_path))
    plog = manager.get_or_create("t", 0, CONFIG)
    w = Writer(plog)
    committed = w.data(7, transactional=True, keys=[b"a", b"b"], values=[b"a1", b"b1"])
    commit = w.marker(7, CONTROL_COMMIT)
    aborted = w.data(8, transactional=True, keys=[b"a", b"c"], values=[b"a2", b"c2"])
    abort = w.marker(8, CONTROL_ABORT)
    fill(w, 60)
    entry = AbortedTxn(8, aborted, abort, abort + 1)
    assert plog.aborted_transactions(0, plog.log_end_offset) == [entry]
    clock = [time.time()]
    cleaner = cleaner_at(manager, clock)
    assert cleaner.clean_once()
    kept = data_records(plog)
    # the aborted "a" is not the latest "a": the committed one stays, "c" is gone
    assert (committed, b"a", b"a1") in kept and (committed + 1, b"b", b"b1") in kept
    assert not [r for r in kept if r[1] in (b"a", b"c") and r[0] != committed]
    # the abort marker is kept until its horizon, with its index entry; the commit marker
    # stays while its data does
    assert markers(plog) == [commit, abort]
    assert plog.aborted_transactions(0, plog.log_end_offset) == [entry]

    fill(w, 20, b"g")
    clock[0] += 1.0  # past the abort marker's delete horizon
    assert cleaner.clean_once()
    assert markers(plog) == [commit]
    assert plog.aborted_transactions(0, plog.log_end_offset) == []
    assert not [n for n in os.listdir(plog.directory) if n.endswith(TXN_INDEX_SUFFIX)]
    assert (committed, b"a", b"a1") in data_records(plog)

    w.data(keys=[b"a", b"b"], values=[b"a3", b"b3"])  # the committed records are obsolete
    fill(w, 20, b"h")
    assert cleaner.clean_once()
    assert markers(plog) == [commit]  # empty now: given its horizon
    assert not [r for r in data_records(plog) if r[0] in (committed, committed + 1)]
    fill(w, 20, b"i")
    clock[0] += 1.0
    assert cleaner.clean_once()
    assert markers(plog) == []
    manager.close()


def test_an_aborted_batch_kept_for_its_producer_keeps_its_marker_and_entry(tmp_path):
    """The aborted batch holds producer 8's last sequence: it stays as an empty header,
    so its marker and index entry stay too, and a replay of the log from its start finds
    the transaction closed."""
    manager = LogManager(str(tmp_path))
    plog = manager.get_or_create("t", 0, CONFIG)
    w = Writer(plog)
    w.data(keys=[b"a"], values=[b"a0"])
    aborted = w.data(8, transactional=True, keys=[b"a", b"c"], values=[b"a2", b"c2"])
    abort = w.marker(8, CONTROL_ABORT)
    fill(w, 60)
    clock = [time.time()]
    cleaner = cleaner_at(manager, clock, producers=lambda topic, partition: {8: aborted + 1})
    for _ in range(2):
        assert cleaner.clean_once()
        fill(w, 20, b"g")
        clock[0] += 1.0
    found = batches(plog)
    assert (aborted, False, 8, []) in found
    assert (0, b"a", b"a0") in data_records(plog)
    assert markers(plog) == [abort]
    entry = AbortedTxn(8, aborted, abort, abort + 1)
    assert plog.aborted_transactions(0, plog.log_end_offset) == [entry]
    replayed = ProducerState()  # what a replay from the log start rebuilds
    replay(replayed, plog.producer_batches(0), 0)
    assert replayed.first_unstable_offset() is None  # no transaction left open
    assert replayed.producers[8].last_seq == 1
    manager.close()


def test_nothing_past_the_last_stable_offset_is_cleaned(tmp_path):
    manager = LogManager(str(tmp_path))
    plog = manager.get_or_create("t", 0, CONFIG)
    w = Writer(plog)
    fill(w, 30)
    open_txn = w.data(9, transactional=True, keys=[b"f1"], values=[b"open"])
    fill(w, 30, b"g")
    holder = plog.segments.floor(open_txn).base_offset
    assert plog.last_stable_offset == open_txn and holder > 0
    clock = [time.time()]
    cleaner = cleaner_at(manager, clock)
    assert cleaner.clean_once()
    assert cleaner.checkpoint("t", 0) <= holder
    after = [r for r in data_records(plog) if r[0] >= holder]
    assert len(after) == plog.log_end_offset - holder  # every record there is still there
    assert (open_txn, b"f1", b"open") in after

    w.marker(9, CONTROL_COMMIT)
    fill(w, 20, b"h")
    assert cleaner.clean_once()
    assert cleaner.checkpoint("t", 0) == plog.segments.active.base_offset
    assert (open_txn, b"f1", b"open") not in data_records(plog)  # f1 was updated since
    manager.close()


def test_the_cleaned_txnindex_survives_a_restart_and_a_crash_in_the_swap(tmp_path):
    for txn_index_renamed in (False, True):
        directory = tmp_path / str(txn_index_renamed)
        manager = LogManager(str(directory))
        plog = manager.get_or_create("t", 0, CONFIG)
        w = Writer(plog)
        entries = []
        while len(plog.segments) < 3:
            first = w.data(8, transactional=True, keys=[b"a"], values=[b"x"])
            entries.append(AbortedTxn(8, first, w.marker(8, CONTROL_ABORT), 0))
            fill(w, 4)
        first, second = list(plog.segments)[:2]
        expected = plog.aborted_transactions(0, plog.log_end_offset)
        assert [e[:3] for e in expected] == [e[:3] for e in entries]
        manager.close()
        # the crash came after the merged segment was renamed .swap
        part = directory / "t-0"
        with open(part / file_name(0, LOG_SUFFIX + SWAP_SUFFIX), "wb") as f:
            for segment in (first, second):
                f.write((part / file_name(segment.base_offset, LOG_SUFFIX)).read_bytes())
        merged = [e for e in expected if e.last_offset < plog.segments[2].base_offset]
        new_index = part / file_name(0, TXN_INDEX_SUFFIX + CLEANED_SUFFIX)
        write_index(str(new_index), merged)
        if txn_index_renamed:  # the old segments were retired, the new index renamed
            for segment in (first, second):
                for suffix in (".log", ".index", ".timeindex", TXN_INDEX_SUFFIX):
                    path = part / file_name(segment.base_offset, suffix)
                    if path.exists():
                        os.rename(path, str(path) + ".deleted")
            os.rename(new_index, part / file_name(0, TXN_INDEX_SUFFIX))
        os.unlink(directory / ".kafka_cleanshutdown")
        manager = LogManager(str(directory))
        manager.load(lambda topic: CONFIG)
        plog = manager.get("t", 0)
        assert second.base_offset not in [s.base_offset for s in plog.segments]
        assert plog.aborted_transactions(0, plog.log_end_offset) == expected
        assert plog.segments[0].txn_index.entries == merged
        assert not [n for n in os.listdir(part) if n.endswith((SWAP_SUFFIX, CLEANED_SUFFIX))]
        manager.close()

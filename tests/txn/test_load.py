"""A ``__transaction_state`` partition's transactions rebuilt from its log: the last
record of each transactional id, tombstones, records that do not read."""

from __future__ import annotations

import asyncio

from pybroker._native.records import encode_batch
from pybroker.log.log import Log
from pybroker.txn.load import load_transactions, transactions_of
from pybroker.txn.records import txn_key, txn_value
from pybroker.txn.state import TxnMetadata, TxnState

A0 = TxnMetadata.new("a", 1, 0, 60000, 1000)
A1 = A0.add_partitions([("t", 0), ("t", 1)], 2000)
A2 = A1.prepare_end(commit=True, now_ms=3000)
B0 = TxnMetadata.new("b", 2, 5, 30000, 1100)
B1 = B0.add_partitions([("u", 3)], 2100)
C0 = TxnMetadata.new("c", 3, 0, 60000, 1200)


def _history() -> list[list[tuple[bytes, bytes | None]]]:
    """Batches of (key, value) records as a coordinator would have written them."""
    return [
        [(txn_key("a"), txn_value(A0)), (txn_key("b"), txn_value(B0))],
        [(txn_key("c"), txn_value(C0))],
        [(txn_key("a"), txn_value(A1)), (txn_key("b"), txn_value(B1, version=1))],
        [(txn_key("c"), None)],  # c expired: its tombstone
        [(txn_key("a"), txn_value(A2))],
        [(b"\x00\x05junk", b"\x00\x00")],  # a record type pybroker does not know
        [(txn_key("d"), b"\x00\x00\x01")],  # a value that does not read: skipped
    ]


def test_the_last_record_of_each_id_is_its_state():
    latest: dict[bytes, bytes | None] = {}
    for batch in _history():
        latest.update(batch)
    assert transactions_of(latest) == {"a": A2, "b": B1}
    assert transactions_of(latest)["a"].state == TxnState.PREPARE_COMMIT


def _write(directory: str) -> Log:
    plog = Log(directory)
    offset = 0
    for batch in _history():
        plog.append_as_follower(encode_batch([v for _, v in batch], [k for k, _ in batch],
                                             [1000] * len(batch), base_offset=offset))
        offset += len(batch)
    return plog


def test_a_partition_log_loads_to_the_latest_state(tmp_path):
    plog = _write(str(tmp_path / "__transaction_state-0"))
    try:
        loaded = asyncio.run(load_transactions(plog, lambda: True, slice_s=0.0))
        assert loaded == {"a": A2, "b": B1}
        # a broker that stops leading the partition stops loading it
        assert asyncio.run(load_transactions(plog, lambda: False, slice_s=0.0)) is None
    finally:
        plog.close()

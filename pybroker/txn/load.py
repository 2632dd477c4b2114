"""The transactions of a ``__transaction_state`` partition, rebuilt from its log when this
broker becomes its leader (Kafka's ``TransactionStateManager.loadTransactionMetadata``).

As for the groups of ``__consumer_offsets`` (pybroker/coordinator/offsets_partitions.py),
the log is replayed up to its end of the moment the load starts, through the log's
``replay_in_slices`` (pybroker/log/state_machine.py), so a large partition never holds the
event loop; only the last value of each key matters (the cleaner may have removed the
older ones), so the raw bytes of the last one are kept per key, and only those are parsed.
A tombstone removes its transactional id; a record that does not read is logged and
skipped, as is a key of a record type pybroker does not know.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from pybroker.coordinator.internal_topic import data_records, latest_values
from pybroker.errors import KafkaError
from pybroker.log.state_machine import REPLAY_SLICE_S, replay_in_slices
from pybroker.txn.records import TRANSACTION_STATE_TOPIC, parse_txn_key, parse_txn_value
from pybroker.txn.state import TxnMetadata

if TYPE_CHECKING:
    from pybroker._native.records import BatchInfo
    from pybroker.log.log import Log

log = logging.getLogger("pybroker.txn")


def transactions_of(latest: Mapping[bytes, bytes | None]) -> dict[str, TxnMetadata]:
    """The transactions described by the last value of each key (tombstones: none)."""
    transactions: dict[str, TxnMetadata] = {}
    for raw_key, raw_value in latest.items():
        try:
            transactional_id = parse_txn_key(raw_key)
            if transactional_id is None:
                continue
            if raw_value is None:
                transactions.pop(transactional_id, None)
            else:
                transactions[transactional_id] = parse_txn_value(transactional_id, raw_value)
        except (KafkaError, UnicodeDecodeError) as exc:
            log.warning("%s: skipping unreadable record: %s", TRANSACTION_STATE_TOPIC, exc)
    return transactions


async def load_transactions(partition_log: Log, still_wanted: Callable[[], bool],
                            slice_s: float = REPLAY_SLICE_S) -> dict[str, TxnMetadata] | None:
    """The transactions of a partition's log, from its start to its end of now; None when
    ``still_wanted()`` said to stop (this broker no longer leads the partition)."""
    latest: dict[bytes, bytes | None] = {}
    start = partition_log.log_start_offset

    def consume(info: BatchInfo, data: memoryview) -> None:
        batch = data_records(info, data, start)
        if batch is not None:
            latest_values(latest, batch)

    if await replay_in_slices(partition_log, start, consume, still_wanted, slice_s) is None:
        return None
    return transactions_of(latest)

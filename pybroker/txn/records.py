"""The records of the internal compacted topic ``__transaction_state``, in Kafka's layout
(apache/kafka transaction-coordinator ``TransactionLogKey``/``TransactionLogValue``,
generated into ``messages.DATA``), so a dump of the topic reads like Kafka's::

    key   = record type int16 (0), transactional_id string
    value = version int16, then
      v0  producer_id int64, producer_epoch int16, transaction_timeout_ms int32,
          transaction_status int8, transaction_partitions [topic string,
          partition_ids [int32]] (null when Empty), last_update_timestamp_ms int64,
          start_timestamp_ms int64
      v1  the same, flexible (compact strings and arrays), with the tagged fields
          previous_producer_id (0), next_producer_id (1), client_transaction_version (2)
    a null value is a tombstone: the transactional id expired

One record per transactional id and change of its state: the last one of a key is the
transaction's state (``TxnMetadata``), and the log cleaner keeps only that one. A
transactional id lives in partition ``abs(java_hash(id)) % transaction.state.log.num.partitions``
(Kafka's ``Utils.abs(transactionalId.hashCode())``), as a group in ``__consumer_offsets``.
Kafka writes v1 when the cluster's transaction version is 2 (KIP-890), v0 before.
"""

from __future__ import annotations

import struct

from pybroker.coordinator.internal_topic import decode_versioned, partition_for
from pybroker.errors import CorruptRecordError
from pybroker.net.protocol.codec import encode_data
from pybroker.txn.state import TxnMetadata, TxnState, partitions_by_topic

TRANSACTION_STATE_TOPIC = "__transaction_state"
TRANSACTION_LOG_KEY = 0  # the record type of TransactionLogKey, its key's prefix

_I16 = struct.Struct(">h")


def transaction_topic_config(segment_bytes: int, min_isr: int) -> dict[str, str]:
    """The topic's config, as Kafka creates it: compacted (a transactional id's last
    record is its state), uncompressed, in segments of
    ``transaction.state.log.segment.bytes``, written only with enough of an ISR
    (``transaction.state.log.min.isr``) and never led by a replica out of it."""
    return {"cleanup.policy": "compact", "compression.type": "uncompressed",
            "segment.bytes": str(segment_bytes), "min.insync.replicas": str(min_isr),
            "unclean.leader.election.enable": "false"}


def partition_of(transactional_id: str, num_partitions: int) -> int:
    """The ``__transaction_state`` partition whose leader coordinates ``transactional_id``."""
    return partition_for(transactional_id, num_partitions)


def txn_key(transactional_id: str) -> bytes:
    return _I16.pack(TRANSACTION_LOG_KEY) + encode_data(
        "TransactionLogKey", 0, {"transactional_id": transactional_id})


def txn_value(txn: TxnMetadata, version: int = 0) -> bytes:
    """``txn`` as a record value at ``version`` (0, or 1 under transaction version 2)."""
    if txn.state == TxnState.EMPTY and txn.partitions:
        raise ValueError(f"transactional id {txn.transactional_id!r}: Empty with partitions")
    value = {
        "producer_id": txn.producer_id, "producer_epoch": txn.producer_epoch,
        "transaction_timeout_ms": txn.timeout_ms, "transaction_status": int(txn.state),
        "transaction_partitions": None if txn.state == TxnState.EMPTY else [
            {"topic": topic, "partition_ids": ids}
            for topic, ids in partitions_by_topic(txn.partitions).items()],
        "transaction_last_update_timestamp_ms": txn.last_update_ms,
        "transaction_start_timestamp_ms": txn.start_ms,
        "previous_producer_id": txn.previous_producer_id,
        "next_producer_id": txn.next_producer_id,
        "client_transaction_version": txn.client_transaction_version,
    }
    return _I16.pack(version) + encode_data("TransactionLogValue", version, value)


def parse_txn_key(data: bytes) -> str | None:
    """The transactional id of a record key; None for a record type pybroker does not
    know (Kafka skips those too)."""
    if len(data) < _I16.size or _I16.unpack_from(data)[0] != TRANSACTION_LOG_KEY:
        return None
    return str(decode_versioned("TransactionLogKey", data)["transactional_id"])


def parse_txn_value(transactional_id: str, data: bytes) -> TxnMetadata:
    """The transaction a record value describes. Raises ``CorruptRecordError`` for a value
    that does not read (or names no known state)."""
    v = decode_versioned("TransactionLogValue", data)
    try:
        state = TxnState(v["transaction_status"])
    except ValueError:
        raise CorruptRecordError(f"{TRANSACTION_STATE_TOPIC}: transactional id "
                                 f"{transactional_id!r}: unknown state "
                                 f"{v['transaction_status']}") from None
    partitions = frozenset(
        (p["topic"], partition) for p in v["transaction_partitions"] or ()
        for partition in p["partition_ids"]) if state != TxnState.EMPTY else frozenset()
    return TxnMetadata(transactional_id, v["producer_id"], v["producer_epoch"],
                       v["transaction_timeout_ms"], state, partitions,
                       v["transaction_last_update_timestamp_ms"],
                       v["transaction_start_timestamp_ms"], v["previous_producer_id"],
                       v["next_producer_id"], v["client_transaction_version"])

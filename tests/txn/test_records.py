"""``__transaction_state`` records against Kafka's byte layout (TransactionLogKey v0,
TransactionLogValue v0 and v1), and the partition of a transactional id."""

from __future__ import annotations

import struct

import pytest

from pybroker.errors import CorruptRecordError
from pybroker.txn.records import (
    parse_txn_key,
    parse_txn_value,
    partition_of,
    transaction_topic_config,
    txn_key,
    txn_value,
)
from pybroker.txn.state import TxnMetadata, TxnState


def _string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def _compact_string(text: str) -> bytes:
    return bytes([len(text) + 1]) + text.encode()  # uvarint of length + 1 (< 128 here)


ONGOING = TxnMetadata("tx", 7, 3, 60000, TxnState.ONGOING,
                      frozenset({("b", 0), ("a", 2), ("a", 1)}), 2000, 1500)


def test_key_is_the_record_type_then_the_transactional_id():
    assert txn_key("tx") == struct.pack(">h", 0) + _string("tx")
    assert parse_txn_key(txn_key("my-transactional-id")) == "my-transactional-id"
    assert parse_txn_key(struct.pack(">h", 1) + _string("tx")) is None  # not a txn key


def test_empty_value_v0_has_null_partitions():
    empty = TxnMetadata.new("tx", 7, 0, 60000, 1000)
    expected = struct.pack(">hqhibiqq", 0, 7, 0, 60000, 0, -1, 1000, -1)
    assert txn_value(empty) == expected
    assert parse_txn_value("tx", expected) == empty


def test_ongoing_value_v0_lists_partitions_by_topic():
    partitions = (struct.pack(">i", 2)
                  + _string("a") + struct.pack(">iii", 2, 1, 2)
                  + _string("b") + struct.pack(">ii", 1, 0))
    expected = (struct.pack(">hqhib", 0, 7, 3, 60000, 1) + partitions
                + struct.pack(">qq", 2000, 1500))
    assert txn_value(ONGOING) == expected
    assert parse_txn_value("tx", expected) == ONGOING


def test_value_v1_is_flexible_with_its_tagged_fields():
    txn = TxnMetadata("tx", 7, 3, 60000, TxnState.PREPARE_COMMIT, frozenset({("a", 1)}),
                      2000, 1500, previous_producer_id=5, next_producer_id=9,
                      client_transaction_version=2)
    expected = (struct.pack(">hqhib", 1, 7, 3, 60000, 2)
                + bytes([2]) + _compact_string("a") + bytes([2]) + struct.pack(">i", 1)
                + bytes([0])  # the partition entry's tagged fields: none
                + struct.pack(">qq", 2000, 1500)
                + bytes([3])  # three tagged fields, by tag: size then value
                + bytes([0, 8]) + struct.pack(">q", 5)
                + bytes([1, 8]) + struct.pack(">q", 9)
                + bytes([2, 2]) + struct.pack(">h", 2))
    assert txn_value(txn, version=1) == expected
    assert parse_txn_value("tx", expected) == txn
    # tagged fields at their defaults are left out, and read back as them
    plain = TxnMetadata.new("tx", 7, 0, 60000, 1000)
    assert txn_value(plain, version=1)[-1:] == bytes([0])
    assert parse_txn_value("tx", txn_value(plain, version=1)) == plain


@pytest.mark.parametrize("state", list(TxnState))
def test_every_state_round_trips(state):
    partitions = frozenset() if state == TxnState.EMPTY else ONGOING.partitions
    txn = TxnMetadata("tx-é", 12, 4, 900000, state, partitions, 5000, 4000)
    for version in (0, 1):
        assert parse_txn_value("tx-é", txn_value(txn, version)) == txn


def test_empty_with_partitions_is_never_written():
    with pytest.raises(ValueError):
        txn_value(TxnMetadata("tx", 7, 0, 60000, TxnState.EMPTY, frozenset({("a", 0)}), 1))


@pytest.mark.parametrize("data", [
    pytest.param(b"\x00", id="no-version"),
    pytest.param(struct.pack(">hq", 0, 7), id="truncated"),
    pytest.param(struct.pack(">hqhibiqq", 0, 7, 0, 60000, 9, -1, 1000, -1), id="unknown-state"),
    pytest.param(struct.pack(">hqhibiqq", 2, 7, 0, 60000, 0, -1, 1000, -1), id="unknown-version"),
])
def test_unreadable_values_are_corrupt_records(data):
    with pytest.raises(CorruptRecordError):
        parse_txn_value("tx", data)


# Java's String.hashCode() and Kafka's Utils.abs, from a JVM (jshell): id, hash, % 50.
@pytest.mark.parametrize("transactional_id, java_hash, partition", [
    ("", 0, 0),
    ("hello", 99162322, 22),
    ("txn-1", 110810510, 10),
    ("my-transactional-id", -959806496, 46),
    ("polygenelubricants", -2147483648, 0),  # abs(MIN_VALUE) is 0 in Utils.abs
    ("Aa", 2112, 12),
    ("BB", 2112, 12),
    ("é", 233, 33),
    ("日本語-tx", -853462406, 6),
    ("\U0001F600", 1772899, 49),  # a surrogate pair: two UTF-16 code units
    ("spark-exactly-once-0", 1393730805, 5),
])
def test_partition_is_kafkas_for_the_java_hash(transactional_id, java_hash, partition):
    from pybroker.coordinator.internal_topic import java_string_hash

    assert java_string_hash(transactional_id) == java_hash
    assert partition_of(transactional_id, 50) == partition


def test_topic_config_is_kafkas():
    from pybroker.broker.topic_config import validate

    config = transaction_topic_config(100 * 1024 * 1024, 2)
    validate(config)  # a topic config CreateTopics would accept
    assert config == {
        "cleanup.policy": "compact", "compression.type": "uncompressed",
        "segment.bytes": "104857600", "min.insync.replicas": "2",
        "unclean.leader.election.enable": "false"}

"""A transactional id's transaction as its coordinator keeps it (Kafka's
``TransactionMetadata`` and ``TransactionState``), and the only ways it may change.

The metadata is immutable: each step (``init_producer``, ``add_partitions``,
``prepare_end``, ``complete``, ``fence_epoch``, ``expire``) returns the next metadata, or
raises ``IllegalTransition`` when Kafka's state machine does not allow it from the current
state. The coordinator writes the returned metadata to ``__transaction_state`` and keeps
it once the write is replicated, so a step that fails to be written leaves nothing
changed. The states, with their ids in the log record and their names in
DescribeTransactions::

    Empty (0) --AddPartitions/AddOffsets--> Ongoing (1) --EndTxn commit--> PrepareCommit (2)
      ^                                       |  |                              |
      |                                       |  +--EndTxn abort--> PrepareAbort (3)
      |                                       +--fenced (timeout, a newer producer)--+  |
      |                                          PrepareEpochFence (7) --> PrepareAbort
      +-- InitProducerId -- CompleteCommit (4) / CompleteAbort (5) <-- markers written
    Empty / CompleteCommit / CompleteAbort --expired--> Dead (6) (the record's tombstone)

A transaction v2 client (KIP-890) may also abort from Empty, CompleteCommit or
CompleteAbort: it cannot know whether the coordinator saw its last transaction end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from enum import IntEnum
from typing import Any

NO_PRODUCER_ID = -1
NO_TIMESTAMP = -1
MAX_EPOCH = 0x7FFF  # Short.MAX_VALUE: an epoch never reaches it


class TxnState(IntEnum):
    """The ``TransactionStatus`` of a ``__transaction_state`` record."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions give: ``PrepareCommit``."""
        return _KAFKA_NAMES[self]

    @property
    def expiration_allowed(self) -> bool:
        """Whether a transactional id idle in this state may expire (no transaction open)."""
        return self in _AT_REST

    @property
    def is_prepared(self) -> bool:
        """Whether the outcome is decided and markers are yet to be written."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


_KAFKA_NAMES = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit", TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit", TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead", TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}

# No transaction open: a new one may start, the producer may be re-initialized.
_AT_REST = frozenset((TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT))

# Kafka's TransactionState.validPreviousStates.
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: _AT_REST,
    TxnState.ONGOING: _AT_REST | {TxnState.ONGOING},
    TxnState.PREPARE_COMMIT: frozenset((TxnState.ONGOING,)),
    TxnState.PREPARE_ABORT: _AT_REST | {TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE},
    TxnState.COMPLETE_COMMIT: frozenset((TxnState.PREPARE_COMMIT,)),
    TxnState.COMPLETE_ABORT: frozenset((TxnState.PREPARE_ABORT,)),
    TxnState.DEAD: _AT_REST,
    TxnState.PREPARE_EPOCH_FENCE: frozenset((TxnState.ONGOING,)),
}


class IllegalTransition(Exception):
    """A step Kafka's transaction state machine refuses from the current state. The
    coordinator answers it with the request's error (INVALID_TXN_STATE,
    CONCURRENT_TRANSACTIONS, ...), never by changing the state."""


def can_transition(current: TxnState, target: TxnState) -> bool:
    return current in VALID_PREVIOUS[target]


TopicPartition = tuple[str, int]


def partitions_by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """``partitions`` as Kafka's messages list them: each topic (sorted) with its
    partition indexes (sorted)."""
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(partitions):
        by_topic.setdefault(topic, []).append(index)
    return by_topic


@dataclasses.dataclass(frozen=True, slots=True)
class TxnMetadata:
    """One transactional id's transaction: the value of its ``__transaction_state``
    record. ``start_ms`` is when the open transaction began (-1: none open);
    ``previous_producer_id``/``next_producer_id`` are the record's tagged fields (-1:
    none), kept for the producer id rotation of transaction v2."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    last_update_ms: int
    start_ms: int = NO_TIMESTAMP
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0

    @classmethod
    def new(cls, transactional_id: str, producer_id: int, producer_epoch: int,
            timeout_ms: int, now_ms: int) -> TxnMetadata:
        """A transactional id's first metadata, before any transaction (Empty)."""
        return cls(transactional_id, producer_id, producer_epoch, timeout_ms, TxnState.EMPTY,
                   frozenset(), now_ms)

    def timed_out(self, now_ms: int) -> bool:
        """Whether the open transaction outlived its timeout: the coordinator aborts it
        under a bumped epoch (``fence_epoch``), as Kafka's periodic check does."""
        return self.state == TxnState.ONGOING and self.start_ms + self.timeout_ms < now_ms

    def expired(self, now_ms: int, expiration_ms: int) -> bool:
        """Whether the transactional id may be forgotten (``expire``): no transaction open
        and no change for ``transactional.id.expiration.ms``."""
        return self.state.expiration_allowed and self.last_update_ms + expiration_ms <= now_ms

    def _to(self, state: TxnState, now_ms: int, **changes: Any) -> TxnMetadata:
        if not can_transition(self.state, state):
            raise IllegalTransition(f"transactional id {self.transactional_id!r}: "
                                    f"{self.state.kafka_name} -> {state.kafka_name}")
        return dataclasses.replace(self, state=state, last_update_ms=now_ms, **changes)

    def init_producer(self, producer_id: int, producer_epoch: int, timeout_ms: int,
                      now_ms: int) -> TxnMetadata:
        """InitProducerId with no transaction open: the producer's new id and epoch (the
        caller bumped or rotated them), Empty again."""
        previous = self.producer_id if producer_id != self.producer_id else self.previous_producer_id
        return self._to(TxnState.EMPTY, now_ms, producer_id=producer_id,
                        producer_epoch=producer_epoch, timeout_ms=timeout_ms,
                        partitions=frozenset(), start_ms=NO_TIMESTAMP,
                        previous_producer_id=previous, next_producer_id=NO_PRODUCER_ID)

    def add_partitions(self, partitions: Iterable[TopicPartition], now_ms: int) -> TxnMetadata:
        """AddPartitionsToTxn (AddOffsetsToTxn adds the group's offsets partition):
        Ongoing with ``partitions`` added; the transaction starts now if none was open."""
        start = now_ms if self.state in _AT_REST else self.start_ms
        return self._to(TxnState.ONGOING, now_ms, partitions=self.partitions | set(partitions),
                        start_ms=start)

    def prepare_end(self, commit: bool, now_ms: int) -> TxnMetadata:
        """EndTxn: the outcome is decided (PrepareCommit or PrepareAbort), its markers are
        to be written to ``partitions``. A commit needs an open transaction."""
        target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        return self._to(target, now_ms)

    def complete(self, now_ms: int) -> TxnMetadata:
        """Every partition has its marker: CompleteCommit or CompleteAbort, with no
        partitions left in the transaction."""
        if not self.state.is_prepared:
            raise IllegalTransition(f"transactional id {self.transactional_id!r}: "
                                    f"nothing to complete in {self.state.kafka_name}")
        target = (TxnState.COMPLETE_COMMIT if self.state == TxnState.PREPARE_COMMIT
                  else TxnState.COMPLETE_ABORT)
        return self._to(target, now_ms, partitions=frozenset())

    def fence_epoch(self, now_ms: int) -> TxnMetadata:
        """An open transaction is to be aborted under a bumped epoch (it timed out, or a
        newer producer initialized), so its producer is fenced: PrepareEpochFence, then
        ``prepare_end(commit=False)``."""
        if self.producer_epoch >= MAX_EPOCH - 1:
            raise IllegalTransition(f"transactional id {self.transactional_id!r}: "
                                    f"epoch {self.producer_epoch} cannot be bumped")
        return self._to(TxnState.PREPARE_EPOCH_FENCE, now_ms,
                        producer_epoch=self.producer_epoch + 1)

    def expire(self, now_ms: int) -> TxnMetadata:
        """The transactional id was idle past ``transactional.id.expiration.ms`` with no
        transaction open: Dead, written as its record's tombstone."""
        return self._to(TxnState.DEAD, now_ms, partitions=frozenset())

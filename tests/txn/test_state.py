"""A transaction's state machine: Kafka's allowed transitions, and each step of a
transaction's life refused where Kafka refuses it."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from pybroker.txn.state import (
    MAX_EPOCH,
    IllegalTransition,
    TxnMetadata,
    TxnState,
    can_transition,
)

S = TxnState
AT_REST = {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
# Kafka's TransactionState.validPreviousStates, written out as (from, to) pairs.
ALLOWED = (
    {(s, S.EMPTY) for s in AT_REST}
    | {(s, S.ONGOING) for s in AT_REST | {S.ONGOING}}
    | {(S.ONGOING, S.PREPARE_COMMIT)}
    | {(s, S.PREPARE_ABORT) for s in AT_REST | {S.ONGOING, S.PREPARE_EPOCH_FENCE}}
    | {(S.PREPARE_COMMIT, S.COMPLETE_COMMIT), (S.PREPARE_ABORT, S.COMPLETE_ABORT)}
    | {(s, S.DEAD) for s in AT_REST}
    | {(S.ONGOING, S.PREPARE_EPOCH_FENCE)}
)


@pytest.mark.parametrize("current, target", list(itertools.product(TxnState, TxnState)))
def test_transitions_are_kafkas(current, target):
    assert can_transition(current, target) == ((current, target) in ALLOWED)


def test_names_ids_and_expiration_are_kafkas():
    assert [(s.value, s.kafka_name) for s in TxnState] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"),
        (4, "CompleteCommit"), (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    assert {s for s in TxnState if s.expiration_allowed} == AT_REST


def _in(state: TxnState) -> TxnMetadata:
    """A transaction in ``state``, with a partition when one is open."""
    partitions = frozenset() if state in AT_REST | {S.DEAD} else frozenset({("t", 0)})
    return TxnMetadata("tx", 7, 1, 60000, state, partitions, 100, 50)


def test_a_committed_transaction():
    txn = TxnMetadata.new("tx", 7, 0, 60000, now_ms=1000)
    assert (txn.state, txn.partitions, txn.start_ms, txn.last_update_ms) == (
        S.EMPTY, frozenset(), -1, 1000)
    txn = txn.add_partitions([("a", 0)], now_ms=2000)
    assert (txn.state, txn.start_ms) == (S.ONGOING, 2000)
    txn = txn.add_partitions([("a", 1), ("a", 0)], now_ms=2500)  # more of the same
    assert (txn.state, txn.partitions, txn.start_ms, txn.last_update_ms) == (
        S.ONGOING, frozenset({("a", 0), ("a", 1)}), 2000, 2500)
    txn = txn.prepare_end(commit=True, now_ms=3000)
    assert (txn.state, txn.partitions) == (S.PREPARE_COMMIT, frozenset({("a", 0), ("a", 1)}))
    txn = txn.complete(now_ms=3100)
    assert (txn.state, txn.partitions, txn.last_update_ms) == (S.COMPLETE_COMMIT, frozenset(),
                                                               3100)
    txn = txn.add_partitions([("b", 0)], now_ms=4000)  # the next transaction starts
    assert (txn.state, txn.start_ms, txn.producer_epoch) == (S.ONGOING, 4000, 0)


def test_an_aborted_transaction_and_a_fenced_one():
    txn = _in(S.ONGOING).prepare_end(commit=False, now_ms=200)
    assert txn.state == S.PREPARE_ABORT
    assert txn.complete(now_ms=300).state == S.COMPLETE_ABORT
    fenced = _in(S.ONGOING).fence_epoch(now_ms=200)
    assert (fenced.state, fenced.producer_epoch, fenced.partitions) == (
        S.PREPARE_EPOCH_FENCE, 2, frozenset({("t", 0)}))
    aborting = fenced.prepare_end(commit=False, now_ms=300)
    assert (aborting.state, aborting.producer_epoch) == (S.PREPARE_ABORT, 2)


def test_init_producer_starts_over_and_remembers_a_rotated_id():
    txn = _in(S.COMPLETE_ABORT).init_producer(7, 2, 30000, now_ms=500)
    assert (txn.state, txn.producer_id, txn.producer_epoch, txn.timeout_ms,
            txn.previous_producer_id, txn.start_ms) == (S.EMPTY, 7, 2, 30000, -1, -1)
    rotated = txn.init_producer(8, 0, 30000, now_ms=600)
    assert (rotated.producer_id, rotated.producer_epoch, rotated.previous_producer_id) == (
        8, 0, 7)


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_an_abort_with_no_transaction_open_is_allowed(state):
    """Transaction v2 (KIP-890): the client may not know its last transaction ended."""
    assert _in(state).prepare_end(commit=False, now_ms=200).state == S.PREPARE_ABORT


@pytest.mark.parametrize("state, step", [
    (S.EMPTY, lambda t: t.prepare_end(commit=True, now_ms=1)),
    (S.COMPLETE_COMMIT, lambda t: t.prepare_end(commit=True, now_ms=1)),
    (S.PREPARE_COMMIT, lambda t: t.prepare_end(commit=False, now_ms=1)),
    (S.PREPARE_ABORT, lambda t: t.prepare_end(commit=True, now_ms=1)),
    (S.PREPARE_COMMIT, lambda t: t.add_partitions([("u", 0)], now_ms=1)),
    (S.PREPARE_ABORT, lambda t: t.add_partitions([("u", 0)], now_ms=1)),
    (S.ONGOING, lambda t: t.complete(now_ms=1)),
    (S.COMPLETE_COMMIT, lambda t: t.complete(now_ms=1)),
    (S.ONGOING, lambda t: t.init_producer(7, 2, 60000, now_ms=1)),
    (S.PREPARE_COMMIT, lambda t: t.init_producer(7, 2, 60000, now_ms=1)),
    (S.EMPTY, lambda t: t.fence_epoch(now_ms=1)),
    (S.PREPARE_COMMIT, lambda t: t.fence_epoch(now_ms=1)),
    (S.ONGOING, lambda t: t.expire(now_ms=1)),
    (S.PREPARE_ABORT, lambda t: t.expire(now_ms=1)),
    (S.DEAD, lambda t: t.add_partitions([("u", 0)], now_ms=1)),
    (S.DEAD, lambda t: t.init_producer(7, 2, 60000, now_ms=1)),
])
def test_refused_steps_change_nothing(state, step):
    txn = _in(state)
    with pytest.raises(IllegalTransition):
        step(txn)
    assert txn == _in(state)


def test_an_epoch_at_its_limit_is_not_bumped():
    with pytest.raises(IllegalTransition):
        dataclasses.replace(_in(S.ONGOING), producer_epoch=MAX_EPOCH - 1).fence_epoch(now_ms=1)
    assert dataclasses.replace(_in(S.ONGOING), producer_epoch=MAX_EPOCH - 2).fence_epoch(
        now_ms=1).producer_epoch == MAX_EPOCH - 1


def test_timeout_counts_from_the_transaction_start():
    txn = TxnMetadata.new("tx", 7, 0, 60000, now_ms=0).add_partitions([("a", 0)], now_ms=1000)
    txn = txn.add_partitions([("a", 1)], now_ms=50000)  # activity does not extend it
    assert not txn.timed_out(61000) and txn.timed_out(61001)
    assert not txn.prepare_end(commit=True, now_ms=60000).timed_out(10**9)


@pytest.mark.parametrize("state", list(TxnState))
def test_only_an_id_at_rest_expires(state):
    txn = _in(state)  # last updated at 100
    assert txn.expired(now_ms=1100, expiration_ms=1000) == (state in AT_REST)
    assert not txn.expired(now_ms=1099, expiration_ms=1000)

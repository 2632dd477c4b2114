"""The transaction coordinator (Kafka's ``TransactionCoordinator``, transaction version 1):
the one object the transaction handlers (pybroker/broker/handlers/transactions.py and
InitProducerId) and the control plane talk to.

A transactional id's state is a ``TxnMetadata`` (state.py), changed only by its steps:
the coordinator computes the next metadata, writes it to the id's ``__transaction_state``
partition, and keeps it once the ISR has it (``_write``), so a write that fails leaves
the state as it was and the client retries. While a write of an id is in flight the id
is busy: other requests for it get CONCURRENT_TRANSACTIONS, as Kafka's ``pendingState``
answers. A transaction ends in two steps: EndTxn writes PrepareCommit or PrepareAbort and
is answered; the markers are then written to every partition of the transaction
(``MarkerWriter``), retried until each partition has one, and CompleteCommit or
CompleteAbort is written. Meanwhile the id answers CONCURRENT_TRANSACTIONS (its producer
retries), so its next transaction never starts before the last one's markers are in.

A second producer with the same transactional id (InitProducerId) gets the next epoch,
fencing the first: an open transaction is aborted under the bumped epoch first, whose
markers make every partition refuse the old epoch. A transaction open longer than its
timeout is aborted the same way by a periodic check
(``transaction.abort.timed.out.transaction.cleanup.interval.ms``), and an id idle longer
than ``transactional.id.expiration.ms`` is forgotten (its record's tombstone).

Which ids this broker coordinates is ``TxnPartitions``' answer (the leaders of their
partitions, loaded through the log's sliced replay). A partition being loaded answers
COORDINATOR_LOAD_IN_PROGRESS; one led elsewhere NOT_COORDINATOR. On load, transactions
found prepared resume writing their markers, as Kafka's coordinator does after a failover.

Transaction version 2 (KIP-890's epoch bump per transaction) is not offered: the broker
advertises no ``transaction.version`` feature, so clients use version 1. Not thread-safe:
every method runs on the broker's event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, NamedTuple

from pybroker.coordinator.background import BackgroundTasks
from pybroker.coordinator.internal_topic import CoordinatorLog, InternalTopic, store_error
from pybroker.errors import ErrorCode, KafkaError
from pybroker.txn.config import TxnConfig
from pybroker.txn.markers import MarkerWrite, TxnMarker
from pybroker.txn.partitions import TxnPartitions
from pybroker.txn.records import partition_of, txn_key, txn_value
from pybroker.txn.state import (
    MAX_EPOCH,
    NO_PRODUCER_ID,
    IllegalTransition,
    TopicPartition,
    TxnMetadata,
    TxnState,
)

if TYPE_CHECKING:
    from pybroker.broker.partition import Partition

log = logging.getLogger("pybroker.txn")

MARKER_RETRY_S = 0.1  # between rounds of markers to partitions that could not take them
# marker errors that mean the partition will never take this marker: done with it
_MARKER_DONE = frozenset((ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
# a newer producer epoch or coordinator wrote there: this coordinator is stale
_MARKER_FENCED = frozenset((ErrorCode.INVALID_PRODUCER_EPOCH,
                            ErrorCode.TRANSACTION_COORDINATOR_FENCED))


class ProducerIdAndEpoch(NamedTuple):
    producer_id: int
    producer_epoch: int


class InitResult(NamedTuple):
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1


class TxnCoordinator:
    """See module doc. ``new_producer_id()``: a fresh producer id (the broker's
    ``ProducerIdManager``); ``write_markers``: the ``MarkerWriter``'s ``write``;
    ``partition_exists`` vets the partitions a transaction adds."""

    def __init__(self, txn_topic: InternalTopic | None, config: TxnConfig,
                 new_producer_id: Callable[[], Awaitable[int]],
                 write_markers: MarkerWrite,
                 partition_exists: Callable[[str, int], bool],
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self._store = CoordinatorLog(txn_topic, config.state_log_num_partitions,
                                  config.write_timeout_ms)
        self._new_producer_id = new_producer_id
        self._write_markers = write_markers
        self._partition_exists = partition_exists
        self._clock = clock
        self.transactions: dict[str, TxnMetadata] = {}
        self._busy: set[str] = set()  # ids with a write (or their markers) in flight
        self._background = BackgroundTasks()  # the timer loop, markers, loads
        self.partitions = TxnPartitions(self.partition_for, self._install, self._unload,
                                        self._spawn)

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def partition_for(self, transactional_id: str) -> int:
        return partition_of(transactional_id, self._store.num_partitions)

    # lifecycle -------------------------------------------------------------------------

    def lead_every_partition(self) -> None:
        """Every transaction state partition is led here for good: load the existing ones."""
        self.partitions.lead_every_partition(self._store.led_partitions())

    def follow_leadership(self, subscribe: Callable[[Callable[[Partition, bool], None]], None]
                          ) -> None:
        self.partitions.follow_leadership()
        subscribe(self.partitions.leadership_changed)

    async def start(self) -> None:
        self._spawn(self._run(), name="transactions")

    async def stop(self) -> None:
        await self._background.cancel_all()

    def _spawn(self, coro: Coroutine[object, object, None], name: str | None = None
               ) -> asyncio.Task[None]:
        return self._background.spawn(coro, name)

    async def _run(self) -> None:
        next_expiry = self.now_ms() + self.config.remove_expired_interval_ms
        while True:
            await asyncio.sleep(self.config.abort_timed_out_interval_ms / 1000)
            try:
                now = self.now_ms()
                self.abort_timed_out(now)
                if now >= next_expiry:
                    next_expiry = now + self.config.remove_expired_interval_ms
                    self.remove_expired(now)
            except Exception:  # a bug in one id must not stop the timers
                log.exception("transaction timers failed")

    # loading ----------------------------------------------------------------------------

    def _install(self, index: int, loaded: dict[str, TxnMetadata]) -> None:
        self.transactions.update(loaded)
        for txn in loaded.values():
            if txn.state.is_prepared:
                self._begin_completion(txn)
            elif txn.state == TxnState.PREPARE_EPOCH_FENCE:  # never written, but be safe
                self._begin_abort(txn)

    def _unload(self, index: int) -> None:
        gone = [t for t in self.transactions if self.partition_for(t) == index]
        for transactional_id in gone:
            del self.transactions[transactional_id]
            self._busy.discard(transactional_id)
        log.info("%s-%d: not the leader any more, %d transactional ids unloaded",
                 "__transaction_state", index, len(gone))

    # writing ----------------------------------------------------------------------------

    async def _write(self, txn: TxnMetadata) -> ErrorCode:
        """Write ``txn`` as its id's record and keep it once the ISR has it (a Dead one
        as the tombstone, forgetting the id); else the client's error, state unchanged."""
        transactional_id = txn.transactional_id
        epoch = self.partitions.coordinator_epoch(transactional_id)
        value = None if txn.state == TxnState.DEAD else txn_value(txn)
        try:
            written = self._store.append(transactional_id,
                                         [(txn_key(transactional_id), value)], self.now_ms())
        except KafkaError as exc:
            log.warning("transactional id %r: writing %s failed: %s", transactional_id,
                        txn.state.kafka_name, exc)
            return store_error(exc)
        if written is not None:
            code = await self._store.replicated(written)
            if code != ErrorCode.NONE:
                return code
        if not self.partitions.is_current(transactional_id, epoch):
            return ErrorCode.NOT_COORDINATOR  # moved while the write waited
        if txn.state == TxnState.DEAD:
            self.transactions.pop(transactional_id, None)
        else:
            self.transactions[transactional_id] = txn
        return ErrorCode.NONE

    async def _step(self, txn: TxnMetadata) -> ErrorCode:
        """``_write`` with the id busy meanwhile."""
        self._busy.add(txn.transactional_id)
        try:
            return await self._write(txn)
        finally:
            self._busy.discard(txn.transactional_id)

    # requests ---------------------------------------------------------------------------

    def _current(self, transactional_id: str, producer_id: int, producer_epoch: int
                 ) -> TxnMetadata | ErrorCode:
        """The id's metadata if the producer may act on it, else the error (Kafka's
        checks, in Kafka's order)."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        error = self.partitions.coordinator_error(transactional_id)
        if error != ErrorCode.NONE:
            return error
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if txn.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if transactional_id in self._busy:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return txn

    async def init_producer(self, transactional_id: str, timeout_ms: int,
                            expected: ProducerIdAndEpoch | None) -> InitResult:
        """InitProducerId with a transactional id: the producer id and the next epoch,
        fencing older instances (KIP-360: ``expected`` is the id and epoch the producer
        had, when it asks again after an error)."""
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return InitResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        error = self.partitions.coordinator_error(transactional_id)
        if error != ErrorCode.NONE:
            return InitResult(error)
        if transactional_id in self._busy:
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        now = self.now_ms()
        txn = self.transactions.get(transactional_id)
        if txn is None:
            self._busy.add(transactional_id)  # no second id while the first is fetched
            try:
                producer_id = await self._new_producer_id()
            finally:
                self._busy.discard(transactional_id)
            txn = TxnMetadata.new(transactional_id, producer_id, 0, timeout_ms, now)
            error = await self._step(txn)
            return InitResult(error, producer_id, 0) if error == ErrorCode.NONE \
                else InitResult(error)
        if expected is not None and expected.producer_id != NO_PRODUCER_ID and \
                expected != (txn.producer_id, txn.producer_epoch) and \
                expected.producer_id != txn.previous_producer_id:
            return InitResult(ErrorCode.PRODUCER_FENCED)
        if txn.state.is_prepared:
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if txn.state == TxnState.ONGOING:
            # Fence the producer that opened it: abort under the next epoch; the new
            # producer retries and gets its epoch once the markers are in.
            self._begin_abort(txn)
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        producer_id, epoch = txn.producer_id, txn.producer_epoch + 1
        if epoch >= MAX_EPOCH - 1:  # Kafka rotates to a new id before the epoch runs out
            self._busy.add(transactional_id)
            try:
                producer_id = await self._new_producer_id()
            finally:
                self._busy.discard(transactional_id)
            epoch = 0
        try:
            following = txn.init_producer(producer_id, epoch, timeout_ms, now)
        except IllegalTransition as exc:
            log.warning("%s", exc)
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        error = await self._step(following)
        return InitResult(error, producer_id, epoch) if error == ErrorCode.NONE \
            else InitResult(error)

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[TopicPartition]
                             ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn: each partition's error (all the same unless some do not
        exist: those UNKNOWN_TOPIC_OR_PARTITION, the rest OPERATION_NOT_ATTEMPTED)."""
        wanted = set(partitions)
        unknown = {tp for tp in wanted if not self._partition_exists(*tp)}
        if unknown:
            return {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                    else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in wanted}
        error = await self._add(transactional_id, producer_id, producer_epoch, wanted)
        return dict.fromkeys(wanted, error)

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          offsets_partition: TopicPartition) -> ErrorCode:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the
        transaction, so its marker makes the transaction's offset commits visible."""
        return await self._add(transactional_id, producer_id, producer_epoch,
                               {offsets_partition})

    async def _add(self, transactional_id: str, producer_id: int, producer_epoch: int,
                   partitions: set[TopicPartition]) -> ErrorCode:
        txn = self._current(transactional_id, producer_id, producer_epoch)
        if isinstance(txn, ErrorCode):
            return txn
        if txn.state.is_prepared or txn.state == TxnState.PREPARE_EPOCH_FENCE:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if txn.state == TxnState.ONGOING and partitions <= txn.partitions:
            return ErrorCode.NONE  # nothing new: no write
        try:
            following = txn.add_partitions(partitions, self.now_ms())
        except IllegalTransition:
            return ErrorCode.INVALID_TXN_STATE
        return await self._step(following)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn with ``verify_only`` (KIP-890 part 1, from a partition
        leader about to write a transactional batch): NONE for each partition that is in
        the open transaction of that producer and epoch, else why not."""
        txn = self._current(transactional_id, producer_id, producer_epoch)
        if isinstance(txn, ErrorCode) and txn != ErrorCode.CONCURRENT_TRANSACTIONS:
            return dict.fromkeys(partitions, txn)
        txn = self.transactions[transactional_id]
        return {tp: ErrorCode.NONE if txn.state == TxnState.ONGOING and tp in txn.partitions
                else ErrorCode.INVALID_TXN_STATE for tp in partitions}

    async def end_transaction(self, transactional_id: str, producer_id: int,
                              producer_epoch: int, commit: bool) -> ErrorCode:
        """EndTxn: answered once the outcome (PrepareCommit/PrepareAbort) is written;
        the markers follow in the background. A retry of an EndTxn whose outcome is
        already written gets NONE once it is complete, CONCURRENT_TRANSACTIONS until."""
        txn = self._current(transactional_id, producer_id, producer_epoch)
        if isinstance(txn, ErrorCode):
            return txn
        state = txn.state
        if state == TxnState.ONGOING:
            following = txn.prepare_end(commit, self.now_ms())
            error = await self._step(following)
            if error == ErrorCode.NONE:
                self._begin_completion(following)
            return error
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        prepared = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if state == done:
            return ErrorCode.NONE
        if state in (prepared, TxnState.PREPARE_EPOCH_FENCE):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.INVALID_TXN_STATE

    # ending -----------------------------------------------------------------------------

    def _begin_completion(self, txn: TxnMetadata) -> None:
        self._busy.add(txn.transactional_id)
        self._spawn(self._complete(txn))

    async def _complete(self, txn: TxnMetadata) -> None:
        """Write the markers of a prepared transaction until every partition has one,
        then its completion. The id stays busy until then; a coordinator that lost the
        id or was fenced on a partition stops (the new coordinator resumes it)."""
        transactional_id = txn.transactional_id
        epoch = self.partitions.coordinator_epoch(transactional_id)
        commit = txn.state == TxnState.PREPARE_COMMIT
        remaining = frozenset(txn.partitions)
        self._busy.add(transactional_id)
        try:
            while remaining:
                if not self.partitions.is_current(transactional_id, epoch):
                    return
                errors = await self._write_markers(TxnMarker(
                    txn.producer_id, txn.producer_epoch, commit, epoch, remaining))
                fenced = {tp: e for tp, e in errors.items() if e in _MARKER_FENCED}
                if fenced:
                    log.warning("transactional id %r: markers refused, a newer coordinator "
                                "or producer wrote there: %s", transactional_id, fenced)
                    return
                remaining = frozenset(tp for tp, e in errors.items() if e not in _MARKER_DONE)
                if remaining:
                    await asyncio.sleep(MARKER_RETRY_S)
            while self.partitions.is_current(transactional_id, epoch):
                current = self.transactions.get(transactional_id, txn)
                error = await self._write(current.complete(self.now_ms()))
                if error == ErrorCode.NONE:
                    return
                await asyncio.sleep(MARKER_RETRY_S)
        finally:
            self._busy.discard(transactional_id)

    def _begin_abort(self, txn: TxnMetadata) -> None:
        """Abort an open transaction under the next epoch (its producer timed out, or a
        newer instance initialized): PrepareAbort with the bumped epoch, then its
        markers, which fence the old epoch on every partition. The id is busy from now."""
        if txn.transactional_id in self._busy:
            return
        self._busy.add(txn.transactional_id)
        self._spawn(self._abort_fenced(txn))

    async def _abort_fenced(self, txn: TxnMetadata) -> None:
        transactional_id = txn.transactional_id
        try:
            now = self.now_ms()
            following = txn.fence_epoch(now) if txn.state == TxnState.ONGOING else txn
            following = following.prepare_end(False, now)
        except IllegalTransition as exc:
            log.warning("cannot abort: %s", exc)
            self._busy.discard(transactional_id)
            return
        if await self._write(following) == ErrorCode.NONE:
            log.info("transactional id %r: aborted the open transaction of epoch %d",
                     transactional_id, txn.producer_epoch)
            self._spawn(self._complete(following))  # keeps the id busy
        else:
            self._busy.discard(transactional_id)

    def abort_timed_out(self, now_ms: int) -> None:
        """Abort every open transaction older than its timeout (the periodic check)."""
        for txn in list(self.transactions.values()):
            if txn.timed_out(now_ms) and txn.transactional_id not in self._busy:
                log.info("transactional id %r: transaction open %d ms, past its timeout of "
                         "%d ms: aborting", txn.transactional_id, now_ms - txn.start_ms,
                         txn.timeout_ms)
                self._begin_abort(txn)

    def remove_expired(self, now_ms: int) -> None:
        """Forget the ids idle past ``transactional.id.expiration.ms`` (tombstones)."""
        for txn in list(self.transactions.values()):
            if txn.expired(now_ms, self.config.id_expiration_ms) and \
                    txn.transactional_id not in self._busy:
                self._spawn(self._expire(txn, now_ms))

    async def _expire(self, txn: TxnMetadata, now_ms: int) -> None:
        if await self._step(txn.expire(now_ms)) == ErrorCode.NONE:
            log.info("transactional id %r expired", txn.transactional_id)

    # describing -------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnMetadata | ErrorCode:
        """DescribeTransactions of one id: its metadata, or NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS, TRANSACTIONAL_ID_NOT_FOUND."""
        error = self.partitions.coordinator_error(transactional_id)
        if error != ErrorCode.NONE:
            return error
        txn = self.transactions.get(transactional_id)
        return txn if txn is not None else ErrorCode.TRANSACTIONAL_ID_NOT_FOUND

    def list(self, states: set[TxnState], producer_ids: set[int], min_duration_ms: int
             ) -> list[TxnMetadata]:
        """ListTransactions: the ids coordinated here, filtered as the request asks (an
        empty filter passes all; ``min_duration_ms`` < 0: no duration filter)."""
        now = self.now_ms()
        return [t for t in self.transactions.values()
                if (not states or t.state in states)
                and (not producer_ids or t.producer_id in producer_ids)
                and (min_duration_ms < 0 or t.start_ms >= 0
                     and now - t.start_ms >= min_duration_ms)]

    def loading(self) -> bool:
        return self.partitions.loading()

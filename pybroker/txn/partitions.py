"""The ``__transaction_state`` partitions this broker leads, followed: a partition's
transactions load when this broker becomes its leader and unload when it stops leading
(Kafka's ``TransactionStateManager`` loading and unloading a partition), exactly as the
group coordinator follows ``__consumer_offsets`` (pybroker/coordinator/offsets_partitions.py,
whose docstring explains the two ways the control plane says which partitions are led).

The coordinator epoch of a transactional id is the leader epoch of its partition at the
time this broker took it: every marker carries it, and a partition refuses markers of an
older coordinator epoch than it has seen for the producer, so a deposed coordinator that
still writes markers is fenced.

Not thread-safe: every method runs on the broker's event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING

from pybroker.errors import ErrorCode
from pybroker.txn.load import load_transactions
from pybroker.txn.records import TRANSACTION_STATE_TOPIC
from pybroker.txn.state import TxnMetadata

if TYPE_CHECKING:
    from pybroker.broker.partition import Partition

log = logging.getLogger("pybroker.txn")


class _Led:
    """A transaction state partition this broker was told it leads: loading, then loaded."""

    __slots__ = ("partition", "coordinator_epoch", "loading", "task")

    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self.coordinator_epoch = partition.leader_epoch
        self.loading = True
        self.task: asyncio.Task[None] | None = None


class TxnPartitions:
    """See module doc. ``installed(index, transactions)`` hands a loaded partition's
    transactions to the coordinator; ``unloaded(index)`` tells it one is gone."""

    def __init__(self, partition_of: Callable[[str], int],
                 installed: Callable[[int, dict[str, TxnMetadata]], None],
                 unloaded: Callable[[int], None],
                 spawn: Callable[[Coroutine[object, object, None]], asyncio.Task[None]]
                 ) -> None:
        self._partition_of = partition_of
        self._installed = installed
        self._unloaded = unloaded
        self._spawn = spawn
        self._led: dict[int, _Led] = {}
        self._untold = ErrorCode.NONE  # see OffsetsPartitions._untold
        self._load_lock = asyncio.Lock()

    def lead_every_partition(self, partitions: list[Partition]) -> None:
        for partition in partitions:
            self.leadership_changed(partition, True)

    def follow_leadership(self) -> None:
        self._untold = ErrorCode.NOT_COORDINATOR

    def leadership_changed(self, partition: Partition, is_leader: bool) -> None:
        if partition.topic != TRANSACTION_STATE_TOPIC:
            return
        index = partition.index
        if is_leader:
            if index in self._led:
                return
            led = self._led[index] = _Led(partition)
            led.task = self._spawn(self._load(index, led))
            return
        lost = self._led.pop(index, None)
        if lost is None:
            return
        if lost.task is not None and not lost.task.done():
            lost.task.cancel()
        self._unloaded(index)

    async def _load(self, index: int, led: _Led) -> None:
        async with self._load_lock:
            started = time.monotonic()
            try:
                transactions = await load_transactions(
                    led.partition.log, lambda: self._still_led(index, led))
            except Exception:
                log.exception("%s-%d: loading the transactions failed",
                              TRANSACTION_STATE_TOPIC, index)
                transactions = None
            if transactions is not None and self._still_led(index, led):
                led.loading = False
                self._installed(index, transactions)
                log.info("%s-%d: loaded %d transactional ids in %.3f s (coordinator epoch "
                         "%d)", TRANSACTION_STATE_TOPIC, index, len(transactions),
                         time.monotonic() - started, led.coordinator_epoch)
            elif self._led.get(index) is led:
                del self._led[index]
                self._unloaded(index)

    def _still_led(self, index: int, led: _Led) -> bool:
        return led.partition.is_leader and self._led.get(index) is led

    def coordinator_error(self, transactional_id: str) -> ErrorCode:
        """NONE when this broker coordinates ``transactional_id`` now; NOT_COORDINATOR
        when another does, COORDINATOR_LOAD_IN_PROGRESS while its partition loads."""
        led = self._led.get(self._partition_of(transactional_id))
        if led is None:
            return self._untold
        if not led.partition.is_leader:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if led.loading else ErrorCode.NONE

    def coordinator_epoch(self, transactional_id: str) -> int:
        """The coordinator epoch markers of ``transactional_id`` carry (0 where every
        partition is led here for good and none was told)."""
        led = self._led.get(self._partition_of(transactional_id))
        return led.coordinator_epoch if led is not None else 0

    def is_current(self, transactional_id: str, coordinator_epoch: int) -> bool:
        """Whether this broker still coordinates ``transactional_id`` in the epoch a
        step began in (a write that finishes after a failover must not be applied)."""
        return self.coordinator_error(transactional_id) == ErrorCode.NONE and \
            self.coordinator_epoch(transactional_id) == coordinator_epoch

    def loading(self) -> bool:
        return any(led.loading for led in self._led.values())

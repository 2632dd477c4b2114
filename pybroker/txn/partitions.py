"""The ``__transaction_state`` partitions this broker leads: as Kafka, this broker
coordinates the transactional ids whose partition it leads. When a partition's
transactions load and unload is ``LedPartitions``' business
(pybroker/coordinator/led_partitions.py, shared with the group coordinator); a load here
is ``load_transactions`` (load.py), handed to the coordinator once complete.

The coordinator epoch of a transactional id is the leader epoch of its partition when
this broker took it: every marker carries it, and a partition refuses markers of an older
coordinator epoch than it has seen for the producer, so a deposed coordinator that still
writes markers is fenced.

Not thread-safe: every method runs on the broker's event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine

from pybroker.coordinator.led_partitions import LedPartition, LedPartitions
from pybroker.errors import ErrorCode
from pybroker.txn.load import load_transactions
from pybroker.txn.records import TRANSACTION_STATE_TOPIC
from pybroker.txn.state import TxnMetadata

log = logging.getLogger("pybroker.txn")


class TxnPartitions(LedPartitions):
    """See module doc. ``installed(index, transactions)`` hands a loaded partition's
    transactions to the coordinator; ``unloaded(index)`` tells it one is gone."""

    def __init__(self, partition_of: Callable[[str], int],
                 installed: Callable[[int, dict[str, TxnMetadata]], None],
                 unloaded: Callable[[int], None],
                 spawn: Callable[[Coroutine[object, object, None]], asyncio.Task[None]]
                 ) -> None:
        super().__init__(TRANSACTION_STATE_TOPIC, spawn)
        self._partition_of = partition_of
        self._installed = installed
        self._unloaded = unloaded

    async def _load(self, index: int, led: LedPartition) -> None:
        started = time.monotonic()
        try:
            transactions = await load_transactions(
                led.partition.log, lambda: self._still_led(index, led))
        except Exception:
            log.exception("%s-%d: loading the transactions failed",
                          TRANSACTION_STATE_TOPIC, index)
            transactions = None
        if transactions is not None and self._still_led(index, led):
            self.loaded(led)
            self._installed(index, transactions)
            log.info("%s-%d: loaded %d transactional ids in %.3f s (coordinator epoch "
                     "%d)", TRANSACTION_STATE_TOPIC, index, len(transactions),
                     time.monotonic() - started, led.coordinator_epoch)
        else:
            self.abandon(index, led)

    def _unload(self, index: int) -> None:
        self._unloaded(index)

    def coordinator_error(self, transactional_id: str) -> ErrorCode:
        """NONE when this broker coordinates ``transactional_id`` now; NOT_COORDINATOR
        when another does, COORDINATOR_LOAD_IN_PROGRESS while its partition loads."""
        return self.coordinator_error_of(self._partition_of(transactional_id))

    def coordinator_epoch(self, transactional_id: str) -> int:
        return self.coordinator_epoch_of(self._partition_of(transactional_id))

    def is_current(self, transactional_id: str, coordinator_epoch: int) -> bool:
        """Whether this broker still coordinates ``transactional_id`` in the epoch a
        step began in (a write that finishes after a failover must not be applied)."""
        return self.coordinator_error(transactional_id) == ErrorCode.NONE and \
            self.coordinator_epoch(transactional_id) == coordinator_epoch

"""Transaction markers: the commit or abort control batch the transaction coordinator has
written to each partition of a transaction once its outcome is decided (Kafka's
``TransactionMarkerChannelManager`` and the partition side of ``WriteTxnMarkers``).

``MarkerWriter.write`` is the coordinator's one way to write them: a partition this
broker leads gets the marker through ``Partition.append`` (the one append entry of a
partition), answered once the ISR has it, as an acks=all produce.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, NamedTuple

from pybroker._native.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    encode_control_batch,
    read_batch_header,
)
from pybroker.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from pybroker.broker.broker import Broker

log = logging.getLogger("pybroker.txn")

TopicPartition = tuple[str, int]

# the coordinator's way to write a transaction's markers (``MarkerWriter.write``)
MarkerWrite = Callable[["TxnMarker"], Awaitable[dict[TopicPartition, ErrorCode]]]

MARKER_TIMEOUT_S = 30.0  # how long a marker waits for the ISR before the coordinator retries


class TxnMarker(NamedTuple):
    """The outcome of one producer's transaction, to be written to ``partitions``."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: frozenset[TopicPartition]


class MarkerWriter:
    """Writes a transaction's markers to the partitions this broker leads."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    async def write(self, marker: TxnMarker) -> dict[TopicPartition, ErrorCode]:
        """The marker appended to each partition: NONE where the ISR has it, else the
        reason (the coordinator retries those; UNKNOWN_TOPIC_OR_PARTITION: the topic is
        gone, nothing to write)."""
        return {tp: await self._write_local(marker, tp) for tp in sorted(marker.partitions)}

    async def _write_local(self, marker: TxnMarker, tp: TopicPartition) -> ErrorCode:
        topic, index = tp
        try:
            partition = self._broker.topics.led_partition(topic, index)
            batch = bytearray(encode_control_batch(
                marker.producer_id, marker.producer_epoch,
                CONTROL_COMMIT if marker.commit else CONTROL_ABORT, marker.coordinator_epoch))
            appended = partition.append(memoryview(batch), read_batch_header(batch))
            if isinstance(appended, asyncio.Future):
                appended = await appended
            return ErrorCode(await partition.wait_for_high_watermark(
                appended.last_offset + 1, MARKER_TIMEOUT_S))
        except KafkaError as exc:
            return ErrorCode(exc.code)

    async def close(self) -> None:
        pass

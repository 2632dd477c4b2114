"""Transaction markers: the one way a commit or abort marker reaches a partition.

The transaction coordinator ends a transaction by writing a marker (a control batch:
Kafka's ``EndTransactionMarker``, ``records.encode_control_batch``) to every partition
the transaction wrote to, and retries each partition until it is written. Here:

- ``append_markers(broker, marker, timeout_s)``: the partitions of a marker this broker
  leads, each appended through ``Partition.append`` (the one append entry, whose producer
  state refuses a marker of an older producer epoch, INVALID_PRODUCER_EPOCH, or of an
  older transaction coordinator epoch, TRANSACTION_COORDINATOR_FENCED) and answered once
  the high watermark has passed it (acks=all, with min.insync.replicas checked first).
  A marker written to a ``__consumer_offsets`` partition then settles the producer's
  pending transactional offset commits there (``GroupCoordinator.complete_transaction``);
  none is written while that partition's groups load (NOT_LEADER_OR_FOLLOWER, as Kafka
  answers then: the coordinator retries).
  The WriteTxnMarkers handler (api key 27) calls it for the markers it is sent.
- ``MarkerWriter.write(marker)``: for the coordinator. Partitions led here go through
  ``append_markers``; those led by other brokers (a cluster) get one WriteTxnMarkers
  request per leader, over a connection per broker kept open (``PeerClient``); all of
  them at once. Every partition gets an error code: NONE when written;
  UNKNOWN_TOPIC_OR_PARTITION when its topic is gone (the coordinator takes that as
  done, as Kafka drops such a partition); anything else is worth a retry
  (NOT_LEADER_OR_FOLLOWER while no leader is known or leadership moved,
  NETWORK_EXCEPTION or REQUEST_TIMED_OUT when a leader did not answer).

Not thread-safe: the event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

from pybroker._native.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    encode_control_batch,
    read_batch_header,
)
from pybroker.coordinator.offset_store import OFFSETS_TOPIC
from pybroker.errors import (
    ErrorCode,
    KafkaError,
)
from pybroker.log.log import AppendInfo
from pybroker.repl.peer import Peers
from pybroker.txn.state import TopicPartition, partitions_by_topic

if TYPE_CHECKING:
    from pybroker.broker.broker import Broker
    from pybroker.metadata import Endpoint

log = logging.getLogger("pybroker.txn")

WRITE_TXN_MARKERS = 27
WRITE_TXN_MARKERS_VERSION = 1
# Kafka appends markers with request.timeout.ms (30 s) as the wait for the ISR.
MARKER_TIMEOUT_S = 30.0

# the coordinator's way to write a transaction's markers (``MarkerWriter.write``)
MarkerWrite = Callable[["TxnMarker"], Awaitable[dict[TopicPartition, ErrorCode]]]


class TxnMarker(NamedTuple):
    """A transaction's end, to write to each of ``partitions``."""

    producer_id: int
    producer_epoch: int
    commit: bool  # False: abort
    coordinator_epoch: int
    partitions: frozenset[TopicPartition]


async def append_markers(broker: Broker, marker: TxnMarker, timeout_s: float = MARKER_TIMEOUT_S
                         ) -> dict[TopicPartition, ErrorCode]:
    """Write ``marker`` to its partitions, which this broker should lead (module doc)."""
    codes = await asyncio.gather(*(_append_marker(broker, marker, topic, index, timeout_s)
                                   for topic, index in marker.partitions))
    return dict(zip(marker.partitions, codes, strict=True))


async def _append_marker(broker: Broker, marker: TxnMarker, topic: str, index: int,
                         timeout_s: float) -> ErrorCode:
    try:
        partition = broker.topics.leader_for_write(topic, index, True,
                                                   broker.metadata.partition_exists)
        if topic == OFFSETS_TOPIC and \
                broker.group_coordinator.offsets_partition_error(index) != ErrorCode.NONE:
            # Its groups are loading (or leaving): a marker now would not reach the pending
            # offsets the load is rebuilding. Kafka tells the coordinator to retry thus.
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        batch = bytearray(encode_control_batch(
            marker.producer_id, marker.producer_epoch,
            CONTROL_COMMIT if marker.commit else CONTROL_ABORT, marker.coordinator_epoch))
        appended = partition.append(memoryview(batch), read_batch_header(batch))
        if not isinstance(appended, AppendInfo):
            appended = await appended
    except KafkaError as exc:
        return exc.code
    code = ErrorCode(await partition.wait_for_high_watermark(appended.last_offset + 1,
                                                             timeout_s))
    if code == ErrorCode.NONE and topic == OFFSETS_TOPIC:
        broker.group_coordinator.complete_transaction(index, marker.producer_id, marker.commit)
    return code


class MarkerWriter:
    """Writes markers for the transaction coordinator, wherever their partitions are led
    (module doc). ``peers``: its connections to the other brokers (the broker's other
    requests to them may share them); ``close`` closes them."""

    def __init__(self, broker: Broker, timeout_s: float = MARKER_TIMEOUT_S) -> None:
        self._broker = broker
        self._timeout_s = timeout_s
        self.peers = Peers(f"pybroker-broker-{broker.broker_id}")

    async def write(self, marker: TxnMarker) -> dict[TopicPartition, ErrorCode]:
        """Each partition's error code once its marker is replicated, or why not."""
        metadata = self._broker.metadata
        results: dict[TopicPartition, ErrorCode] = {}
        local: set[TopicPartition] = set()
        remote: dict[Endpoint, set[TopicPartition]] = {}
        for tp in marker.partitions:
            leader = metadata.leader_of(*tp)
            if leader is None:
                results[tp] = ErrorCode.NOT_LEADER_OR_FOLLOWER \
                    if metadata.partition_exists(*tp) else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif leader.broker_id == self._broker.broker_id:
                local.add(tp)
            else:
                remote.setdefault(leader, set()).add(tp)
        writes = [append_markers(self._broker, marker._replace(partitions=frozenset(local)),
                                 self._timeout_s)] if local else []
        writes.extend(self._send(leader, marker._replace(partitions=frozenset(tps)))
                      for leader, tps in remote.items())
        for written in await asyncio.gather(*writes):
            results.update(written)
        return results

    async def _send(self, leader: Endpoint, marker: TxnMarker
                    ) -> dict[TopicPartition, ErrorCode]:
        """WriteTxnMarkers for ``marker`` to the broker leading its partitions."""
        try:
            response, _ = await self.peers.client(*leader).request(
                WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, request_body([marker]),
                self._timeout_s + 5)
        except TimeoutError:
            return dict.fromkeys(marker.partitions, ErrorCode.REQUEST_TIMED_OUT)
        except (OSError, EOFError, KafkaError) as exc:
            log.warning("WriteTxnMarkers to broker %d failed: %s", leader.broker_id, exc)
            return dict.fromkeys(marker.partitions, ErrorCode.NETWORK_EXCEPTION)
        answered = {(t["name"], p["partition_index"]): ErrorCode(p["error_code"])
                    for m in response["markers"] for t in m["topics"]
                    for p in t["partitions"]}
        # a partition the answer does not name was not written
        return {tp: answered.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in marker.partitions}

    async def close(self) -> None:
        self.peers.close()


def request_body(markers: Iterable[TxnMarker]) -> dict:
    """A WriteTxnMarkers request's body (v0-1) naming ``markers``."""
    return {"markers": [{
        "producer_id": m.producer_id, "producer_epoch": m.producer_epoch,
        "transaction_result": m.commit, "coordinator_epoch": m.coordinator_epoch,
        "topics": [{"name": topic, "partition_indexes": indexes}
                   for topic, indexes in partitions_by_topic(m.partitions).items()]}
        for m in markers]}


"""Read a partition range into Arrow columns (the Spark reader's data path).

Fetch responses are decoded by the native ``RecordColumns`` straight into Arrow buffers;
Python only loops per fetch response, never per record.

``isolation_level=READ_COMMITTED`` reads as Kafka's read_committed consumer: the broker
answers up to the last stable offset with the aborted transactions of the range, whose
batches ``RecordColumns.add_batches`` leaves out per batch; control batches (transaction
markers) never yield rows in either level.
"""

from __future__ import annotations

from collections.abc import Iterator

from pybroker._native.columns import RecordColumns, fetched_end
from pybroker.client.cluster import READ_UNCOMMITTED, Cluster
from pybroker.errors import ErrorCode, KafkaError

FETCH, FETCH_VERSION = 1, 11


class Fetcher:
    """Thread safety: one thread per fetcher."""

    def __init__(self, cluster: Cluster, max_bytes: int = 32 << 20,
                 partition_max_bytes: int = 8 << 20, max_wait_ms: int = 500,
                 isolation_level: int = READ_UNCOMMITTED) -> None:
        self.cluster = cluster
        self.isolation_level = isolation_level
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.max_wait_ms = max_wait_ms

    def _send(self, topic: str, partition: int, offset: int, min_bytes: int = 1
              ) -> int:
        """Send one Fetch from ``offset``; returns the leader it went to."""
        leader = self.cluster.topic(topic).leaders[partition]
        body = {
            "replica_id": -1, "max_wait_ms": self.max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": self.max_bytes, "isolation_level": self.isolation_level, "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{
                "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                "log_start_offset": -1, "partition_max_bytes": self.partition_max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": "",
        }
        self.cluster.connection(leader).send(FETCH, FETCH_VERSION, body)
        return leader

    def _receive(self, leader: int, topic: str, partition: int, offset: int) -> dict | None:
        """The partition's answer to the Fetch sent to ``leader``; None after a retriable
        error (metadata refreshed: fetch again)."""
        response = self.cluster.connection(leader).receive()[1]
        if response["error_code"] != ErrorCode.NONE:
            raise KafkaError("fetch refused", response["error_code"])
        p = response["responses"][0]["partitions"][0]
        if p["error_code"] != ErrorCode.NONE:
            if ErrorCode(p["error_code"]).retriable:
                self.cluster.refresh([topic])
                return None
            raise KafkaError(f"fetch {topic}-{partition}@{offset}", p["error_code"])
        return p

    def _add(self, p: dict, columns: RecordColumns, offset: int,
             end_offset: int | None) -> int:
        """Append the answer's records to ``columns``; returns the next offset to fetch."""
        records = p["records"]
        if records is None or len(records) == 0:
            return offset
        aborted = [(a["producer_id"], a["first_offset"])
                   for a in p["aborted_transactions"] or ()]
        next_offset = columns.add_batches(records, offset, end_offset, aborted)
        return offset if next_offset < 0 else next_offset

    def _readable(self, p: dict) -> int:
        return p["last_stable_offset"] if self.isolation_level else p["high_watermark"]

    def fetch_once(self, topic: str, partition: int, offset: int,
                   columns: RecordColumns, end_offset: int | None = None,
                   min_bytes: int = 1) -> tuple[int, int]:
        """One Fetch from ``offset``; appends records to ``columns``.

        Returns (next offset to fetch, high watermark, or for READ_COMMITTED the last
        stable offset: how far a read can get now). The next offset stays at
        ``offset`` when nothing new arrived within max_wait_ms.
        """
        leader = self._send(topic, partition, offset, min_bytes)
        p = self._receive(leader, topic, partition, offset)
        if p is None:
            return offset, -1
        return self._add(p, columns, offset, end_offset), self._readable(p)

    def read_range(self, topic: str, partition: int, start: int, end: int,
                   rows_per_chunk: int = 1 << 20) -> Iterator[dict]:
        """Arrow columns of offsets [start, end), in chunks of about rows_per_chunk.

        The next Fetch is sent before the records of the last one are decoded (its offset
        comes from the batch headers alone, ``fetched_end``), so the broker reads and
        sends while this thread decodes: one fetch's round trip less per fetch."""
        offset = start
        columns = RecordColumns()
        leader: int | None = self._send(topic, partition, offset)
        try:
            while leader is not None:
                p = self._receive(leader, topic, partition, offset)
                leader = None
                if p is None:
                    leader = self._send(topic, partition, offset)
                    continue
                records = p["records"]
                ahead = offset if records is None else max(offset, fetched_end(records))
                if ahead < end:
                    leader = self._send(topic, partition, ahead)
                self._add(p, columns, offset, end)
                offset = ahead
                if len(columns) >= rows_per_chunk:
                    yield columns.to_arrow()
            if len(columns):
                yield columns.to_arrow()
        finally:
            if leader is not None:  # a Fetch left unanswered: its answer must not be
                self.cluster.drop_connection(leader)  # read as another request's

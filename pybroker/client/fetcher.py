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

from pybroker._native.columns import RecordColumns
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

    def fetch_once(self, topic: str, partition: int, offset: int,
                   columns: RecordColumns, end_offset: int | None = None,
                   min_bytes: int = 1) -> tuple[int, int]:
        """One Fetch from ``offset``; appends records to ``columns``.

        Returns (next offset to fetch, high watermark, or for READ_COMMITTED the last
        stable offset: how far a read can get now). The next offset stays at
        ``offset`` when nothing new arrived within max_wait_ms.
        """
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
        response = self.cluster.connection(leader).request(FETCH, FETCH_VERSION, body)
        if response["error_code"] != ErrorCode.NONE:
            raise KafkaError("fetch refused", response["error_code"])
        p = response["responses"][0]["partitions"][0]
        if p["error_code"] != ErrorCode.NONE:
            if ErrorCode(p["error_code"]).retriable:
                self.cluster.refresh([topic])
                return offset, -1
            raise KafkaError(f"fetch {topic}-{partition}@{offset}", p["error_code"])
        readable = p["last_stable_offset"] if self.isolation_level else p["high_watermark"]
        records = p["records"]
        if records is None or len(records) == 0:
            return offset, readable
        aborted = [(a["producer_id"], a["first_offset"])
                   for a in p["aborted_transactions"] or ()]
        next_offset = columns.add_batches(records, offset, end_offset, aborted)
        return (offset if next_offset < 0 else next_offset), readable

    def read_range(self, topic: str, partition: int, start: int, end: int,
                   rows_per_chunk: int = 1 << 20) -> Iterator[dict]:
        """Arrow columns of offsets [start, end), in chunks of about rows_per_chunk."""
        offset = start
        columns = RecordColumns()
        while offset < end:
            offset, _ = self.fetch_once(topic, partition, offset, columns, end)
            if len(columns) >= rows_per_chunk:
                yield columns.to_arrow()
                columns = RecordColumns()
        if len(columns):
            yield columns.to_arrow()

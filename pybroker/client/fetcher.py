"""Read a partition range into Arrow columns (the Spark reader's data path).

Fetch responses are decoded by the native ``RecordColumns`` straight into Arrow buffers;
Python only loops per fetch response, never per record.
"""

from __future__ import annotations

from collections.abc import Iterator

from pybroker._native.columns import RecordColumns
from pybroker.client.cluster import Cluster
from pybroker.errors import ErrorCode, KafkaError

FETCH, FETCH_VERSION = 1, 11


class Fetcher:
    """Thread safety: one thread per fetcher."""

    def __init__(self, cluster: Cluster, max_bytes: int = 32 << 20,
                 partition_max_bytes: int = 8 << 20, max_wait_ms: int = 500) -> None:
        self.cluster = cluster
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.max_wait_ms = max_wait_ms

    def fetch_once(self, topic: str, partition: int, offset: int,
                   columns: RecordColumns, end_offset: int | None = None,
                   min_bytes: int = 1) -> tuple[int, int]:
        """One Fetch from ``offset``; appends records to ``columns``.

        Returns (next offset to fetch, high watermark). The next offset stays at
        ``offset`` when nothing new arrived within max_wait_ms.
        """
        leader = self.cluster.topic(topic).leaders[partition]
        body = {
            "replica_id": -1, "max_wait_ms": self.max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": self.max_bytes, "isolation_level": 0, "session_id": 0,
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
        records = p["records"]
        if records is None or len(records) == 0:
            return offset, p["high_watermark"]
        next_offset = columns.add_batches(records, offset, end_offset)
        return (offset if next_offset < 0 else next_offset), p["high_watermark"]

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

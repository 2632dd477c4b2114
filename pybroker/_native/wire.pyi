"""Type stub of pybroker._native.wire: Produce parse and build, Fetch build fast paths."""

import uuid
from collections.abc import Sequence

from typing_extensions import Buffer

from pybroker.file_region import FileRegion

_Records = Buffer | FileRegion | Sequence[Buffer | FileRegion] | None
# KIP-951: (leader_id, leader_epoch) of a partition, and (node_id, host, port, rack)
CurrentLeader = tuple[int, int]
NodeEndpoint = tuple[int, str, int, str | None]
_FetchPartition = tuple[int, int, int, int, int, Sequence[tuple[int, int]] | None, _Records,
                        CurrentLeader | None]
# (batch_index, batch_index_error_message), KIP-467
RecordError = tuple[int, str | None]
ProducePartition = tuple[int, int, int, int, int, str | None, Sequence[RecordError] | None,
                         CurrentLeader | None]

PRODUCE_NODE_ENDPOINTS_FIRST: int
FETCH_NODE_ENDPOINTS_FIRST: int

def parse_produce(
    buf: Buffer, offset: int, version: int
) -> tuple[str | None, int, int, list[tuple[str, list[tuple[int, memoryview | None]]]]]: ...
def build_fetch(
    version: int,
    correlation_id: int,
    throttle_time_ms: int,
    error_code: int,
    session_id: int,
    topics: list[tuple[str | uuid.UUID | bytes, list[_FetchPartition]]],
    node_endpoints: Sequence[NodeEndpoint] | None = None,
) -> tuple[list[bytes | FileRegion], int]: ...
def build_produce_response(
    version: int,
    correlation_id: int,
    throttle_time_ms: int,
    topics: list[tuple[str, list[ProducePartition]]],
    node_endpoints: Sequence[NodeEndpoint] | None = None,
) -> bytes: ...
def read_uvarint(buf: Buffer, pos: int, end: int) -> tuple[int, int]: ...

"""Type stub of pybroker._native.wire: Produce parse and build, Fetch build fast paths."""

import uuid
from collections.abc import Sequence

from typing_extensions import Buffer

from pybroker.file_region import FileRegion

_Records = Buffer | FileRegion | Sequence[Buffer | FileRegion] | None
_FetchPartition = tuple[int, int, int, int, int, Sequence[tuple[int, int]] | None, _Records]

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
) -> tuple[list[bytes | FileRegion], int]: ...
def build_produce_response(
    version: int,
    correlation_id: int,
    throttle_time_ms: int,
    topics: list[tuple[str, list[tuple[int, int, int, int, int, str | None]]]],
) -> bytes: ...
def read_uvarint(buf: Buffer, pos: int, end: int) -> tuple[int, int]: ...

from typing import NamedTuple, Self

from typing_extensions import Buffer, disjoint_base

HEADER_SIZE: int
MAX_DECOMPRESSED_SIZE: int

class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]

@disjoint_base
class BatchInfo:
    @property
    def base_offset(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def partition_leader_epoch(self) -> int: ...
    @property
    def magic(self) -> int: ...
    @property
    def crc(self) -> int: ...
    @property
    def attributes(self) -> int: ...
    @property
    def compression(self) -> int: ...
    @property
    def timestamp_type(self) -> int: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def is_control(self) -> bool: ...
    @property
    def last_offset_delta(self) -> int: ...
    @property
    def first_timestamp(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def base_sequence(self) -> int: ...
    @property
    def records_count(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def control_type(self) -> int: ...
    @property
    def coordinator_epoch(self) -> int: ...

@disjoint_base
class ScanResult:
    @property
    def valid_end(self) -> int: ...
    @property
    def next_offset(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def offset_of_max_timestamp(self) -> int: ...
    @property
    def batch_count(self) -> int: ...
    @property
    def offset_index(self) -> bytes: ...
    @property
    def time_index(self) -> bytes: ...
    @property
    def error(self) -> str | None: ...

# (offsets, data[, validity[, validity_offset]]) of an Arrow binary array.
Column = (
    tuple[Buffer, Buffer]
    | tuple[Buffer, Buffer, Buffer | None]
    | tuple[Buffer, Buffer, Buffer | None, int]
)

@disjoint_base
class RecordWalker:
    def __new__(cls, count: int, keys_required: bool = False) -> Self: ...
    @property
    def position(self) -> int: ...
    @property
    def keyless(self) -> list[int]: ...
    def feed(self, piece: Buffer) -> None: ...
    def finish(self) -> None: ...

def validate_batch(
    buf: Buffer, max_decompressed_size: int = ..., keyless_error: str | None = None
) -> BatchInfo: ...
def read_batch_header(buf: Buffer, position: int = 0) -> BatchInfo: ...
def stamp_batch(
    buf: Buffer,
    position: int,
    base_offset: int,
    partition_leader_epoch: int,
    log_append_time: int = -1,
) -> None: ...
def scan_log(
    buf: Buffer, start: int, end: int, base_offset: int, index_interval_bytes: int
) -> ScanResult: ...
def find_position(
    buf: Buffer, start: int, end: int, target_offset: int
) -> tuple[int, BatchInfo] | None: ...
def producer_batches(buf: Buffer, min_offset: int) -> tuple[list[BatchInfo], int]: ...
def find_timestamp(
    buf: Buffer, start: int, end: int, target_ts: int, max_decompressed_size: int = ...
) -> tuple[int, int, int] | None: ...
CONTROL_ABORT: int
CONTROL_COMMIT: int

def encode_control_batch(
    producer_id: int,
    producer_epoch: int,
    control_type: int,
    coordinator_epoch: int,
    timestamp: int = -1,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes: ...
def decode_records(batch_buf: Buffer, max_decompressed_size: int = ...) -> list[Record]: ...
def encode_batch_columns(
    count: int,
    values: Column,
    keys: Column | None = None,
    timestamps: Buffer | None = None,
    headers: tuple[Buffer, Column, Column] | None = None,
    *,
    rows: Buffer | None = None,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: int = 0,
    transactional: bool = False,
    partition_leader_epoch: int = -1,
) -> bytes: ...

@disjoint_base
class BatchBuilder:
    def __new__(cls, buffer: bytearray, limit: int) -> Self: ...
    @property
    def count(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def buffer(self) -> bytearray: ...
    def append(
        self,
        count: int,
        values: Column,
        keys: Column | None = None,
        timestamps: Buffer | None = None,
        headers: tuple[Buffer, Column, Column] | None = None,
        *,
        rows: Buffer | None = None,
    ) -> int: ...
    def finish(
        self,
        *,
        base_offset: int = 0,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        compression: int = 0,
        transactional: bool = False,
        partition_leader_epoch: int = -1,
    ) -> memoryview | bytes: ...

def encode_batch(
    values: list[bytes | None],
    keys: list[bytes | None] | None = None,
    timestamps: list[int] | None = None,
    headers: list[list[tuple[str | bytes, bytes | None]]] | None = None,
    *,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: int = 0,
    transactional: bool = False,
    partition_leader_epoch: int = -1,
) -> bytes: ...

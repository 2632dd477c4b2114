"""Batches for the log tests, built by an oracle nobody here wrote (kafka-python's
pure-Python record codec), and readers that fetch what a FileRegion names."""

from __future__ import annotations

import os

from kafka.record.default_records import DefaultRecordBatchBuilder

from pybroker._native.records import (
    encode_batch,
    encode_control_batch,
    read_batch_header,
    validate_batch,
)


def make_batch(count: int = 3, value_size: int = 100, timestamp: int = 1_000,
               timestamps: list[int] | None = None, tag: int = 0) -> bytearray:
    """A producer's batch (base offset 0) of ``count`` records; value bytes carry ``tag``."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=2**30)
    for i in range(count):
        ts = timestamps[i] if timestamps else timestamp + i
        value = (f"{tag}:{i}:".encode() + b"v" * value_size)[:max(value_size, 8)]
        builder.append(i, timestamp=ts, key=f"k{i}".encode(), value=value, headers=[])
    return bytearray(builder.build())


def append(log, batch: bytearray, **kwargs):
    """Validate ``batch`` as the produce handler does, then append it."""
    return log.append(batch, validate_batch(batch), **kwargs)


def region_bytes(result) -> bytes:
    """The bytes a ReadResult's regions name, read with pread (as sendfile would send)."""
    return b"".join(os.pread(r.fd, r.length, r.position) for r in result.regions)


def read_all(log, start: int | None = None, chunk: int = 1 << 20) -> bytes:
    """Everything from ``start`` (default: log start) to the end, in reads of ``chunk``."""
    offset = log.log_start_offset if start is None else start
    out = []
    from pybroker._native.records import scan_log
    while offset < log.log_end_offset:
        data = region_bytes(log.read(offset, chunk))
        assert data, f"empty read at {offset} below end {log.log_end_offset}"
        scan = scan_log(data, 0, len(data), 0, 2**31 - 1)
        assert scan.valid_end == len(data), scan.error
        out.append(data)
        offset = scan.next_offset
    return b"".join(out)


class TransactionWriter:
    """Appends to a log as a leader would: data batches of producers (transactional or
    not, sequences counted per producer) and the coordinator's markers."""

    def __init__(self, plog) -> None:
        self.plog = plog
        self.sequences: dict[int, int] = {}

    def data(self, producer_id: int = -1, count: int = 2, transactional: bool = False,
             values: list[bytes] | None = None, keys: list[bytes] | None = None) -> int:
        values = values or [b"v%d" % i for i in range(count)]
        sequence = -1
        if producer_id >= 0:
            sequence = self.sequences.get(producer_id, 0)
            self.sequences[producer_id] = sequence + len(values)
        return self._append(encode_batch(values, keys, producer_id=producer_id, producer_epoch=0,
                                         base_sequence=sequence, transactional=transactional))

    def marker(self, producer_id: int, control_type: int) -> int:
        return self._append(encode_control_batch(producer_id, 0, control_type, 1))

    def _append(self, data: bytes) -> int:
        batch = bytearray(data)
        info = self.plog.append(batch, read_batch_header(batch))
        self.plog.high_watermark = self.plog.log_end_offset
        return info.base_offset

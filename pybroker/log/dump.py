"""Print what a segment file holds, one line per batch (like Kafka's DumpLogSegments).

    pybroker log dump PATH [PATH ...]        (a partition directory: all its .log files)
    python -m pybroker.log.dump PATH [PATH ...]

For a ``.log`` file, each batch: position, size, base and last offset, record count,
first and max timestamp (and type), compression, producer id/epoch/sequence, leader
epoch, transactional/control flags, CRC valid or not. What the log cleaner leaves shows
too: a batch it emptied but kept (the last batch of an idempotent producer, so its
sequence numbers go on, or of a cleaning round, so the log end stays) is ``empty``
(``count: 0``); a batch holding tombstones it cleaned once carries its delete horizon
(KIP-534: attribute bit 6, the horizon in place of the first timestamp; its tombstones go
at the first cleaning after it), printed as ``deleteHorizonMs`` instead of
``firstTimestamp``. With ``--records`` each record follows its batch (offset, timestamp,
key, value, headers; Kafka's ``--print-data-log``), a tombstone (null value) marked
``tombstone``. ``.index`` and ``.timeindex`` files print their entries; a producer
``.snapshot`` its producers, each with its cached batches (like Kafka's tool on its
snapshot files); a ``.txnindex`` its aborted transactions. Exit status: 0 all good, 1 corruption or a torn tail (the line says
where and why), 2 a file cannot be read.

Validation is one native ``scan_log`` over the file (CRC of every batch); the per-batch
lines come from header reads and the records from ``decode_records``, Python loops that
are fine for a tool.
"""

from __future__ import annotations

import argparse
import mmap
import os
import struct
import sys

from pybroker._native.records import HEADER_SIZE, decode_records, read_batch_header, scan_log
from pybroker.cli import escape_controls
from pybroker.errors import KafkaError

_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
# attributes bit 6: firstTimestamp is the delete horizon (csrc/pb_cleaner.h)
DELETE_HORIZON_FLAG = 0x40


def _base_offset(path: str) -> int:
    stem = os.path.basename(path).split(".")[0]
    return int(stem) if stem.isdigit() else 0


def dump_log(path: str, out, records: bool = False) -> bool:
    """Print the batches (``records``: and their records) of one ``.log`` file; True if it
    is entirely valid."""
    base = _base_offset(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        print(f"Dumping {path} ({size} bytes, base offset {base})", file=out)
        if size == 0:
            return True
        buf = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
    try:
        scan = scan_log(buf, 0, size, base, 2**31 - 1)
        position = 0
        unreadable = 0  # batches whose CRC holds but whose records do not decode
        while position < scan.valid_end:
            info = read_batch_header(buf, position)
            print(_batch_line(position, info, "valid"), file=out)
            if records and info.records_count and \
                    not _dump_records(buf[position:position + info.size], out):
                unreadable += 1
            position += info.size
        if scan.valid_end == size and not unreadable:
            print(f"OK: {scan.batch_count} batches, offsets {base}..{scan.next_offset - 1}",
                  file=out)
            return True
        if unreadable:
            print(f"CORRUPT: the records of {unreadable} batches cannot be read", file=out)
        if scan.valid_end == size:
            return False
        if size - position >= HEADER_SIZE:
            info = read_batch_header(buf, position)
            print(_batch_line(position, info, "INVALID"), file=out)
        print(f"CORRUPT at position {scan.valid_end}: {scan.error} "
              f"({size - scan.valid_end} bytes after the last valid batch)", file=out)
        return False
    finally:
        buf.close()


def _batch_line(position: int, info, crc: str) -> str:
    ts_type = "LogAppendTime" if info.timestamp_type else "CreateTime"
    codec = _CODECS[info.compression] if info.compression < len(_CODECS) else info.compression
    flags = "".join((" transactional" if info.is_transactional else "",
                     " control" if info.is_control else "",
                     " empty" if info.records_count == 0 else ""))
    first = "deleteHorizonMs" if info.attributes & DELETE_HORIZON_FLAG else "firstTimestamp"
    return (f"position: {position} size: {info.size} baseOffset: {info.base_offset} "
            f"lastOffset: {info.last_offset} count: {info.records_count} "
            f"{first}: {info.first_timestamp} maxTimestamp: {info.max_timestamp} "
            f"{ts_type} compression: {codec} producerId: {info.producer_id} "
            f"producerEpoch: {info.producer_epoch} baseSequence: {info.base_sequence} "
            f"partitionLeaderEpoch: {info.partition_leader_epoch}{flags} "
            f"crc: {info.crc} {crc}")


def _dump_records(batch: bytes, out) -> bool:
    """One ``| offset: ...`` line per record of ``batch``; False if they cannot be read."""
    try:
        decoded = decode_records(batch)
    except (KafkaError, MemoryError) as exc:
        print(f"| CORRUPT records: {exc}", file=out)
        return False
    for record in decoded:
        value = "tombstone" if record.value is None else f"value: {_text(record.value)}"
        headers = "".join(f" {escape_controls(key)}={_text(header)}"
                          for key, header in record.headers)
        print(f"| offset: {record.offset} timestamp: {record.timestamp} "
              f"key: {_text(record.key)} {value}{' headers:' + headers if headers else ''}",
              file=out)
    return True


def _text(data: bytes | None) -> str:
    """Bytes as text a terminal shows safely: UTF-8 where it is, escapes elsewhere."""
    if data is None:
        return "null"
    return escape_controls(data.decode("utf-8", "backslashreplace"))


def dump_index(path: str, out) -> bool:
    """Print the entries of an ``.index`` or ``.timeindex`` file; True if well formed."""
    base = _base_offset(path)
    time_index = path.endswith(".timeindex")
    entry = struct.Struct(">qI" if time_index else ">II")
    with open(path, "rb") as f:
        data = f.read()
    print(f"Dumping {path} ({len(data)} bytes, base offset {base})", file=out)
    usable = len(data) - len(data) % entry.size
    previous = None
    good = usable == len(data)
    for first, second in entry.iter_unpack(data[:usable]):
        if time_index:
            key, line = first, f"timestamp: {first} offset: {base + second}"
        else:
            key, line = first, f"offset: {base + first} position: {second}"
        if previous is not None and key <= previous:
            line += "  OUT OF ORDER"
            good = False
        previous = key
        print(line, file=out)
    if usable != len(data):
        print(f"CORRUPT: {len(data) - usable} trailing bytes, not a whole entry", file=out)
    return good


def dump_snapshot(path: str, out) -> bool:
    """Print the producers of a ``.snapshot`` file; True if it reads back whole."""
    from pybroker.log.producer_state import CorruptSnapshotError, decode_snapshot

    offset = _base_offset(path)
    with open(path, "rb") as f:
        data = f.read()
    print(f"Dumping {path} ({len(data)} bytes, producer state below offset {offset})",
          file=out)
    try:
        producers = decode_snapshot(data, offset)
    except CorruptSnapshotError as exc:
        print(f"CORRUPT: {exc}", file=out)
        return False
    for producer_id, entry in sorted(producers.items()):
        batches = " ".join(f"[seq {b.first_seq}-{b.last_seq} offsets {b.first_offset}-"
                           f"{b.last_offset} timestamp {b.timestamp}]" for b in entry.batches)
        print(f"producerId: {producer_id} producerEpoch: {entry.epoch} "
              f"coordinatorEpoch: {entry.coordinator_epoch} lastAppendMs: {entry.last_ms} "
              f"currentTxnFirstOffset: {entry.txn_first_offset} batches: {batches}", file=out)
    print(f"OK: {len(producers)} producers", file=out)
    return True


def dump_txnindex(path: str, out) -> bool:
    """Print the aborted transactions of a ``.txnindex`` file; True if it reads whole."""
    from pybroker.log.transaction_index import ENTRY

    with open(path, "rb") as f:
        data = f.read()
    print(f"Dumping {path} ({len(data) // ENTRY.size} aborted transactions)", file=out)
    whole = len(data) - len(data) % ENTRY.size
    for version, producer_id, first, last, stable in ENTRY.iter_unpack(data[:whole]):
        print(f"version: {version} producerId: {producer_id} firstOffset: {first} "
              f"lastOffset: {last} lastStableOffset: {stable}", file=out)
    if whole != len(data):
        print(f"CORRUPT: {len(data) - whole} trailing bytes, not a whole entry", file=out)
        return False
    return True


def _expand(paths: list[str]) -> list[str]:
    """A partition directory stands for its ``.log`` files, in offset order."""
    out = []
    for path in paths:
        if os.path.isdir(path):
            out += sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".log"))
        else:
            out.append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pybroker log dump",
                                     description="Print the batches of log segment files.")
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help=".log, .index, .timeindex, .txnindex or .snapshot file, or a "
                             "partition "
                             "directory")
    parser.add_argument("--records", "-r", action="store_true",
                        help="each record too (Kafka's --print-data-log), tombstones marked")
    args = parser.parse_args(argv)
    status = 0
    for path in _expand(args.paths):
        try:
            if path.endswith((".index", ".timeindex")):
                good = dump_index(path, sys.stdout)
            elif path.endswith(".snapshot"):
                good = dump_snapshot(path, sys.stdout)
            elif path.endswith(".txnindex"):
                good = dump_txnindex(path, sys.stdout)
            else:
                good = dump_log(path, sys.stdout, args.records)
        except OSError as exc:
            print(f"{path}: {exc.strerror or exc}", file=sys.stderr)
            status = 2
            continue
        if not good:
            status = max(status, 1)
    return status


if __name__ == "__main__":
    sys.exit(main())

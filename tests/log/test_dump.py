"""The dump tool as people run it (a real process): lines per batch, exit codes."""

from __future__ import annotations

import os
import subprocess
import sys

from pybroker._native.cleaner import OffsetMap
from pybroker._native.records import encode_batch
from pybroker.log.log import Log
from pybroker.log.log_config import LogConfig
from tests.log.helpers import append, make_batch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=60)


def make_log(path) -> Log:
    log = Log(str(path), LogConfig.from_properties({"index.interval.bytes": 100}))
    for i in range(5):
        append(log, make_batch(count=2, timestamp=1000 * i, tag=i), leader_epoch=4)
    return log


def test_dump_prints_every_batch_and_exits_zero(tmp_path):
    log = make_log(tmp_path / "t-0")
    segment = log.segments.active.path(".log")
    log.close()
    done = run("-m", "pybroker.log.dump", segment)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("position:")]
    assert len(lines) == 5
    assert "baseOffset: 2 lastOffset: 3 count: 2" in lines[1]
    assert "firstTimestamp: 1000 maxTimestamp: 1001 CreateTime compression: none" in lines[1]
    assert "producerId: -1" in lines[1] and "partitionLeaderEpoch: 4" in lines[1]
    assert all(line.endswith("valid") for line in lines)
    # the CLI entry point, on the partition directory, and the index files
    done = run("-m", "pybroker", "log", "dump", str(tmp_path / "t-0"))
    assert done.returncode == 0 and done.stdout.count("position:") == 5, done.stderr
    done = run("-m", "pybroker.log.dump", segment[:-4] + ".index", segment[:-4] + ".timeindex")
    assert done.returncode == 0 and "offset: " in done.stdout


def test_dump_exits_non_zero_on_corruption_and_torn_tail(tmp_path):
    log = make_log(tmp_path / "t-0")
    segment = log.segments.active.path(".log")
    log.close()
    size = os.path.getsize(segment)
    with open(segment, "r+b") as f:  # flip a byte in the third batch's records
        f.seek(size * 2 // 5 + 70)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 1]))
    done = run("-m", "pybroker.log.dump", segment)
    assert done.returncode == 1
    assert "INVALID" in done.stdout and "CORRUPT at position" in done.stdout
    assert done.stdout.count("valid\n") == 2  # the two batches before it
    os.truncate(segment, size - 10)
    with open(segment, "r+b") as f:  # undo the flip: now only the tail is torn
        f.seek(size * 2 // 5 + 70)
        f.write(byte)
    done = run("-m", "pybroker.log.dump", segment)
    assert done.returncode == 1 and "CORRUPT at position" in done.stdout
    assert done.stdout.count("valid\n") == 4
    assert run("-m", "pybroker.log.dump", str(tmp_path / "missing.log")).returncode == 2


def test_dump_shows_what_the_cleaner_leaves(tmp_path):
    # producer 7's batch: both records superseded, kept empty as its last batch; then an
    # update of "a" and a tombstone of "b", which gets its delete horizon (now + retention)
    data = encode_batch([b"a1", b"b1"], [b"a", b"b"], [10, 11], producer_id=7,
                        producer_epoch=0, base_sequence=0)
    data += encode_batch([b"a\x1b2", None], [b"a", b"b"], [20, 21], base_offset=2)
    offsets = OffsetMap(1 << 20)
    offsets.add_batches(data, 0)
    cleaned = offsets.clean_batches(data, 1_000, 500, {7: 1}, 4).data
    segment = tmp_path / ("0" * 20 + ".log")
    segment.write_bytes(cleaned)
    done = run("-m", "pybroker", "log", "dump", "-r", str(segment))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()[1:]
    assert "baseOffset: 0 lastOffset: 1 count: 0 firstTimestamp: 11 " in lines[0]
    assert "producerId: 7 " in lines[0] and " empty crc:" in lines[0]
    assert "baseOffset: 2 lastOffset: 3 count: 2 deleteHorizonMs: 1500 maxTimestamp: 21 " \
        in lines[1] and " empty " not in lines[1]
    assert lines[2:4] == ["| offset: 2 timestamp: 20 key: a value: a\\x1b2",
                          "| offset: 3 timestamp: 21 key: b tombstone"]
    assert lines[4].startswith("OK: 2 batches")
    plain = run("-m", "pybroker.log.dump", str(segment))
    assert "| offset" not in plain.stdout and plain.stdout.count("position:") == 2

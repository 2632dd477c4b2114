"""Crash safety with real processes: a writer is SIGKILLed at random points; on reopen
every acknowledged batch is readable with the right contents, nothing torn remains, and
no index entry points past its segment. Then torn and corrupt tails made on purpose."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

from pybroker._native.records import decode_records, scan_log
from pybroker.log.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from tests.log.crash_writer import CONFIG, RECORDS, expected_value
from tests.log.helpers import read_all

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_writer_until_killed(data_dir: str, rnd: random.Random) -> int:
    """Start the writer, let it append for a random while, SIGKILL it; returns the last
    acknowledged offset (-1 if none)."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "tests.log.crash_writer", data_dir],
                            stdout=subprocess.PIPE, cwd=ROOT, env=env)
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith(b"ready")
    time.sleep(rnd.uniform(0.01, 0.25))
    proc.send_signal(signal.SIGKILL)
    out = proc.stdout.read()
    proc.wait()
    acks = out.split()
    # the last line may itself be cut by the kill
    return int(acks[-2]) if len(acks) >= 2 else -1


def check_log(data_dir: str, last_acked: int) -> int:
    """Reopen (unclean: recovery runs) and check everything; returns the end offset."""
    assert not os.path.exists(os.path.join(data_dir, CLEAN_SHUTDOWN_FILE))
    manager = LogManager(data_dir)
    manager.load(lambda topic: CONFIG)
    log = manager.get("crash", 0)
    assert log is not None
    assert log.log_end_offset > last_acked, "an acknowledged batch was lost"
    assert log.log_end_offset % RECORDS == 0, "a batch was cut"
    data = read_all(log)
    scan = scan_log(data, 0, len(data), 0, 2**31 - 1)
    assert scan.valid_end == len(data) and scan.next_offset == log.log_end_offset
    # contents: batch i holds expected_value(i, 0..2) at offsets 3i..3i+2
    position = 0
    batch_no = 0
    while position < len(data):
        size = int.from_bytes(data[position + 8:position + 12], "big") + 12
        records = decode_records(data[position:position + size])
        assert [r.offset for r in records] == [batch_no * RECORDS + j for j in range(RECORDS)]
        assert [r.value for r in records] == [expected_value(batch_no, j) for j in range(RECORDS)]
        position += size
        batch_no += 1
    for segment in log.segments:
        index = segment.offset_index
        for slot in range(index.entries):
            relative, pos = index.entry(slot)
            assert pos < segment.size and segment.base_offset + relative < segment.next_offset
        times = segment.time_index
        for slot in range(times.entries):
            assert segment.base_offset + times.entry(slot)[1] < segment.next_offset
    end = log.log_end_offset
    manager.close(clean=False)
    return end


def test_sigkill_at_random_points(tmp_path):
    rnd = random.Random(int(os.environ.get("PYBROKER_CRASH_SEED", "20261121")))
    data_dir = str(tmp_path / "data")
    for _ in range(6):
        last_acked = run_writer_until_killed(data_dir, rnd)
        check_log(data_dir, last_acked)
    manager = LogManager(data_dir)
    manager.load(lambda topic: CONFIG)
    assert len(manager.get("crash", 0).segments) > 1, "the writer should have rolled"
    manager.close()


def _last_segment(data_dir: str) -> str:
    directory = os.path.join(data_dir, "crash-0")
    return os.path.join(directory, max(n for n in os.listdir(directory) if n.endswith(".log")))


def test_torn_and_corrupt_tails_are_truncated(tmp_path):
    rnd = random.Random(7)
    data_dir = str(tmp_path / "data")
    while True:  # until the last segment holds at least three batches
        end = check_log(data_dir, run_writer_until_killed(data_dir, rnd))
        tail = _last_segment(data_dir)
        with open(tail, "rb") as f:
            data = f.read()
        if scan_log(data, 0, len(data), int(os.path.basename(tail)[:20]), 4096).batch_count >= 3:
            break
    # a torn tail: the last batch without its last bytes
    os.truncate(tail, os.path.getsize(tail) - 5)
    end_after_tear = check_log(data_dir, -1)
    assert end_after_tear == end - RECORDS
    # a flipped byte inside the (new) last batch: that batch goes, the rest stays
    size = os.path.getsize(tail)
    with open(tail, "r+b") as f:
        f.seek(size - 3)
        byte = f.read(1)
        f.seek(size - 3)
        f.write(bytes([byte[0] ^ 0x40]))
    assert check_log(data_dir, -1) == end_after_tear - RECORDS

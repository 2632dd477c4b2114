"""The log cleaner through the CLI, on a compacted topic a real broker cleans: ``topic
describe --data-dir`` shows the checkpoint and dirty ratio the broker wrote to its stats
file; ``log dump -r`` prints exactly the records a consumer reads, tombstones marked, with
the empty batch kept for an idempotent producer and the delete horizon of cleaned
tombstones."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

from confluent_kafka import Producer

from tests.admin.clients import unique
from tests.broker.test_compaction import (
    TIMEOUT,
    TOPIC_CONFIG,
    consume,
    produce_changelog,
    wait_cleaned,
)
from tests.cli.test_cli import ROOT, pybroker

CLEANER_HEADER = ["PARTITION", "BROKER", "CLEANED-UP-TO", "DIRTY-RATIO", "AS-OF"]
RECORD_LINE = re.compile(r"\| offset: (\d+) timestamp: -?\d+ key: (\S+) "
                         r"(?:tombstone|value: (\S*))(?: headers: .*)?$")


def cleaner_rows(target, topic: str, *args: str) -> list[list[str]]:
    """The rows of ``topic describe``'s cleaner table (``target``: what has ``.bootstrap``)."""
    lines = pybroker(target, "topic", "describe", topic, *args).stdout.decode().splitlines()
    split = [line.split() for line in lines]
    start = split.index(CLEANER_HEADER) + 1
    return split[start:split.index([], start)]


def wait_rows(target, topic: str, data_dirs: list[str], done) -> list[list[str]]:
    """The cleaner rows once ``done(rows)``: a broker's stats file follows its state every
    stats.interval.ms."""
    args = [arg for data_dir in data_dirs for arg in ("--data-dir", data_dir)]
    deadline = time.monotonic() + TIMEOUT
    while True:
        rows = cleaner_rows(target, topic, *args)
        if done(rows):
            return rows
        assert time.monotonic() < deadline, rows
        time.sleep(0.1)


def dump(path: str) -> str:
    done = subprocess.run([sys.executable, "-m", "pybroker", "log", "dump", "-r", path],
                          capture_output=True, text=True, cwd=ROOT, timeout=TIMEOUT,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_describe_and_dump_show_the_cleaners_work(broker_factory):
    broker = broker_factory(log_cleaner_backoff_ms=100, stats_interval_ms=100)
    topic = unique("cli-clean")
    pybroker(broker, "topic", "create", topic, "-p", "1",
             *[arg for key, value in TOPIC_CONFIG.items() for arg in ("-c", f"{key}={value}")])
    # one idempotent producer's only batch, every record of it superseded below: the
    # cleaner keeps it as an empty batch
    early = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                      "linger.ms": 50})
    for i in range(20):
        early.produce(topic, b"early", key=b"key-%02d" % i, partition=0)
    assert early.flush(TIMEOUT) == 0
    roll = produce_changelog(broker.bootstrap, topic, 1500)[-1][0]
    end = wait_cleaned(broker.data_dir, topic, roll)

    assert any(line.startswith("CLEANER  (with --data-dir")
               for line in pybroker(broker, "topic", "describe", topic).stdout.decode()
               .splitlines())
    [row] = wait_rows(broker, topic, [broker.data_dir], lambda rows: rows[0][2] == str(end))
    assert row[:2] == ["0", "0"]  # partition 0 on broker 0
    assert row[3] == "0.000"  # cleaned up to the active segment: nothing dirty

    out = dump(os.path.join(broker.data_dir, f"{topic}-0"))
    read = {offset: (key, value) for offset, key, value, _ in consume(broker.bootstrap,
                                                                       topic, roll + 1)}
    dumped = {}
    for match in filter(None, map(RECORD_LINE.match, out.splitlines())):
        value = match[3]
        dumped[int(match[1])] = (match[2].encode(), None if value is None else value.encode())
    assert dumped == read
    assert any(value is None for _, value in read.values())
    batches = [line for line in out.splitlines() if line.startswith("position:")]
    assert "baseOffset: 0 lastOffset: 19 count: 0 " in batches[0]
    assert " empty crc:" in batches[0] and "producerId: -1 " not in batches[0]
    horizons = [int(m[1]) for m in map(re.compile(r".* deleteHorizonMs: (\d+) ").match,
                                       batches) if m]
    assert horizons and min(horizons) > time.time() * 1000  # delete.retention.ms: a day

    # with the cleaner off, new segments stay dirty: the checkpoint stays, the ratio grows
    broker.settings["log.cleaner.enable"] = False
    broker.restart()
    produce_changelog(broker.bootstrap, topic, 300)
    [row] = wait_rows(broker, topic, [broker.data_dir],
                       lambda rows: rows[0][3] != "-" and float(rows[0][3]) > 0)
    assert row[2] == str(end) and float(row[3]) < 1

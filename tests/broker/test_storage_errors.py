"""Storage errors are visible: a write the file system refuses (here a file size limit,
RLIMIT_FSIZE, which refuses writes as a full disk does but needs no privilege or mount) is
answered KAFKA_STORAGE_ERROR, logged once per partition per minute with its errno text and
the count of refusals since the last line, and shown as the partition's error in Metadata
and so in ``pybroker topic describe`` until a write succeeds again. librdkafka keeps the
partition and delivers once the writes succeed again."""

from __future__ import annotations

import logging
import os
import re
import resource
import subprocess
import sys
import textwrap
import time
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from pybroker._native.records import encode_batch
from pybroker.errors import ErrorCode
from tests.admin.clients import unique
from tests.broker.wire_client import WireClient, produce_body

PRODUCE, METADATA, CREATE_TOPICS = 0, 3, 19
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def produce(client: WireClient, topic: str, partition: int, value: bytes) -> int:
    answer = client.request(PRODUCE, 9, produce_body(topic, partition, encode_batch([value])))
    return answer["responses"][0]["partition_responses"][0]["error_code"]


def partition_errors(client: WireClient, topic: str) -> list[int]:
    answer = client.request(METADATA, 12, {"topics": [{"name": topic}],
                                          "allow_auto_topic_creation": False})
    return [p["error_code"] for p in sorted(answer["topics"][0]["partitions"],
                                            key=lambda p: p["partition_index"])]


def segment_size(broker: Any, topic: str, partition: int) -> int:
    return os.path.getsize(os.path.join(broker.data_dir, f"{topic}-{partition}",
                                        f"{0:020d}.log"))


def test_refused_writes_are_logged_once_and_shown_until_a_write_succeeds(broker: Any) -> None:
    name = unique("full")
    with WireClient(broker.bootstrap) as client:
        client.request(CREATE_TOPICS, 7, {"topics": [
            {"name": name, "num_partitions": 2, "replication_factor": -1, "assignments": [],
             "configs": []}], "timeout_ms": 60000, "validate_only": False})
        for partition in (0, 1):  # segments larger than any other file the broker writes
            for _ in range(3):
                assert produce(client, name, partition, b"x" * 500_000) == ErrorCode.NONE
        # the limit lies inside the next append: a short write, then EFBIG
        limit = max(segment_size(broker, name, p) for p in (0, 1)) + 100
        soft, hard = resource.prlimit(broker.pid, resource.RLIMIT_FSIZE)
        resource.prlimit(broker.pid, resource.RLIMIT_FSIZE, (limit, hard))
        try:
            for _ in range(5):
                for partition in (0, 1):
                    assert produce(client, name, partition, b"y" * 1000) == \
                        ErrorCode.KAFKA_STORAGE_ERROR
            lines = [line for line in broker.log_text().splitlines() if "write failed" in line]
            assert len(lines) == 2, lines  # one per partition, not one per refusal
            for partition, line in zip((0, 1), sorted(lines), strict=True):
                assert f"{name}-{partition}: write failed" in line
                assert "WARNING" in line and "File too large" in line
            assert partition_errors(client, name) == [ErrorCode.KAFKA_STORAGE_ERROR] * 2

            described = subprocess.run(
                [sys.executable, "-m", "pybroker", "topic", "describe", name, "--bootstrap",
                 broker.bootstrap], capture_output=True, text=True, timeout=60, cwd=ROOT)
            assert described.returncode == 0, described.stderr
            rows = [line.split() for line in described.stdout.splitlines()
                    if re.match(r"\s*[01]\s", line)]
            assert [row[-1] for row in rows] == ["KAFKA_STORAGE_ERROR"] * 2, described.stdout
            assert "refused writes" in described.stdout

            # librdkafka keeps the partition through the error and retries
            librdkafka = _Messages()
            delivered: list[Any] = []
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                                 "debug": "msg", "logger": librdkafka.logger})
            for i in range(5):
                producer.produce(name, b"kept %d" % i, partition=0,
                                 on_delivery=lambda err, msg: delivered.append(err))
            deadline = time.monotonic() + 60
            while not librdkafka.saw("Disk error") and time.monotonic() < deadline:
                producer.poll(0.1)
            assert librdkafka.saw("Disk error")
            assert delivered == []
            assert AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(
                name, timeout=30).topics[name].partitions[0].error.code() == \
                ErrorCode.KAFKA_STORAGE_ERROR
        finally:
            resource.prlimit(broker.pid, resource.RLIMIT_FSIZE, (soft, hard))
        assert producer.flush(60) == 0
        assert delivered == [None] * 5
        assert produce(client, name, 1, b"z") == ErrorCode.NONE
        # written again: partition 1 is no longer reported; partition 0 neither (librdkafka
        # delivered there)
        assert partition_errors(client, name) == [ErrorCode.NONE] * 2


class _Messages(logging.Handler):
    """librdkafka's log lines (routed through ``poll``), kept to look for one."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.logger = logging.getLogger(f"librdkafka-{id(self)}")
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def saw(self, text: str) -> bool:
        return any(text in line for line in self.lines)


def test_one_line_a_minute_counts_the_refusals_between(tmp_path: Any) -> None:
    """The log's own clock drives the interval; the file size limit is set in a child
    process (it would limit this one's files too)."""
    script = textwrap.dedent(f"""
        import logging, resource, sys
        from pybroker.errors import KafkaStorageError
        from pybroker.log.log import Log
        from tests.log.helpers import append, make_batch
        logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="%(message)s")
        now = [1000.0]
        log = Log({str(tmp_path / "t-0")!r}, clock=lambda: now[0])
        append(log, make_batch(tag=0))
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (log.size() + 10, hard))

        def refused(at, times):
            now[0] = at
            for _ in range(times):
                try:
                    append(log, make_batch(tag=1))
                except KafkaStorageError as exc:
                    assert "File too large" in str(exc), exc
                else:
                    raise AssertionError("appended past the limit")

        refused(1000.0, 5)   # one line, four refusals unreported
        refused(1030.0, 2)   # within the minute: none
        print("failing", log.failing_writes())
        refused(1061.0, 1)   # a minute after the first line: a line with the six
        print("failing", log.failing_writes(1061.0 + 59), log.failing_writes(1061.0 + 61))
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        append(log, make_batch(tag=2))
        print("failing", log.failing_writes())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "t-0: write failed, refusing the append: File too large (errno 27)",
        "failing True",
        "t-0: write failed, refusing the append: File too large (errno 27); 6 more refused "
        "since the last report",
        "failing True False",
        "failing False",
    ]

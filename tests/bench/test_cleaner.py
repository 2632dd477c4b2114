"""bench/cleaner.py end to end against pybroker alone, in its smallest mode (a few MB,
one round): the report is complete, the cleaner cleaned the data set to its active
segments and compacted it, and W2 delivered everything to both topics (never the speed).
And the parsing of Kafka's log-cleaner.log, on lines as Kafka 4.1 writes them."""

from __future__ import annotations

import json
import sys

from bench.cleaner import kafka_rounds, pybroker_rounds
from tests.bench import run_from_root

W2_MESSAGES = 20_000


def test_one_small_round_against_pybroker(tmp_path):
    done = run_from_root(
        [sys.executable, "-m", "bench.cleaner", "--rounds", "1", "--brokers", "pybroker",
         "--mb", "4", "--keys", "200", "--segment-mib", "1", "--w2-messages",
         str(W2_MESSAGES), "--timeout", "120", "--out", str(tmp_path)], timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    result = json.loads((tmp_path / "result.json").read_text())
    (figures,) = [r["pybroker"] for r in result["rounds"]]
    cleaner = figures["cleaner"]
    assert cleaner["rounds"] >= 1 and cleaner["seconds"] > 0 and cleaner["mb_s"] > 0
    # 3 of the 4 MB were in sealed 1 MiB segments; 200 keys survive of ~15,000 records
    assert cleaner["bytes_read"] >= 2 << 20
    assert 0 < cleaner["bytes_written"] < cleaner["bytes_read"] / 10
    for policy in ("compact", "delete"):
        w2 = figures["w2"][policy]
        assert w2["messages"] == w2["delivered"] == W2_MESSAGES, policy
        assert w2["mb_s"] > 0, policy
    assert figures["w2"]["delete"]["cleaner_rounds_during"] == 0
    assert figures["w2"]["compact"]["catch_up_s"] is not None  # cleaned to its active segments
    table = (tmp_path / "result.md").read_text()
    assert table == result["table"] + "\n"
    assert "| W2 compacted / delete | " in table and "| pybroker >= 0.90 |" in table


def test_pybroker_round_line():
    line = ("2026-11-26T02:00:00.123 INFO pybroker.log.cleaner clean-r1-0: cleaned offsets "
            "[0, 15000): 200 keys, 3145728 bytes -> 52000 in 0.041 s (76.7 MB/s)\n")
    (found,) = pybroker_rounds(line)
    assert (found.topic, found.partition, found.end) == ("clean-r1", 0, 15000)
    assert (found.bytes_read, found.bytes_written, found.seconds) == (3145728, 52000, 0.041)


# Kafka 4.1's log-cleaner.log, verbatim but for the long lines of one round left out.
KAFKA_LOG = """\
[2026-11-26 02:15:43,972] INFO Starting the log cleaner (org.apache.kafka.storage.internals.log.LogCleaner)
[2026-11-26 02:15:45,678] INFO Cleaner 0: Beginning cleaning of log clean-r1-1 (org.apache.kafka.storage.internals.log.Cleaner)
[2026-11-26 02:15:45,678] INFO Cleaner 0: Building offset map for clean-r1-1... (org.apache.kafka.storage.internals.log.Cleaner)
[2026-11-26 02:15:45,823] INFO Cleaner 0: Swapping in cleaned segment LogSegment(baseOffset=0, size=13595, lastModifiedTime=1795659345354, largestRecordTimestamp=1795659345006) for segment(s) [LogSegment(baseOffset=0, size=471677, lastModifiedTime=1795659345354, largestRecordTimestamp=1795659345006), LogSegment(baseOffset=1783, size=1000, lastModifiedTime=1795659345354, largestRecordTimestamp=1795659345006)] in log Log(dir=/tmp/hostile-kafka-ccj3ukjj/data/clean-r1-1, topicId=yU5-SdJXSfiTb05KUJo9yQ, topic=clean-r1, partition=1, highWatermark=5562, lastStableOffset=5562, logStartOffset=0, logEndOffset=5562) (org.apache.kafka.storage.internals.log.Cleaner)
[2026-11-26 02:15:45,824] INFO Cleaner 0: Swapping in cleaned segment LogSegment(baseOffset=1790, size=5, lastModifiedTime=1795659345354, largestRecordTimestamp=1795659345006) for segment(s) [LogSegment(baseOffset=1790, size=20, lastModifiedTime=1795659345354, largestRecordTimestamp=1795659345006)] in log Log(dir=/tmp/hostile-kafka-ccj3ukjj/data/clean-r1-1, topicId=yU5-SdJXSfiTb05KUJo9yQ, topic=clean-r1, partition=1, highWatermark=5562, lastStableOffset=5562, logStartOffset=0, logEndOffset=5562) (org.apache.kafka.storage.internals.log.Cleaner)
[2026-11-26 02:15:45,844] INFO [kafka-log-cleaner-thread-0]: \n\
\tLog cleaner thread 0 cleaned log clean-r1-1 (dirty section = [0, 1783])
\t0.4 MB of log processed in 0.1 seconds (3.0 MB/sec).
\tIndexed 0.4 MB in 0.1 seconds (6.5 Mb/sec, 46.6% of total time)
\tBuffer utilization: 0.0%
\tCleaned 0.4 MB in 0.1 seconds (5.7 Mb/sec, 53.4% of total time)
\tStart size: 0.4 MB (1,783 messages)
\tEnd size: 0.0 MB (50 messages)
\t97.1% size reduction (97.2% fewer messages)
 (org.apache.kafka.storage.internals.log.LogCleaner$CleanerThread)
[2026-11-26 02:15:45,856] INFO Cleaner 0: Beginning cleaning of log clean-r1-0 (org.apache.kafka.storage.internals.log.Cleaner)
"""


def test_kafka_rounds_from_its_log_cleaner_log():
    (found,) = kafka_rounds(KAFKA_LOG)  # clean-r1-0's round has not ended
    assert (found.topic, found.partition, found.end) == ("clean-r1", 1, 1783)
    assert (found.bytes_read, found.bytes_written) == (471677 + 1000 + 20, 13595 + 5)
    assert abs(found.seconds - 0.166) < 1e-6

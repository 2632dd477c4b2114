"""Log compaction seen by real clients: a keyed changelog with updates and tombstones on a
compacted topic, cleaned by the broker's cleaner thread, read back with confluent-kafka;
SIGKILL at the cleaner's crash points (``PYBROKER_CLEANER_CRASH_AT``) then restart;
consumers reading while a throttled cleaner swaps segments under them; and a
transactional producer's committed and aborted updates, read by both isolation levels.

After cleaning, the topic holds the latest record of each key below the cleaned offset
(tombstones included: they stay ``delete.retention.ms``) and every record above it, each
at its original offset with its original value and headers. After a crash the log is
the old one or the cleaned one: never a record that was not written, never a lost latest
record, offsets increasing.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from pybroker._native.records import HEADER_SIZE, encode_batch, read_batch_header
from pybroker.log.checkpoints import read_offsets
from pybroker.log.log_cleaner import CHECKPOINT_FILE, CRASH_ENV
from tests.admin.clients import create_topic, unique
from tests.broker.test_restart import stored_idempotent_batches
from tests.broker.wire_client import WireClient, produce_body

TIMEOUT = 60.0
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "4096", "segment.ms": "300",
                "min.cleanable.dirty.ratio": "0.01"}

Record = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]


def produce_changelog(bootstrap: str, topic: str, count: int) -> list[Record]:
    """Updates of 20 keys, every 37th a tombstone (and one key's last), then (after
    segment.ms) one more record so the segment holding the changelog rolls and becomes
    cleanable."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "enable.idempotence": True})
    written: list[Record] = []

    def report(err, msg) -> None:
        assert err is None, err
        # (delivery reports carry no headers: each record's one header is its number)
        headers = [("n", b"%d" % len(written))] if msg.key() != b"roll" else []
        written.append((msg.offset(), msg.key(), msg.value(), headers))

    for i in range(count):
        value = None if i % 37 == 36 or i == count - 15 else b"value-%05d" % i
        producer.produce(topic, value, key=b"key-%02d" % (i % 20), partition=0,
                         headers=[("n", b"%d" % i)], on_delivery=report)
        if i % 100 == 99:
            producer.flush(TIMEOUT)  # several batches, several segments
    producer.flush(TIMEOUT)
    time.sleep(0.4)  # past segment.ms: the next append rolls the segment
    producer.produce(topic, b"last", key=b"roll", partition=0, on_delivery=report)
    assert producer.flush(TIMEOUT) == 0
    return sorted(written, key=lambda r: r[0])


def consume(bootstrap: str, topic: str, end: int,
            isolation: str = "read_uncommitted") -> list[Record]:
    """Every record of partition 0 up to ``end`` (tombstones included)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g"),
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out: list[Record] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while (not out or out[-1][0] < end - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append((msg.offset(), msg.key(), msg.value(), msg.headers() or []))
    finally:
        consumer.close()
    return out


def consume_kafka_python(bootstrap: str, topic: str, end: int) -> list[Record]:
    """``consume`` with kafka-python's own record codec."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    consumer.assign([KafkaTopicPartition(topic, 0)])
    out: list[Record] = []
    try:
        for msg in consumer:
            out.append((msg.offset, msg.key, msg.value, list(msg.headers)))
            if msg.offset >= end - 1:
                break
    finally:
        consumer.close()
    return out


def cleaned_up_to(data_dir: str, topic: str) -> int:
    return read_offsets(os.path.join(data_dir, CHECKPOINT_FILE)).get((topic, 0), -1)


def wait_cleaned(data_dir: str, topic: str, offset: int) -> int:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        done = cleaned_up_to(data_dir, topic)
        if done >= offset:
            return done
        time.sleep(0.1)
    raise AssertionError(f"{topic} not cleaned up to {offset}")


def model(written: list[Record], end: int) -> list[Record]:
    latest = {r[1]: r[0] for r in written if r[0] < end}
    return [r for r in written if r[0] >= end or latest[r[1]] == r[0]]


def assert_consistent(got: list[Record], written: list[Record]) -> None:
    """What a crash may leave: a subsequence of what was written holding every latest
    record of each key."""
    by_offset = {r[0]: r for r in written}
    assert [r[0] for r in got] == sorted({r[0] for r in got})
    assert all(by_offset[r[0]] == r for r in got)
    offsets = {r[0] for r in got}
    assert all(r[0] in offsets for r in model(written, written[-1][0] + 1))


def test_changelog_keeps_the_last_value_of_each_key(broker_factory):
    broker = broker_factory(log_cleaner_backoff_ms=100)
    topic = unique("changelog")
    create_topic(broker.bootstrap, topic, config=TOPIC_CONFIG)
    # a first idempotent producer's only batch: every record of it is superseded below,
    # and the cleaner keeps it as an empty batch (its producer state), which consumers skip
    early = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                      "linger.ms": 50})
    for i in range(20):
        early.produce(topic, b"early", key=b"key-%02d" % i, partition=0)
    assert early.flush(TIMEOUT) == 0
    written = [(i, b"key-%02d" % i, b"early", []) for i in range(20)]
    written += produce_changelog(broker.bootstrap, topic, 1500)
    roll = written[-1][0]
    end = wait_cleaned(broker.data_dir, topic, roll)
    got = consume(broker.bootstrap, topic, roll + 1)
    assert got == model(written, end)
    assert consume_kafka_python(broker.bootstrap, topic, roll + 1) == got
    assert len(got) < len(written) / 10
    assert any(value is None for _, _, value, _ in got)  # tombstones stay a day
    with open(os.path.join(broker.data_dir, f"{topic}-0", "0" * 20 + ".log"), "rb") as f:
        first = read_batch_header(f.read(HEADER_SIZE))
    assert (first.last_offset, first.records_count) == (19, 0) and first.producer_id >= 0


def test_transactions_of_a_real_producer_after_cleaning(broker_factory):
    """A transactional producer (confluent-kafka, through the coordinator) updates ten
    keys in transactions, every other one aborted after its records were written: once
    cleaned, no aborted record is left for either isolation level and every key reads
    its last committed value."""
    broker = broker_factory(log_cleaner_backoff_ms=100)
    topic = unique("txn-changelog")
    create_topic(broker.bootstrap, topic, config=TOPIC_CONFIG)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                         "transactional.id": unique("tx")})
    producer.init_transactions(TIMEOUT)
    committed: dict[bytes, bytes] = {}
    aborted: set[bytes] = set()
    offsets: list[int] = []

    def report(err, msg) -> None:
        if err is None:
            offsets.append(msg.offset())

    for t in range(8):
        producer.begin_transaction()
        records = [(b"key-%02d" % (i % 10), b"txn%d-%d" % (t, i)) for i in range(30)]
        for key, value in records:
            producer.produce(topic, value, key=key, partition=0, on_delivery=report)
        assert producer.flush(TIMEOUT) == 0  # in the log before the marker
        if t % 2:
            producer.abort_transaction(TIMEOUT)
            aborted.update(value for _, value in records)
        else:
            producer.commit_transaction(TIMEOUT)
            committed.update(records)
    time.sleep(0.4)  # past segment.ms: the next append rolls the segment
    producer.begin_transaction()
    producer.produce(topic, b"last", key=b"roll", partition=0, on_delivery=report)
    producer.commit_transaction(TIMEOUT)
    committed[b"roll"] = b"last"
    roll = offsets[-1]
    wait_cleaned(broker.data_dir, topic, roll)
    for isolation in ("read_committed", "read_uncommitted"):
        got = consume(broker.bootstrap, topic, roll + 1, isolation)
        assert got[-1][0] == roll
        assert not [r for r in got if r[2] in aborted]
        assert {key: value for _, key, value, _ in got} == committed
        assert len(got) < len(offsets) / 2


@pytest.mark.parametrize("point", ["cleaned", "swapped"])
def test_sigkill_in_cleaning_then_restart(broker_factory, point):
    broker = broker_factory(log_cleaner_enable=False)
    topic = unique("crash")
    create_topic(broker.bootstrap, topic, config=TOPIC_CONFIG)
    written = produce_changelog(broker.bootstrap, topic, 1500)
    roll = written[-1][0]
    broker.stop()
    broker.settings.update({"log.cleaner.enable": True, "log.cleaner.backoff.ms": 100})
    broker.env[CRASH_ENV] = point
    try:
        broker.start()
    except RuntimeError:
        pass  # killed before it said it was ready
    assert broker.proc is not None
    assert broker.proc.wait(TIMEOUT) == -9
    broker.proc = None
    assert f"crash point {point}" in broker.log_text()
    del broker.env[CRASH_ENV]
    broker.settings["log.cleaner.enable"] = False
    broker.start()
    assert_consistent(consume(broker.bootstrap, topic, roll + 1), written)
    broker.stop()
    broker.settings["log.cleaner.enable"] = True
    broker.start()
    end = wait_cleaned(broker.data_dir, topic, roll)
    assert consume(broker.bootstrap, topic, roll + 1) == model(written, end)


def test_consumers_reading_during_cleaning_see_written_records_in_order(broker_factory):
    broker = broker_factory(log_cleaner_enable=False)
    topic = unique("reading")
    create_topic(broker.bootstrap, topic, config={**TOPIC_CONFIG, "file.delete.delay.ms": "0"})
    written = produce_changelog(broker.bootstrap, topic, 3000)
    roll = written[-1][0]
    by_offset = {r[0]: r for r in written}
    broker.settings.update({"log.cleaner.enable": True, "log.cleaner.backoff.ms": 100,
                            "log.cleaner.io.max.bytes.per.second": 30_000})
    broker.restart()
    passes = 0
    while cleaned_up_to(broker.data_dir, topic) < roll or passes < 2:
        got = consume(broker.bootstrap, topic, roll + 1)
        assert [r[0] for r in got] == sorted({r[0] for r in got})
        assert all(by_offset[r[0]] == r for r in got)
        assert all(r[0] in {g[0] for g in got} for r in model(written, roll + 1))
        passes += 1
        assert passes < 100, "not cleaned"
    assert consume(broker.bootstrap, topic, roll + 1) == \
        model(written, cleaned_up_to(broker.data_dir, topic))


def test_an_idempotent_retry_is_recognised_after_cleaning_and_a_crash(broker_factory):
    """An idempotent producer's updates are cleaned away (all but its last batch, which the
    cleaner keeps for its producer state), the broker is SIGKILLed and restarted: a retry
    of that last batch still gets its original offset, nothing is appended, and the
    producer goes on in sequence."""
    broker = broker_factory(log_cleaner_backoff_ms=100)
    topic = unique("idem-clean")
    create_topic(broker.bootstrap, topic, config=TOPIC_CONFIG)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    for i in range(400):
        producer.produce(topic, b"v%03d" % i, key=b"k%d" % (i % 5), partition=0)
        if i % 50 == 49:
            assert producer.flush(TIMEOUT) == 0
    last_offset, last_batch = stored_idempotent_batches(broker.data_dir, topic)[-1]
    time.sleep(0.4)  # past segment.ms: the roll record seals the producer's last segment
    with WireClient(broker.bootstrap) as client:
        rolled = client.request(0, 9, produce_body(topic, 0, encode_batch([b"r"], keys=[b"roll"])))
        roll = rolled["responses"][0]["partition_responses"][0]["base_offset"]
    wait_cleaned(broker.data_dir, topic, roll)
    assert len(stored_idempotent_batches(broker.data_dir, topic)) < 8  # cleaned: 400 records, 5 keys
    broker.restart(signal.SIGKILL)
    with WireClient(broker.bootstrap) as client:
        retried = client.request(0, 9, produce_body(topic, 0, last_batch))
        answer = retried["responses"][0]["partition_responses"][0]
        assert (answer["error_code"], answer["base_offset"]) == (0, last_offset)
        end = client.request(2, 1, {"replica_id": -1, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "timestamp": -1}]}]})
    assert end["topics"][0]["partitions"][0]["offset"] == roll + 1  # not appended again
    for i in range(400, 410):
        producer.produce(topic, b"v%03d" % i, key=b"k%d" % (i % 5), partition=0)
    assert producer.flush(TIMEOUT) == 0

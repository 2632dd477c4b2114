"""Transactions on a broker's partitions, read by consumers: Fetch with read_committed
(isolation level 1) stops at the last stable offset and lists the aborted transactions,
which confluent-kafka's read_committed consumer skips; ListOffsets answers the last stable
offset for read_committed; the log cleaner removes aborted records from a compacted topic
without a committed one lost. The partition is written with the log API while the broker
is stopped, so that every case (an open transaction below others, a crash that lost the
index, a cleaning) is laid out exactly: the batches and markers a leader and the
transaction coordinator would append. tests/txn/ has the same written by real clients."""

from __future__ import annotations

import os
import signal
import uuid

import pytest

from pybroker._native.records import CONTROL_ABORT, CONTROL_COMMIT, encode_batch
from pybroker.log.log import Log
from pybroker.log.log_config import LogConfig
from tests.admin.clients import create_topic, unique
from tests.broker.test_compaction import consume, wait_cleaned
from tests.broker.test_restart import consume_all
from tests.broker.wire_client import WireClient, decode_all, fetch_body, produce_body
from tests.log.helpers import TransactionWriter

FETCH, LIST_OFFSETS, METADATA, PRODUCE = 1, 2, 3, 0


def _write_transactions(broker, topic: str) -> dict[str, int]:
    """A plain record, an aborted, a committed and an open transaction interleaved, then
    a plain record after the open one's start; the offsets of note."""
    with WireClient(broker.bootstrap) as client:
        client.request(METADATA, 9, {"topics": [{"name": topic}],
                                     "allow_auto_topic_creation": True})
        response = client.request(PRODUCE, 9, produce_body(topic, 0, encode_batch([b"plain-0"])))
        assert response["responses"][0]["partition_responses"][0]["error_code"] == 0
    broker.stop()
    plog = Log(os.path.join(broker.data_dir, f"{topic}-0"), high_watermark=1)
    w = TransactionWriter(plog)
    offsets = {"aborted": w.data(100, values=[b"aborted-0", b"aborted-1"], transactional=True)}
    w.data(101, values=[b"committed-0"], transactional=True)
    w.data(100, values=[b"aborted-2"], transactional=True)
    offsets["abort"] = w.marker(100, CONTROL_ABORT)
    w.data(101, values=[b"committed-1"], transactional=True)
    w.marker(101, CONTROL_COMMIT)
    offsets["open"] = w.data(102, values=[b"open-0"], transactional=True)
    w.data(values=[b"plain-1"])
    offsets["end"] = plog.log_end_offset
    plog.close()
    broker.start()
    return offsets


def _partition(response: dict) -> dict:
    return response["responses"][0]["partitions"][0]


@pytest.mark.parametrize("restart", ["clean", "crash", "crash-lost-files"])
def test_read_committed_sees_committed_records_up_to_the_open_transaction(broker, restart):
    """The open transaction and the aborted one survive a restart, even one that lost
    the index and the snapshots (unsynced at a power loss): rebuilt from the log."""
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    offsets = _write_transactions(broker, topic)
    broker.stop(signal.SIGTERM if restart == "clean" else signal.SIGKILL)
    if restart == "crash-lost-files":
        directory = os.path.join(broker.data_dir, f"{topic}-0")
        lost = [name for name in os.listdir(directory)
                if name.endswith((".txnindex", ".snapshot"))]
        assert any(name.endswith(".txnindex") for name in lost)
        for name in lost:
            os.unlink(os.path.join(directory, name))
    broker.start()
    with WireClient(broker.bootstrap) as client:
        committed = _partition(client.request(FETCH, 11, fetch_body(topic, 0, 0,
                                                                   isolation_level=1)))
        assert committed["error_code"] == 0
        assert committed["high_watermark"] == offsets["end"]
        assert committed["last_stable_offset"] == offsets["open"]
        assert committed["aborted_transactions"] == [
            {"producer_id": 100, "first_offset": offsets["aborted"]}]
        values = [r.value for r in decode_all(committed["records"])]
        assert b"open-0" not in values and b"plain-1" not in values
        assert b"committed-1" in values  # below the open one: the consumer filters aborts
        uncommitted = _partition(client.request(FETCH, 11, fetch_body(topic, 0, 0)))
        assert uncommitted["aborted_transactions"] is None
        assert [r.value for r in decode_all(uncommitted["records"])][-2:] == \
            [b"open-0", b"plain-1"]
        past_abort = _partition(client.request(FETCH, 11, fetch_body(
            topic, 0, offsets["abort"] + 1, isolation_level=1)))
        assert past_abort["aborted_transactions"] == []

        def latest(isolation: int) -> int:
            response = client.request(LIST_OFFSETS, 5, {
                "replica_id": -1, "isolation_level": isolation, "topics": [{
                    "name": topic, "partitions": [{"partition_index": 0, "timestamp": -1,
                                                   "current_leader_epoch": -1}]}]})
            return response["topics"][0]["partitions"][0]["offset"]

        assert latest(1) == offsets["open"] and latest(0) == offsets["end"]
    # the aborted records lie between these: skipped, not late
    assert consume_all(broker.bootstrap, topic, 3, 1, "read_committed") == [
        b"plain-0", b"committed-0", b"committed-1"]
    assert len(consume_all(broker.bootstrap, topic, 8, 1)) == 8


def test_read_committed_after_the_cleaner_removed_an_aborted_transaction(broker_factory):
    """An aborted update of a key that a committed transaction wrote: after cleaning, the
    aborted records are gone for every isolation level, the committed value is the
    key's, and the abort marker (kept until delete.retention.ms) still lists the
    transaction to read_committed fetches."""
    config = {"cleanup.policy": "compact", "segment.bytes": "1024",
              "min.cleanable.dirty.ratio": "0.01"}
    broker = broker_factory(log_cleaner_enable=False)
    topic = unique("txn-compacted")
    create_topic(broker.bootstrap, topic, config=config)
    broker.stop()
    plog = Log(os.path.join(broker.data_dir, f"{topic}-0"), LogConfig.from_properties(config))
    w = TransactionWriter(plog)
    committed = w.data(101, keys=[b"a", b"b"], values=[b"committed-a", b"committed-b"],
                       transactional=True)
    w.marker(101, CONTROL_COMMIT)
    aborted = w.data(100, keys=[b"a", b"c"], values=[b"aborted-a", b"aborted-c"],
                     transactional=True)
    w.marker(100, CONTROL_ABORT)
    for i in range(60):  # rolls segments: the transactions become cleanable
        w.data(keys=[b"f%d" % (i % 5)], values=[b"f%d" % i])
    end = plog.log_end_offset
    active = plog.segments.active.base_offset
    plog.close()
    broker.settings.update({"log.cleaner.enable": True, "log.cleaner.backoff.ms": 100})
    broker.start()
    wait_cleaned(broker.data_dir, topic, active)
    for isolation in ("read_committed", "read_uncommitted"):
        got = consume(broker.bootstrap, topic, end, isolation)
        assert got[-1][0] == end - 1
        assert not [r for r in got if r[2].startswith(b"aborted")]
        assert (committed, b"a", b"committed-a", []) in got
        assert (committed + 1, b"b", b"committed-b", []) in got
        assert len({r[0] for r in got}) == len(got) < end  # the obsolete ones went
    with WireClient(broker.bootstrap) as client:
        fetched = _partition(client.request(FETCH, 11, fetch_body(topic, 0, 0,
                                                                 isolation_level=1)))
        assert fetched["aborted_transactions"] == [
            {"producer_id": 100, "first_offset": aborted}]

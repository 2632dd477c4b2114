"""The broker's producer ids, and the broker-wide producer state file of earlier versions
(``producer-state.json``), adopted once on upgrade into per-partition snapshots."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid

from pybroker._native.records import encode_batch
from pybroker.broker.producer_ids import ProducerIdManager
from pybroker.errors import ErrorCode
from tests.broker.wire_client import WireClient, produce_body

PRODUCE, METADATA = 0, 3


def test_producer_ids_are_never_reused(tmp_path):
    first = ProducerIdManager(str(tmp_path), block_size=10)
    ids = [first.new_id() for _ in range(3)]
    second = ProducerIdManager(str(tmp_path), block_size=10)  # a crash: block not used up
    assert second.new_id() > max(ids)


def _produce(client: WireClient, topic: str, pid: int, seq: int) -> dict:
    batch = encode_batch([b"s%d" % (seq + i) for i in range(2)], producer_id=pid,
                         producer_epoch=0, base_sequence=seq)
    response = client.request(PRODUCE, 9, produce_body(topic, 0, batch))
    return response["responses"][0]["partition_responses"][0]


def test_the_broker_wide_file_of_earlier_versions_is_adopted_once(broker_factory):
    """A data dir as an earlier version left it: no snapshot files, and the file with
    each partition's producers at the log end. Producer 99 is in the file only (its
    batches went with retention, say): it is known after the upgrade, so its batch out
    of sequence is refused, where an unknown producer's would be accepted."""
    broker = broker_factory()
    topic = f"legacy-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.bootstrap) as client:
        client.request(METADATA, 9, {"topics": [{"name": topic}],
                                     "allow_auto_topic_creation": True})
        assert _produce(client, topic, 7, 0)["base_offset"] == 0
        assert _produce(client, topic, 7, 2)["base_offset"] == 2
    broker.stop(signal.SIGTERM)
    directory = os.path.join(broker.data_dir, f"{topic}-0")
    for name in os.listdir(directory):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(directory, name))
    now = int(time.time() * 1000)
    legacy = os.path.join(broker.data_dir, "producer-state.json")
    with open(legacy, "w") as f:
        json.dump({f"{topic}-0": {"offset": 2, "epoch": 0, "producers": {
            "7": {"epoch": 0, "last_ms": now, "batches": [[0, 1, 0, 1, -1]]},
            "99": {"epoch": 0, "last_ms": now, "batches": [[0, 0, 0, 0, -1]]}}}}, f)
    broker.start()
    assert not os.path.exists(legacy)
    assert "adopted the producer state of 1 partitions" in broker.log_text()
    assert f"{4:020d}.snapshot" in os.listdir(directory)
    with WireClient(broker.bootstrap) as client:
        assert _produce(client, topic, 99, 5)["error_code"] == \
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        retried = _produce(client, topic, 7, 2)  # replayed from the file's offset
        assert retried["error_code"] == 0 and retried["base_offset"] == 2
    broker.restart(signal.SIGKILL)  # adopted once: from now on the snapshots hold it
    with WireClient(broker.bootstrap) as client:
        assert _produce(client, topic, 99, 5)["error_code"] == \
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_torn_file_of_an_earlier_version_does_not_stop_the_start(broker_factory):
    broker = broker_factory()
    broker.stop(signal.SIGTERM)
    legacy = os.path.join(broker.data_dir, "producer-state.json")
    with open(legacy, "w") as f:
        f.write('{"t-0": {"offset": 4, "epo')
    broker.start()
    assert not os.path.exists(legacy)
    assert "producer-state.json is unreadable, not used" in broker.log_text()

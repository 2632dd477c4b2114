"""Replication quotas (KIP-73) between broker processes: a replica that was away catches
up no faster than the throttled rate lets it, while an unthrottled partition replicates
as usual; removing the rate lets it catch up without a restart; replicas in the ISR are
never held back by the leader, so acks=all producers keep working under a tiny rate.

"Does not catch up" is made independent of timing: the quota's samples last a minute,
so the one fetch a rate of 1 byte/s lets through takes it over for ten minutes (the
least time Kafka's rate is measured over), far longer than the test; a fetch carries at
most ``replica.fetch.max.bytes``, far less than the replica lacks.
"""

from __future__ import annotations

import glob
import os
import time

import pytest

from tests.admin.clients import produce, unique
from tests.cluster.harness import ContinuousProducer, LocalCluster

INCREMENTAL_ALTER_CONFIGS = 44
SET, DELETE = 0, 1
FETCH_MAX_BYTES = 16 * 1024
SETTINGS = {"replica.fetch.max.bytes": FETCH_MAX_BYTES,
            "replication.quota.window.size.seconds": 60}
RECORDS = 2000
WAIT = 90.0


def set_default(cluster: LocalCluster, key: str, value: str | None) -> None:
    """The cluster-wide default of a broker config (None: removed), through broker 1."""
    answer = cluster.request(1, INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": 4, "resource_name": "", "configs": [
            {"name": key, "value": value, "config_operation": SET if value is not None
             else DELETE}]}], "validate_only": False})
    (result,) = answer["responses"]
    assert result["error_code"] == 0, result


def log_bytes(cluster: LocalCluster, broker_id: int, topic: str) -> int:
    """Bytes in the segments of partition 0 of ``topic`` on ``broker_id``."""
    data = cluster.brokers[broker_id].data_dir
    return sum(os.path.getsize(path)
               for path in glob.glob(os.path.join(data, f"{topic}-0", "*.log")))


def isr(cluster: LocalCluster, topic: str) -> list[int]:
    return sorted(cluster.describe(topic, 1)[0].isr)


@pytest.mark.parametrize("side", ["leader", "follower"])
def test_a_returning_replica_catches_up_only_when_unthrottled(zk_connect, tmp_path, side):
    # the leader is broker 1, the returning follower broker 2: each side's list names
    # the broker whose side is throttled
    throttled_on = 1 if side == "leader" else 2
    with LocalCluster(zk_connect, tmp_path, size=2, settings=SETTINGS) as cluster:
        throttled, free = unique("thr-moved"), unique("thr-free")
        cluster.create_topic(throttled, assignment=[[1, 2]], configs={
            f"{side}.replication.throttled.replicas": f"0:{throttled_on}"})
        cluster.create_topic(free, assignment=[[1, 2]])
        assert cluster.stop(2) == 0
        for topic in (throttled, free):
            cluster.wait_for(lambda t=topic: isr(cluster, t) == [1], WAIT,
                             what=f"{topic}: broker 2 out of the ISR")
            produce(cluster.address(1), topic, [b"v" * 100] * RECORDS,
                    **{"batch.size": 4096, "acks": "1"})
        set_default(cluster, f"{side}.replication.throttled.rate", "1")

        cluster.restart(2)
        cluster.wait_for(lambda: isr(cluster, free) == [1, 2], WAIT,
                         what="the unthrottled partition back in sync")
        assert isr(cluster, throttled) == [1]
        behind = log_bytes(cluster, 2, throttled)
        assert behind < log_bytes(cluster, 1, throttled) - FETCH_MAX_BYTES

        set_default(cluster, f"{side}.replication.throttled.rate", None)
        cluster.wait_for(lambda: isr(cluster, throttled) == [1, 2], WAIT,
                         what="the throttled partition in sync once the rate is removed")
        assert log_bytes(cluster, 2, throttled) == log_bytes(cluster, 1, throttled)


def test_replicas_in_sync_are_not_held_back_by_the_leader(zk_connect, tmp_path):
    with LocalCluster(zk_connect, tmp_path, size=2, settings=SETTINGS) as cluster:
        topic = unique("thr-in-sync")
        cluster.create_topic(topic, assignment=[[1, 2]], configs={
            "leader.replication.throttled.replicas": "*", "min.insync.replicas": "2"})
        set_default(cluster, "leader.replication.throttled.rate", "1")
        producer = ContinuousProducer(cluster.address(1), topic, pause_s=0.001)
        producer.start()
        # longer than replica.lag.time.max.ms (3 s): a follower held back would leave the
        # ISR, and acks=all with min.insync.replicas=2 would then be refused
        time.sleep(8)
        producer.stop()
        assert producer.failed == [] and producer.fatal == []
        assert len(producer.acked) > 100
        assert isr(cluster, topic) == [1, 2]

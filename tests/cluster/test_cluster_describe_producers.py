"""DescribeProducers in a cluster, as Kafka's brokers answer it: every replica of a
partition (its leader and its followers, which apply the leader's batches to their own
producer state) lists the partition's producers; a broker without a replica answers
NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

from pybroker.errors import ErrorCode
from tests.admin.clients import produce, unique
from tests.cluster.harness import LocalCluster

DESCRIBE_PRODUCERS = 61


def test_replicas_describe_their_producers_and_other_brokers_refuse(zk_connect, tmp_path):
    with LocalCluster(zk_connect, tmp_path) as cluster:
        topic = unique("producers")
        cluster.create_topic(topic, assignment=[[1, 2]])
        produce(cluster.bootstrap, topic, [b"v%d" % i for i in range(10)],
                **{"enable.idempotence": True, "acks": "all"})

        def partition(broker_id: int) -> dict:
            response = cluster.request(broker_id, DESCRIBE_PRODUCERS, 0, {
                "topics": [{"name": topic, "partition_indexes": [0]}]})
            return response["topics"][0]["partitions"][0]

        def sequences(broker_id: int) -> list[int] | None:
            found = partition(broker_id)
            assert found["error_code"] == ErrorCode.NONE
            return [p["last_sequence"] for p in found["active_producers"]] or None

        assert cluster.wait_for(lambda: sequences(1), 30, what="producers on broker 1") == [9]
        assert cluster.wait_for(lambda: sequences(2), 30, what="producers on broker 2") == [9]
        outsider = partition(3)
        assert (outsider["error_code"], outsider["active_producers"]) == \
            (ErrorCode.NOT_LEADER_OR_FOLLOWER, [])

"""DescribeTopicPartitions in a ZooKeeper cluster: each broker pages through the same
partitions its Metadata describes (leader, epoch, replicas, ISR, offline replicas),
including a replica that went offline."""

from __future__ import annotations

from tests.cluster.harness import LocalCluster

DESCRIBE_TOPIC_PARTITIONS = 75
TOPIC = "described"


def paged(cluster: LocalCluster, broker_id: int) -> list[tuple]:
    """Every partition of TOPIC, one per DescribeTopicPartitions page."""
    found, cursor = [], None
    while True:
        answer = cluster.request(broker_id, DESCRIBE_TOPIC_PARTITIONS, 0, {
            "topics": [{"name": TOPIC}], "response_partition_limit": 1, "cursor": cursor})
        (topic,) = answer["topics"]
        assert topic["error_code"] == 0 and topic["topic_authorized_operations"] == 3576
        found += [(p["partition_index"], p["error_code"], p["leader_id"], p["leader_epoch"],
                   sorted(p["replica_nodes"]), sorted(p["isr_nodes"]),
                   sorted(p["offline_replicas"])) for p in topic["partitions"]]
        cursor = answer["next_cursor"]
        if cursor is None:
            return found


def described(cluster: LocalCluster, broker_id: int) -> list[tuple]:
    (topic,) = cluster.metadata([TOPIC], broker_id)["topics"]
    return [(p["partition_index"], p["error_code"], p["leader_id"], p["leader_epoch"],
             sorted(p["replica_nodes"]), sorted(p["isr_nodes"]),
             sorted(p["offline_replicas"])) for p in topic["partitions"]]


def test_pages_match_metadata_with_a_replica_offline(zk_connect, tmp_path):
    with LocalCluster(zk_connect, tmp_path) as cluster:
        cluster.create_topic(TOPIC, 3, 3)
        for broker_id in cluster.running():
            assert paged(cluster, broker_id) == described(cluster, broker_id)
        cluster.stop(3)
        cluster.wait_for(lambda: all(p[6] == [3] for p in described(cluster, 1)), 60,
                         what="broker 3 offline in every partition")
        pages = paged(cluster, 1)
        assert pages == described(cluster, 1) and len(pages) == 3
        assert all(p[6] == [3] and p[2] in (1, 2) for p in pages)

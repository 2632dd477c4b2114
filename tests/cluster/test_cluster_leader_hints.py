"""KIP-951 leader discovery: a Produce (v10+) or Fetch (v16+) sent to a broker that does
not lead the partition is refused with NOT_LEADER_OR_FOLLOWER naming the current leader
and epoch, and the response carries that leader's endpoint, so a client can go there
without asking Metadata first. Asked of a follower (which knows the leader from its own
replica), of a broker with a replica of another partition of the topic only, and of one
with no replica of the topic at all (both know the leader from their metadata cache; as
Kafka, a partition the cluster has is NOT_LEADER_OR_FOLLOWER there, not unknown).
"""

from __future__ import annotations

from pybroker._native.records import encode_batch
from pybroker.errors import ErrorCode
from tests.broker.wire_client import WireClient, produce_body
from tests.cluster.harness import LocalCluster

PRODUCE, FETCH = 0, 1


def _fetch_by_id(topic_id: object, partition: int) -> dict:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                 "current_leader_epoch": -1, "log_start_offset": -1}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def _endpoint(cluster: LocalCluster, broker_id: int) -> dict:
    host, port = cluster.address(broker_id).rsplit(":", 1)
    return {"node_id": broker_id, "host": host, "port": int(port), "rack": None}


def test_refused_produce_and_fetch_name_the_leader(zk_connect, tmp_path):
    with LocalCluster(zk_connect, tmp_path) as cluster:
        replicated = cluster.create_topic("replicated", 1, 3)[0]
        follower = next(b for b in replicated.replicas if b != replicated.leader)
        outsider = next(b for b in cluster.running() if b != follower)
        # "apart"-0 is on the follower alone; the outsider has only "apart"-1
        apart = cluster.create_topic("apart", assignment=[[follower], [outsider]])[0]
        elsewhere = cluster.create_topic("elsewhere", assignment=[[follower]])[0]
        ids = {t["name"]: t["topic_id"]
               for t in cluster.metadata(["replicated", "apart", "elsewhere"])["topics"]}
        for topic, index, state, asked in (("replicated", 0, replicated, follower),
                                           ("apart", 0, apart, outsider),
                                           ("elsewhere", 0, elsewhere, outsider)):
            expected = {"leader_id": state.leader, "leader_epoch": state.leader_epoch}
            with WireClient(cluster.address(asked)) as client:
                produced = client.request(PRODUCE, 11,
                                          produce_body(topic, index, encode_batch([b"v"])))
                part = produced["responses"][0]["partition_responses"][0]
                assert part["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
                assert part["current_leader"] == expected
                assert produced["node_endpoints"] == [_endpoint(cluster, state.leader)]

                fetched = client.request(FETCH, 17, _fetch_by_id(ids[topic], index))
                part = fetched["responses"][0]["partitions"][0]
                assert part["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
                assert part["current_leader"] == expected
                assert fetched["node_endpoints"] == [_endpoint(cluster, state.leader)]

            with WireClient(cluster.address(state.leader)) as client:  # the leader: no hints
                produced = client.request(PRODUCE, 11,
                                          produce_body(topic, index, encode_batch([b"v"])))
                part = produced["responses"][0]["partition_responses"][0]
                assert part["error_code"] == ErrorCode.NONE
                assert part["current_leader"] == {"leader_id": -1, "leader_epoch": -1}
                assert produced["node_endpoints"] == []

"""Partition reassignment on a local cluster (KIP-455, issue 17): AlterPartitionReassignments
sent to any broker, the controller adding the new replicas, moving leadership and
removing the old ones, under a running acks=all producer; a cancellation; a controller
killed half way; the legacy ``/admin/reassign_partitions`` znode; Kafka's refusals.

A target broker paused (SIGSTOP) just before the request keeps a move pending: it is
still registered when the request is checked, and never catches up while paused.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from pybroker.coordinator.internal_topic import partition_for
from tests.cluster.harness import ContinuousProducer, LocalCluster, produce_body, read_all
from tests.cluster.test_cluster_cli import _partition_rows, pybroker

ALTER, LIST, PRODUCE, DELETE_RECORDS = 45, 46, 0, 21
KAFKA_REASSIGN = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared",
                              "reference", "kafka_2.13-4.1.0", "bin",
                              "kafka-reassign-partitions.sh")
NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT = 0, 3, 39
NO_REASSIGNMENT_IN_PROGRESS = 85
TP = tuple[str, int]


def alter(cluster: LocalCluster, moves: dict[TP, list[int] | None],
          broker_id: int | None = None) -> dict[TP, int]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (name, index), replicas in moves.items():
        topics.setdefault(name, []).append({"partition_index": index, "replicas": replicas})
    answer = cluster.request(broker_id, ALTER, 0, {"timeout_ms": 30000, "topics": [
        {"name": name, "partitions": partitions} for name, partitions in topics.items()]})
    assert answer["error_code"] == NONE, answer
    return {(t["name"], p["partition_index"]): p["error_code"]
            for t in answer["responses"] for p in t["partitions"]}


def ongoing(cluster: LocalCluster, broker_id: int | None = None
            ) -> dict[TP, tuple[list[int], list[int], list[int]]]:
    answer = cluster.request(broker_id, LIST, 0, {"timeout_ms": 30000, "topics": None})
    assert answer["error_code"] == NONE, answer
    return {(t["name"], p["partition_index"]): (p["replicas"], p["adding_replicas"],
                                                p["removing_replicas"])
            for t in answer["topics"] for p in t["partitions"]}


def moved(cluster: LocalCluster, topic: str, replicas: list[int],
          broker_id: int | None = None) -> bool:
    """The move of ``topic``-0 to ``replicas`` is complete as ``broker_id`` sees it."""
    info = cluster.describe(topic, broker_id).get(0)
    return (info is not None and not ongoing(cluster, broker_id)
            and info.replicas == replicas and sorted(info.isr) == sorted(replicas)
            and info.leader in replicas)


def partition_dir(cluster: LocalCluster, broker_id: int, topic: str) -> str:
    return os.path.join(cluster.root, f"broker-{broker_id}", "data", f"{topic}-0")


def produce_numbers(cluster: LocalCluster, topic: str, count: int) -> None:
    for n in range(count):
        leader = cluster.describe(topic)[0].leader
        answer = cluster.request(leader, PRODUCE, 9, produce_body(topic, 0, str(n).encode()))
        assert answer["responses"][0]["partition_responses"][0]["error_code"] == NONE


def check_acknowledged(cluster: LocalCluster, topic: str,
                       acked: list[tuple[int, int, int]]) -> None:
    end = max(offset for _, offset, _ in acked) + 1
    found = read_all(cluster.bootstrap, topic, 1, at_least={0: end})[0]
    lost = [(offset, n) for _, offset, n in acked if found.get(offset) != str(n).encode()]
    assert not lost, f"{len(lost)} acknowledged records lost, first {lost[:5]}"


def committed(consumer: Any, topic: str) -> int | None:
    """The group's committed offset of ``topic``-0; None while its coordinator moves
    (librdkafka hands NOT_COORDINATOR to the caller of ``committed``)."""
    from confluent_kafka import KafkaException, TopicPartition

    try:
        [found] = consumer.committed([TopicPartition(topic, 0)], timeout=30)
    except KafkaException:
        return None
    return int(found.offset)


def test_move_under_acks_all_producer(zk_connect, tmp_path) -> None:
    with LocalCluster(zk_connect, tmp_path, size=3) as cluster:
        before = cluster.create_topic("moving", assignment=[[1, 2]])[0]
        assert before.leader == 1
        producer = ContinuousProducer(cluster.bootstrap, "moving")
        producer.start()
        try:
            cluster.wait_for(lambda: len(producer.acked) > 300, 60, what="records acked")
            assert alter(cluster, {("moving", 0): [2, 3]}, broker_id=3) == {("moving", 0): NONE}
            cluster.wait_for(lambda: moved(cluster, "moving", [2, 3]), 90,
                             what="moving-0 on brokers 2 and 3")
            after = cluster.describe("moving")[0]
            assert after.leader in (2, 3) and after.leader_epoch > before.leader_epoch
            acked_at_move = len(producer.acked)
            cluster.wait_for(lambda: len(producer.acked) > acked_at_move + 300, 60,
                             what="records acked after the move")
        finally:
            producer.stop()
        assert not producer.failed and not producer.fatal, (producer.failed[:5],
                                                            producer.fatal)
        # the removed replica's log is gone (renamed for deletion, then removed)
        cluster.wait_for(lambda: not os.path.exists(partition_dir(cluster, 1, "moving")),
                         30, what="broker 1's moving-0 deleted")
        check_acknowledged(cluster, "moving", producer.acked)
        # both new replicas hold every acknowledged record: the other one leads now
        leader = cluster.describe("moving")[0].leader
        cluster.kill(leader)
        cluster.wait_for(lambda: cluster.describe("moving")[0].leader not in (-1, leader), 60,
                         what="the other new replica leading")
        check_acknowledged(cluster, "moving", producer.acked)


def test_cancel_reverts_to_the_original_replicas(zk_connect, tmp_path) -> None:
    from kafka import KafkaAdminClient, TopicPartition

    with LocalCluster(zk_connect, tmp_path, size=3) as cluster:
        # the paused target is not the controller, which must carry the cancellation out
        target = max(set(cluster.brokers) - {cluster.controller_id()})
        kept, dropped = sorted(set(cluster.brokers) - {target})
        cluster.create_topic("cancelled", assignment=[[kept, dropped]])
        produce_numbers(cluster, "cancelled", 50)
        cluster.pause(target)
        assert alter(cluster, {("cancelled", 0): [kept, target]}, broker_id=dropped) == {
            ("cancelled", 0): NONE}
        moving = [kept, target, dropped]
        assert ongoing(cluster, kept) == {("cancelled", 0): (moving, [target], [dropped])}
        cluster.wait_for(lambda: cluster.describe("cancelled", kept)[0].replicas == moving,
                         30, what="Metadata naming the whole replica set")
        # the clients below learn every registered broker: not the paused one any more
        cluster.wait_for(lambda: target not in cluster.broker_ids(kept), 60,
                         what="the paused broker's session expired")
        described = pybroker("topic", "describe", "cancelled", "--bootstrap",
                             cluster.address(kept))
        assert described.returncode == 0, described.stderr
        row = _partition_rows(described.stdout)["0"]
        assert (row["REPLICAS"], row["ADDING"], row["REMOVING"]) == (
            ",".join(map(str, moving)), str(target), str(dropped))
        # kafka-python's admin client lists and cancels it
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        try:
            assert admin.list_partition_reassignments() == {TopicPartition("cancelled", 0): {
                "replicas": moving, "adding_replicas": [target],
                "removing_replicas": [dropped]}}
            assert admin.alter_partition_reassignments({TopicPartition("cancelled", 0): None}
                                                       ) == {TopicPartition("cancelled", 0): None}
        finally:
            admin.close()
        cluster.wait_for(lambda: moved(cluster, "cancelled", [kept, dropped], kept), 60,
                         what="cancelled-0 back on its original replicas")
        assert alter(cluster, {("cancelled", 0): None}) == {
            ("cancelled", 0): NO_REASSIGNMENT_IN_PROGRESS}
        cluster.resume(target)
        found = read_all(cluster.bootstrap, "cancelled", 1, at_least={0: 50})[0]
        assert [found[offset] for offset in range(50)] == [str(n).encode()
                                                           for n in range(50)]


def test_new_controller_finishes_a_move(zk_connect, tmp_path) -> None:
    with LocalCluster(zk_connect, tmp_path, size=3) as cluster:
        controller = cluster.controller_id()
        source, target = sorted(set(cluster.brokers) - {controller})
        cluster.create_topic("handed-over", assignment=[[source]])
        produce_numbers(cluster, "handed-over", 50)
        # the new replica starts where the leader's log does
        deleted = cluster.request(source, DELETE_RECORDS, 2, {"timeout_ms": 30000, "topics": [
            {"name": "handed-over", "partitions": [{"partition_index": 0, "offset": 20}]}]})
        assert deleted["topics"][0]["partitions"][0]["low_watermark"] == 20, deleted
        cluster.pause(target)
        assert alter(cluster, {("handed-over", 0): [target]}, broker_id=source) == {
            ("handed-over", 0): NONE}
        assert ongoing(cluster, source) == {
            ("handed-over", 0): ([target, source], [target], [source])}
        cluster.kill(controller)
        cluster.resume(target)
        cluster.wait_for(lambda: cluster.controller_id(source) in (source, target), 60,
                         what="a new controller")
        cluster.wait_for(lambda: moved(cluster, "handed-over", [target], source), 90,
                         what="handed-over-0 moved by the new controller")
        cluster.wait_for(lambda: not os.path.exists(
            partition_dir(cluster, source, "handed-over")), 30, what="the old replica deleted")
        found = read_all(cluster.bootstrap, "handed-over", 1, at_least={0: 50})[0]
        assert found == {offset: str(offset).encode() for offset in range(20, 50)}


def test_legacy_znode_refusals_and_consumer_offsets(zk_connect, tmp_path) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from kazoo.client import KazooClient

    with LocalCluster(zk_connect, tmp_path, size=3) as cluster:
        cluster.create_topic("legacy", assignment=[[1, 2]])
        # Kafka's refusals, from any broker
        assert alter(cluster, {("legacy", 0): [9], ("legacy", 1): [1],
                               ("absent", 0): [1], ("legacy/partitions", 0): [1]},
                     broker_id=2) == {
            ("legacy", 0): INVALID_REPLICA_ASSIGNMENT,
            ("legacy", 1): UNKNOWN_TOPIC_OR_PARTITION,
            ("absent", 0): UNKNOWN_TOPIC_OR_PARTITION,
            ("legacy/partitions", 0): UNKNOWN_TOPIC_OR_PARTITION}
        listed = cluster.request(None, LIST, 0, {"timeout_ms": 30000, "topics": [
            {"name": "legacy/partitions/0", "partition_indexes": [0]},
            {"name": "legacy", "partition_indexes": [0, 5]}]})
        assert (listed["error_code"], listed["topics"]) == (NONE, [])
        for bad in ([], [1, 1]):
            assert alter(cluster, {("legacy", 0): bad}) == {
                ("legacy", 0): INVALID_REPLICA_ASSIGNMENT}
        assert alter(cluster, {("legacy", 0): None}) == {
            ("legacy", 0): NO_REASSIGNMENT_IN_PROGRESS}
        assert ongoing(cluster) == {}

        # the znode kafka-reassign-partitions.sh wrote before KIP-455
        zk = KazooClient(hosts=cluster.zookeeper)
        zk.start(timeout=30)
        try:
            zk.create("/admin/reassign_partitions", json.dumps({"version": 1, "partitions": [
                {"topic": "legacy", "partition": 0, "replicas": [3, 2]}]}).encode(),
                makepath=True)
        finally:
            zk.stop()
            zk.close()
        cluster.wait_for(lambda: moved(cluster, "legacy", [3, 2]), 90,
                         what="legacy-0 moved to brokers 3 and 2")
        cluster.wait_for(lambda: cluster.zk_get("/admin/reassign_partitions") is None, 30,
                         what="the request znode deleted")

        # __consumer_offsets: the group's coordinator moves with its partition's leader
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "mover",
                             "enable.auto.commit": False})
        try:
            consumer.commit(offsets=[TopicPartition("legacy", 0, 7)], asynchronous=False)
            offsets = cluster.describe("__consumer_offsets")
            index = partition_for("mover", len(offsets))
            old_leader = offsets[index].leader
            target = [r for r in offsets[index].replicas if r != old_leader]
            assert alter(cluster, {("__consumer_offsets", index): target}) == {
                ("__consumer_offsets", index): NONE}
            cluster.wait_for(lambda: not ongoing(cluster) and cluster.describe(
                "__consumer_offsets")[index].replicas == target, 90,
                what="the group's offsets partition moved")
            assert cluster.describe("__consumer_offsets")[index].leader in target
            cluster.wait_for(lambda: committed(consumer, "legacy") == 7, 60,
                             what="the committed offset from the new coordinator")
            consumer.commit(offsets=[TopicPartition("legacy", 0, 9)], asynchronous=False)
            assert committed(consumer, "legacy") == 9
        finally:
            consumer.close()



def kafka_reassign(cluster: LocalCluster, plan: str, *args: str) -> str:
    """Apache Kafka 4.1's kafka-reassign-partitions.sh with ``plan`` (its JSON file)."""
    done = subprocess.run([KAFKA_REASSIGN, "--bootstrap-server", cluster.bootstrap,
                           "--reassignment-json-file", plan, *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_kafka_reassign_partitions_tool(zk_connect, tmp_path) -> None:
    """Kafka's own tool drives a move (with its replication throttle) to the end, and
    cancels one; a session long enough that the paused target stays registered while
    the tool's JVM starts."""
    with LocalCluster(zk_connect, tmp_path / "cluster", size=3,
                      settings={"zookeeper.session.timeout.ms": 30000}) as cluster:
        cluster.create_topic("tool", assignment=[[1], [1]])
        produce_numbers(cluster, "tool", 50)
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "tool", "partition": 0, "replicas": [2, 3]}]}))
        assert "Successfully started partition reassignment for tool-0" in kafka_reassign(
            cluster, str(plan), "--execute", "--throttle", "10000000")

        def verified() -> bool:
            out = kafka_reassign(cluster, str(plan), "--verify")
            return "Reassignment of partition tool-0 is completed." in out
        cluster.wait_for(verified, 120, what="the tool seeing the move completed",
                         interval=1.0)
        assert moved(cluster, "tool", [2, 3])
        found = read_all(cluster.bootstrap, "tool", 1, at_least={0: 50})[0]
        assert found == {offset: str(offset).encode() for offset in range(50)}

        # a move to a paused broker (not the controller, which the tool's requests go
        # to), cancelled
        target = max(set(cluster.brokers) - {cluster.controller_id(), 1})
        cluster.pause(target)
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "tool", "partition": 1, "replicas": [target]}]}))
        kafka_reassign(cluster, str(plan), "--execute")
        assert ongoing(cluster) == {("tool", 1): ([target, 1], [target], [1])}
        # (the paused broker could not answer the tool's clearing of its throttle)
        assert "Successfully cancelled partition reassignment for: tool-1" in kafka_reassign(
            cluster, str(plan), "--cancel", "--preserve-throttles")
        cluster.wait_for(lambda: cluster.describe("tool")[1].replicas == [1] and
                         not ongoing(cluster), 60, what="tool-1 back on broker 1")
        cluster.resume(target)

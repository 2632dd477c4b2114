"""Metrics of a three-broker cluster (issue 15), scraped with Prometheus's parser from
every broker's ``metrics.listener``:

- exactly one broker reports itself the active controller;
- a group's coordinator reports the lag of a partition it holds no replica of, from the
  leader's high watermark (its ListOffsets in the background);
- a follower SIGKILLed leaves the ISR by the leader's doing (the ZooKeeper session outlives
  replica.lag.time.max.ms): the leader counts an ISR shrink and reports the partition
  under-replicated and under min.insync.replicas; once the session is gone the
  controller counts the partition the dead broker led alone as offline.
"""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.broker.prometheus import Samples, metrics_url, scrape
from tests.cluster.harness import LocalCluster

SETTINGS = {"metrics.listener": "127.0.0.1:0", "replica.lag.time.max.ms": 1500,
            "zookeeper.session.timeout.ms": 8000}
GROUP = "metrics-group"
RECORDS, COMMITTED = 30, 12
FIND_COORDINATOR = 10
WAIT = 60.0


def scrape_broker(cluster: LocalCluster, broker_id: int) -> Samples:
    return scrape(metrics_url(cluster.brokers[broker_id]))


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def test_cluster_metrics(zk_connect, tmp_path):
    with LocalCluster(zk_connect, tmp_path, settings=SETTINGS) as cluster:
        active = [value(scrape_broker(cluster, b),
                        "kafka_controller_kafkacontroller_activecontrollercount")
                  for b in cluster.brokers]
        assert sorted(active) == [0, 0, 1]
        controller = cluster.controller_id()

        # the group's coordinator, and a topic whose only replica is on another broker
        coordinator = cluster.wait_for(lambda: _coordinator(cluster), WAIT,
                                       what="the group's coordinator")
        elsewhere = next(b for b in cluster.brokers if b not in (coordinator, controller))
        cluster.create_topic("remote", assignment=[[elsewhere]])
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
        for i in range(RECORDS):
            producer.produce("remote", str(i).encode(), partition=0)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP,
                             "enable.auto.commit": False})
        try:
            consumer.commit(offsets=[TopicPartition("remote", 0, COMMITTED)],
                            asynchronous=False)
        finally:
            consumer.close()
        cluster.wait_for(
            lambda: value(scrape_broker(cluster, coordinator), "pybroker_group_lag",
                          group=GROUP, topic="remote", partition="0") == RECORDS - COMMITTED,
            WAIT, what="the coordinator reporting the lag of a partition led elsewhere")

        # a follower killed (the leader of "remote", not the controller): the leader of
        # "replicated" (the first of its assignment) shrinks its ISR
        others = [b for b in cluster.brokers if b not in (coordinator, elsewhere)]
        state = cluster.create_topic("replicated", configs={"min.insync.replicas": "3"},
                                     assignment=[[coordinator, elsewhere, *others]])[0]
        leader = state.leader
        assert leader == coordinator
        before = scrape_broker(cluster, leader)
        assert value(before, "kafka_cluster_partition_underminisr",
                     topic="replicated", partition="0") == 0
        cluster.kill(elsewhere)
        after = cluster.wait_for(
            lambda: _shrunk(scrape_broker(cluster, leader), before), WAIT,
            what=f"broker {leader} counting an ISR shrink")
        assert value(after, "kafka_server_replicamanager_underreplicatedpartitions") >= 1
        assert value(after, "kafka_server_replicamanager_underminisrpartitioncount") >= 1
        assert value(after, "kafka_cluster_partition_underminisr",
                     topic="replicated", partition="0") == 1
        # "remote" had no other replica: offline, for the controller, once the dead
        # broker's session is gone
        cluster.wait_for(
            lambda: value(scrape_broker(cluster, controller),
                          "kafka_controller_kafkacontroller_offlinepartitionscount") == 1,
            WAIT, what="the controller counting the offline partition")
        assert sum(value(scrape_broker(cluster, b),
                         "kafka_controller_kafkacontroller_activecontrollercount")
                   for b in cluster.running()) == 1


def _coordinator(cluster: LocalCluster) -> int | None:
    answer = cluster.request(None, FIND_COORDINATOR, 3, {"key": GROUP, "key_type": 0})
    return answer["node_id"] if answer["error_code"] == 0 else None


def _shrunk(now: Samples, before: Samples) -> Samples | None:
    name = "kafka_server_replicamanager_isrshrinks_total"
    return now if value(now, name) > value(before, name) else None

"""Growing and shrinking a cluster while it serves (issue 17, point 5): the operator
commands run as processes against real brokers under a running acks=all, idempotent
confluent-kafka producer.

- A fourth broker joins a three-broker cluster (it holds nothing: the topic lies on
  brokers 1-3); ``cluster rebalance --execute --throttle`` gives it its share of the
  replicas and reports until done, then removes the throttles.
- A broker is drained with ``cluster drain --execute`` and stopped.
- A move held back by a 1000 B/s throttle (5 MB to copy) is listed by ``partition
  reassignments``, whose ``--clear-throttles`` waits for it, and cancelled midway by
  ``--cancel``; ``cluster health`` meanwhile counts the replica being added as no lag.
- A move started by ``partition move --no-wait`` goes on after its new replica's broker
  is killed and restarted, and completes once its throttle is lifted.

In each, every acknowledged record is read back afterwards at its offset, exactly once,
and the producer gave up on nothing and saw no fatal error (librdkafka retries the
retriable ones, NOT_LEADER_OR_FOLLOWER while leadership moves).

These need the brokers to serve AlterPartitionReassignments and
ListPartitionReassignments and to enforce the replication throttles.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from tests.cluster.harness import CLIENT_LOG, ContinuousProducer, LocalCluster, read_all
from tests.cluster.test_cluster_cli import pybroker

TOPIC = "moving"
PARTITIONS = 6
THROTTLE = "20000000"  # bytes/s: far above this test's rate, so the moves end soon
SETTINGS = {"min.insync.replicas": 2}


def throttle_configs(cluster: LocalCluster, broker: int) -> dict[str, str]:
    """The replication throttle configs set on the topic and on ``broker``."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    found = {}
    for resource in (ConfigResource("topic", TOPIC), ConfigResource("broker", str(broker))):
        configs = admin.describe_configs([resource])[resource].result(timeout=30)
        found.update({key: entry.value for key, entry in configs.items()
                      if "throttled" in key and entry.value and not entry.is_default})
    return found


def check_every_acknowledged_record(cluster: LocalCluster, producer: ContinuousProducer,
                                    partitions: int = PARTITIONS) -> None:
    assert producer.acked, "nothing was acknowledged"
    assert not producer.fatal, producer.fatal
    assert not producer.failed, f"the producer gave up on {producer.failed[:5]}"
    ends = {p: max(o for q, o, _ in producer.acked if q == p) + 1
            for p in {q for q, _, _ in producer.acked}}
    final = read_all(cluster.bootstrap, TOPIC, partitions, at_least=ends, timeout=120)
    lost = [(p, o, n) for p, o, n in producer.acked if final[p].get(o) != str(n).encode()]
    assert not lost, f"{len(lost)} acknowledged records lost or moved, e.g. {lost[:5]}"
    counts = collections.Counter(v for part in final.values() for v in part.values())
    doubled = [n for _, _, n in producer.acked if counts[str(n).encode()] != 1]
    assert not doubled, f"acknowledged records stored more than once: {doubled[:10]}"


def run_under_load(cluster: LocalCluster, command: list[str],
                   then: Callable[[], None] = lambda: None) -> tuple[str, ContinuousProducer]:
    """``command`` (a pybroker command line), then ``then()``, while the producer writes;
    the command's output."""
    producer = ContinuousProducer(cluster.bootstrap, TOPIC)
    producer.start()
    try:
        cluster.wait_for(lambda: len(producer.acked) >= 300, 60,
                         what="300 records acknowledged before the moves")
        done = pybroker(*command, "-b", cluster.bootstrap)
        assert done.returncode == 0, done.stdout + done.stderr
        then()
        mark = len(producer.acked)
        cluster.wait_for(lambda: len(producer.acked) >= mark + 300, 60,
                         what="300 records acknowledged after the moves")
    finally:
        producer.stop()
    return done.stdout, producer


def test_a_fourth_broker_takes_its_share_after_rebalance(zk_connect, tmp_path):
    layout = [[(p + i) % 3 + 1 for i in range(3)] for p in range(PARTITIONS)]
    with LocalCluster(zk_connect, tmp_path, size=4, settings=SETTINGS) as cluster:
        cluster.create_topic(TOPIC, assignment=layout, configs={"min.insync.replicas": "2"})
        printed, producer = run_under_load(
            cluster, ["cluster", "rebalance", "--topic", TOPIC, "--execute",
                      "--throttle", THROTTLE])
        assert "Throttle: 20000000 B/s on brokers 1,2,3,4" in printed
        assert "Reassigning: 4 of 4 done, 0 remaining" in printed
        assert printed.rstrip().endswith("Throttles removed\nDone")

        partitions = cluster.describe(TOPIC)
        held = collections.Counter(b for info in partitions.values() for b in info.replicas)
        assert held[4] == 4 and sorted(held.values()) == [4, 4, 5, 5]
        assert all(len(set(info.replicas)) == 3 for info in partitions.values())
        assert sum(info.replicas[0] == 4 for info in partitions.values()) >= 1
        assert throttle_configs(cluster, 4) == {}
        check_every_acknowledged_record(cluster, producer)


def test_a_drained_broker_is_stopped_without_losing_a_record(zk_connect, tmp_path):
    layout = [[(p + i) % 4 + 1 for i in range(3)] for p in range(PARTITIONS)]
    with LocalCluster(zk_connect, tmp_path, size=4, settings=SETTINGS) as cluster:
        cluster.create_topic(TOPIC, assignment=layout, configs={"min.insync.replicas": "2"})
        moved = sum(4 in replicas for replicas in layout)

        def drained_then_stopped() -> None:
            assert not any(4 in info.replicas for info in cluster.describe(TOPIC).values())
            assert throttle_configs(cluster, 4) == {}
            assert cluster.stop(4) == 0

        printed, producer = run_under_load(
            cluster, ["cluster", "drain", "4", "--execute", "--throttle", THROTTLE],
            then=drained_then_stopped)
        assert f"Reassigning: {moved} of {moved} done, 0 remaining" in printed
        health = pybroker("cluster", "health", "-b", cluster.bootstrap)
        assert health.returncode == 0, health.stdout
        check_every_acknowledged_record(cluster, producer)


RECORDS = 5000  # of 1000 bytes


def fill(cluster: LocalCluster) -> None:
    """RECORDS records in partition 0: 5 MB for a move to copy."""
    from confluent_kafka import Producer

    filler = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                       "logger": CLIENT_LOG})
    for _ in range(RECORDS):
        filler.produce(TOPIC, value=b"x" * 1000, partition=0)
        filler.poll(0)
    assert filler.flush(60) == 0


def test_a_move_held_back_by_its_throttle_is_listed_and_cancelled(zk_connect, tmp_path):
    """5 MB to copy at 1000 B/s (a fetch of at most replica.fetch.max.bytes, 1 MiB, while
    under the rate, as in Kafka): the move of partition 0 to broker 4 is still running
    while ``partition reassignments`` lists it, refuses to clear its throttle, and
    cancels it; the partition is back on its replicas and the throttles can go."""
    with LocalCluster(zk_connect, tmp_path, size=4, settings=SETTINGS) as cluster:
        cluster.create_topic(TOPIC, assignment=[[1, 2, 3]],
                             configs={"min.insync.replicas": "2"})
        fill(cluster)

        def partition_command(*args: str) -> tuple[int, str]:
            done = pybroker("partition", *args, "-b", cluster.bootstrap)
            return done.returncode, done.stdout + done.stderr

        code, printed = partition_command("move", TOPIC, "0", "--replicas", "4,2,3",
                                          "--throttle", "1000", "--no-wait")
        assert code == 0, printed
        assert "Started 1 reassignments" in printed and "--clear-throttles" in printed

        code, printed = partition_command("reassignments")
        assert code == 0, printed
        row = next(line.split() for line in printed.splitlines() if line.startswith(TOPIC))
        assert row[1] == "0" and sorted(row[2].split(",")) == ["1", "2", "3", "4"]
        assert row[3:] == ["4", "1"], printed  # adding, removing
        health = pybroker("cluster", "health", "-b", cluster.bootstrap)
        assert health.returncode == 0, health.stdout  # a replica being added is no lag

        code, printed = partition_command("reassignments", "--clear-throttles")
        assert code == 1
        assert printed.strip() == ("pybroker: 1 reassignments in progress: the throttles "
                                   "stay until they are done")

        code, printed = partition_command("reassignments", "--cancel")
        assert code == 0 and "Cancelled 1 reassignments" in printed, printed
        # (in the order Kafka leaves: the replicas listed while moving, 4,2,3,1, less
        # the one being added)
        cluster.wait_for(lambda: sorted(cluster.describe(TOPIC)[0].replicas) == [1, 2, 3],
                         60, what="partition 0 back on brokers 1,2,3")
        code, printed = partition_command("reassignments")
        assert (code, printed.strip()) == (0, "No reassignment in progress.")

        code, printed = partition_command("reassignments", "--clear-throttles")
        assert (code, printed.strip()) == (0, "Throttles removed")
        assert all(throttle_configs(cluster, broker) == {} for broker in (1, 2, 3, 4))
        final = read_all(cluster.bootstrap, TOPIC, 1, at_least={0: RECORDS}, timeout=120)
        assert len(final[0]) == RECORDS


def test_a_move_survives_the_new_replica_being_killed(zk_connect, tmp_path):
    """The move of partition 0 to broker 4, held back by its throttle, goes on after
    broker 4 is killed and restarted: once the throttle is lifted it completes, and
    every record acknowledged meanwhile is there."""
    from pybroker.client.cluster import Cluster
    from pybroker.reassignment_admin import clear_throttles

    with LocalCluster(zk_connect, tmp_path, size=4, settings=SETTINGS) as cluster:
        cluster.create_topic(TOPIC, assignment=[[1, 2, 3]],
                             configs={"min.insync.replicas": "2"})
        fill(cluster)
        producer = ContinuousProducer(cluster.bootstrap, TOPIC)
        producer.start()
        try:
            done = pybroker("partition", "move", TOPIC, "0", "--replicas", "4,2,3",
                            "--throttle", "1000", "--no-wait", "-b", cluster.bootstrap)
            assert done.returncode == 0, done.stdout + done.stderr
            cluster.kill(4)
            cluster.restart(4)
            listed = pybroker("partition", "reassignments", "-b", cluster.bootstrap)
            assert f"{TOPIC}  0" in listed.stdout, listed.stdout + listed.stderr

            admin = Cluster(cluster.bootstrap)
            try:
                admin.refresh([])
                clear_throttles(admin, [1, 2, 3, 4], [TOPIC])
            finally:
                admin.close()

            def moved() -> bool:
                done = pybroker("partition", "reassignments", "-b", cluster.bootstrap)
                return done.stdout.strip() == "No reassignment in progress."

            cluster.wait_for(moved, 120, what="the move to broker 4 to complete")
            assert cluster.describe(TOPIC)[0].replicas == [4, 2, 3]
            cluster.wait_for(lambda: sorted(cluster.describe(TOPIC)[0].isr) == [2, 3, 4], 60,
                             what="brokers 4, 2, 3 all in sync")
            mark = len(producer.acked)
            cluster.wait_for(lambda: len(producer.acked) >= mark + 300, 60,
                             what="300 records acknowledged after the move")
        finally:
            producer.stop()
        check_every_acknowledged_record(cluster, producer, partitions=1)

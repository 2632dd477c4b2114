"""Log directories in a cluster of three brokers with two each, under an acks=all producer
writing to every partition; every acknowledged record stays readable, and the producer
sees no error beyond retriable ones.

A failed directory (Kafka's LogDirFailureChannel and the controller's log dir event): the
second directory of a broker leading a partition there is replaced by a file. That broker
tells the controller (``/log_dir_event_notification``), answers LeaderAndIsr with
KAFKA_STORAGE_ERROR for the replicas there, and those partitions get leaders among the
other ISR members; the broker keeps its other replicas.

Restarts try it again: still broken, its replicas stay offline; back, they rejoin.

AlterReplicaLogDirs: every replica, leader or follower, moves to its broker's other
directory while it serves."""

from __future__ import annotations

import os

from tests.cluster.harness import ContinuousProducer, LocalCluster, read_all

TOPIC = "jbod"
PARTITIONS = 4


def _cluster_with_two_dirs(zk_connect: str, root: os.PathLike[str]
                           ) -> tuple[LocalCluster, dict[int, list[str]]]:
    """Three brokers (not started) with two log directories each: {broker: its dirs}."""
    cluster = LocalCluster(zk_connect, root, settings={"min.insync.replicas": 2})
    log_dirs = {}
    for broker_id, broker in cluster.brokers.items():
        log_dirs[broker_id] = [broker.data_dir, broker.data_dir + "-second"]
        broker.extra_args += ["--data-dir", ",".join(log_dirs[broker_id])]
    return cluster, log_dirs


def _replicas_in(log_dir: str) -> set[int]:
    return {int(name.rpartition("-")[2]) for name in os.listdir(log_dir)
            if name.rpartition("-")[0] == TOPIC}


def test_a_failed_dir_moves_its_leaders_away_and_keeps_every_acknowledged_record(
        zk_connect, tmp_path):
    cluster, log_dirs = _cluster_with_two_dirs(zk_connect, tmp_path)
    with cluster:
        cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2",
                                                    "segment.bytes": "4096"})
        # the second directory of a broker leading a partition there (the first holds
        # the broker's own files: losing it stops the broker, a deliberate difference)
        leaders = {p: info.leader for p, info in cluster.describe(TOPIC).items()}
        victim = next(b for b in sorted(log_dirs)
                      if any(leaders[p] == b for p in _replicas_in(log_dirs[b][1])))
        failing = log_dirs[victim][1]
        lost = _replicas_in(failing)
        kept = set(range(PARTITIONS)) - lost

        def victim_offline() -> bool:
            (topic,) = cluster.metadata([TOPIC])["topics"]
            return {p["partition_index"]: p["offline_replicas"]
                    for p in topic["partitions"]} == {
                p: [victim] if p in lost else [] for p in range(PARTITIONS)}
        producer = ContinuousProducer(cluster.bootstrap, TOPIC)
        producer.start()
        try:
            cluster.wait_for(lambda: {p for p, _, _ in producer.acked} ==
                             set(range(PARTITIONS)), 60, what="every partition written")
            os.rename(failing, failing + ".gone")
            with open(failing, "w") as f:
                f.write("not a directory\n")

            def moved() -> bool:
                partitions = cluster.describe(TOPIC)
                return all(partitions[p].leader not in (-1, victim) and
                           victim not in partitions[p].isr for p in lost)
            cluster.wait_for(moved, 90, what=f"leaders of {sorted(lost)} moved off {victim}")
            partitions = cluster.describe(TOPIC)
            assert all(victim in partitions[p].isr for p in kept), partitions
            cluster.wait_for(victim_offline, 30,
                             what=f"broker {victim} an offline replica of {sorted(lost)}")
            mark = len(producer.acked)
            cluster.wait_for(lambda: {p for p, _, _ in producer.acked[mark:]} ==
                             set(range(PARTITIONS)), 60,
                             what="every partition written after the failure")
        finally:
            producer.stop()
        assert not producer.fatal, producer.fatal
        assert not producer.failed, producer.failed[:10]
        acked_ends = {p: max(o for q, o, _ in producer.acked if q == p) + 1
                      for p in range(PARTITIONS)}
        final = read_all(cluster.bootstrap, TOPIC, PARTITIONS, at_least=acked_ends)
        missing = [(p, o, n) for p, o, n in producer.acked
                   if final[p].get(o) != str(n).encode()]
        assert not missing, f"{len(missing)} acknowledged records not in the log: {missing[:5]}"
        assert "failed log directory" in cluster.log_text(cluster.controller_id())

        # a restart tries the directory again: still a file, its replicas stay offline
        cluster.restart(victim)
        cluster.wait_for(victim_offline, 60, what=f"{victim}'s replicas offline after a restart")
        # the disk back: its replicas catch up and rejoin every ISR
        os.unlink(failing)
        os.rename(failing + ".gone", failing)
        cluster.restart(victim)
        cluster.wait_for(lambda: all(sorted(info.isr) == sorted(info.replicas)
                                     for info in cluster.describe(TOPIC).values()), 90,
                         what="every ISR whole again")
        cluster.wait_for(lambda: not any(p["offline_replicas"] for p in cluster.metadata(
            [TOPIC])["topics"][0]["partitions"]), 30, what="no offline replica")


def test_replicas_move_between_dirs_on_every_broker_under_acks_all(zk_connect, tmp_path):
    """AlterReplicaLogDirs (kafka-python's admin, one request per broker) moves every
    replica of a topic to its broker's other directory, leaders and followers, while an
    acks=all producer writes: the followers keep fetching into whichever log is current,
    the ISR stays whole, and every acknowledged record stays readable."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.admin import KafkaAdminClient

    cluster, log_dirs = _cluster_with_two_dirs(zk_connect, tmp_path)
    with cluster:
        cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2",
                                                    "segment.bytes": "65536"})
        producer = ContinuousProducer(cluster.bootstrap, TOPIC)
        producer.start()
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        try:
            cluster.wait_for(lambda: len(producer.acked) >= 3000, 60,
                             what="3000 records acknowledged")
            targets = {}
            for broker_id, dirs in log_dirs.items():
                for p in range(PARTITIONS):
                    here = next(d for d in dirs if p in _replicas_in(d))
                    targets[(TOPIC, p, broker_id)] = os.path.abspath(
                        next(d for d in dirs if d != here))
            answer = admin.alter_replica_log_dirs(targets)
            assert {error.errno for error in answer.values()} == {0}, answer

            def moved() -> bool:
                return all(p in _replicas_in(target) and
                           not any(n.endswith("-future") for n in os.listdir(target))
                           for (_, p, _), target in targets.items())
            cluster.wait_for(moved, 120, what="every replica in its new directory")
            mark = len(producer.acked)
            cluster.wait_for(lambda: len(producer.acked) >= mark + 500, 60,
                             what="records acknowledged after the moves")
            cluster.wait_for(lambda: all(sorted(info.isr) == sorted(info.replicas)
                                         for info in cluster.describe(TOPIC).values()),
                             60, what="every ISR whole")
        finally:
            admin.close()
            producer.stop()
        assert not producer.fatal and not producer.failed, (producer.fatal, producer.failed[:5])
        acked_ends = {p: max(o for q, o, _ in producer.acked if q == p) + 1
                      for p in range(PARTITIONS)}
        final = read_all(cluster.bootstrap, TOPIC, PARTITIONS, at_least=acked_ends)
        missing = [(p, o, n) for p, o, n in producer.acked
                   if final[p].get(o) != str(n).encode()]
        assert not missing, f"{len(missing)} acknowledged records not in the log: {missing[:5]}"

"""Controlled shutdown on three brokers (issue 17: a broker stopped while the cluster
serves, rolling restarts).

A SIGTERMed broker first has the controller move its leaderships to other in-sync
replicas, while it still serves, and only then closes its listeners and its ZooKeeper
session: under an acks=all producer (min.insync.replicas 2) the producer sees no error
it gives up on, no partition is ever without a leader (the controller logs every
leadership change, ``leader A -> B``), the stopping broker shrinks no ISR to itself, and
every acknowledged record is read back. The same holds for a rolling restart of every
broker. With controlled shutdown off the stopping leader still shrinks no ISR to itself
(its followers stop fetching only because it stops), so its partitions fail over to
in-sync followers when its session ends. A broker that is the only in-sync replica of a partition asks
``controlled.shutdown.max.retries`` times, then shuts down anyway. ControlledShutdown
itself is checked on the control channel: refused by a broker that is not the
controller, and for a broker epoch older than the live registration's.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tests.cluster.harness import ContinuousProducer, LocalCluster, PartitionInfo, read_all

CONTROLLED_SHUTDOWN, VERSION = 7, 3
NONE, NOT_CONTROLLER, STALE_BROKER_EPOCH = 0, 41, 77
PARTITIONS = 6
TOPIC_CONFIGS = {"min.insync.replicas": "2"}
# a leader lost without a successor: what controlled shutdown is there to prevent
OFFLINE = re.compile(r"leader \d+ -> -1,")


def fully_replicated(cluster: LocalCluster, topic: str, asked: int) -> bool:
    partitions = cluster.describe(topic, asked)
    return len(partitions) == PARTITIONS and all(
        p.leader >= 0 and sorted(p.isr) == sorted(p.replicas) for p in partitions.values())


def led_by(partitions: dict[int, PartitionInfo], broker_id: int) -> list[int]:
    return sorted(p for p, info in partitions.items() if info.leader == broker_id)


def shrunk_to_itself(cluster: LocalCluster, broker_id: int) -> list[str]:
    """The lines of a broker's log where, as leader, it shrank an ISR to itself alone."""
    return [line for line in cluster.log_text(broker_id).splitlines()
            if line.endswith(f"-> [{broker_id}]") and ": ISR [" in line]


def offline_transitions(cluster: LocalCluster) -> list[str]:
    return [line for b in cluster.brokers for line in cluster.log_text(b).splitlines()
            if OFFLINE.search(line)]


def more_acks(cluster: LocalCluster, producer: ContinuousProducer, count: int,
              what: str) -> None:
    mark = len(producer.acked)
    cluster.wait_for(lambda: len(producer.acked) >= mark + count, 60, what=what)


def check_every_acknowledged_record(cluster: LocalCluster, producer: ContinuousProducer,
                                    topic: str) -> None:
    assert not producer.fatal, producer.fatal
    assert not producer.failed, producer.failed[:10]  # retriable errors only, retried
    final = read_all(cluster.bootstrap, topic, PARTITIONS, at_least=producer.acked_ends())
    for partition, offset, n in producer.acked:
        assert final[partition].get(offset) == str(n).encode(), (partition, offset, n)


def stop_the_busiest_leader(cluster: LocalCluster, topic: str,
                            check: Callable[[int, list[int]], None]) -> int:
    """SIGTERM the broker leading most partitions of ``topic`` under an acks=all
    producer, ``check(broker, partitions it led)`` once it exited; every acknowledged
    record is read back. Returns the broker stopped."""
    cluster.create_topic(topic, PARTITIONS, 3, TOPIC_CONFIGS)
    producer = ContinuousProducer(cluster.bootstrap, topic)
    producer.start()
    try:
        more_acks(cluster, producer, 200, "writes acknowledged")
        before = cluster.describe(topic)
        stopping = max(cluster.running(), key=lambda b: len(led_by(before, b)))
        assert len(led_by(before, stopping)) >= 2
        assert cluster.stop(stopping) == 0
        check(stopping, led_by(before, stopping))
        more_acks(cluster, producer, 200, "writes acknowledged by the remaining brokers")
    finally:
        producer.stop()
    assert offline_transitions(cluster) == []
    assert shrunk_to_itself(cluster, stopping) == []
    check_every_acknowledged_record(cluster, producer, topic)
    return stopping


def test_leaderships_move_before_the_broker_stops(zk_connect, tmp_path):
    with LocalCluster(zk_connect, tmp_path) as cluster:
        def handed_over(stopping: int, moved: list[int]) -> None:
            stays = next(b for b in cluster.running() if b != stopping)
            after = cluster.describe("moving", stays)
            assert all(after[p].leader not in (-1, stopping) and stopping not in after[p].isr
                       for p in range(PARTITIONS)), after
            # by the controller, before the broker stopped: not failed over
            text = cluster.log_text(stopping)
            assert text.index("controlled shutdown: every leadership moved") < text.index(
                "shutdown complete")
            changes = [line for b in cluster.brokers for line in
                       cluster.log_text(b).splitlines() if "(controlled_shutdown)" in line]
            assert {p for p in moved if any(f"moving-{p}: leader {stopping} ->" in line
                                            for line in changes)} == set(moved), changes

        stop_the_busiest_leader(cluster, "moving", handed_over)


def test_a_stopping_leader_shrinks_no_isr_to_itself(zk_connect, tmp_path):
    """Without controlled shutdown the leader keeps leading while it stops: its
    followers' fetches stop answering, and an ISR it shrank to itself would take the
    partition offline with it. It shrinks none, so the controller fails each over to an
    in-sync follower when the broker's session ends."""
    settings = {"controlled.shutdown.enable": False}
    with LocalCluster(zk_connect, tmp_path, settings=settings) as cluster:
        def failed_over(stopping: int, led: list[int]) -> None:
            assert "controlled shutdown" not in cluster.log_text(stopping)
            # its acks=all appends were answered, not left to the end of the drain
            assert "still busy at shutdown" not in cluster.log_text(stopping)
            cluster.wait_for(lambda: all(
                cluster.describe("failing", b)[p].leader not in (-1, stopping)
                for p in led for b in cluster.running()), 60, what="leaders failed over")

        stop_the_busiest_leader(cluster, "failing", failed_over)


def test_rolling_restart_loses_nothing(zk_connect, tmp_path):
    topic = "rolling"
    with LocalCluster(zk_connect, tmp_path) as cluster:
        cluster.create_topic(topic, PARTITIONS, 3, TOPIC_CONFIGS)
        producer = ContinuousProducer(cluster.bootstrap, topic)
        producer.start()
        try:
            for broker_id in sorted(cluster.brokers):
                asked = next(b for b in cluster.running() if b != broker_id)
                cluster.wait_for(lambda a=asked: fully_replicated(cluster, topic, a), 90,
                                 what="every ISR whole before the next restart")
                more_acks(cluster, producer, 100,
                          f"writes acknowledged before restarting {broker_id}")
                cluster.restart(broker_id)  # SIGTERM (exit 0 asserted), then start again
            cluster.wait_for(lambda: fully_replicated(cluster, topic, 1), 90,
                             what="every ISR whole after the last restart")
            more_acks(cluster, producer, 100, "writes acknowledged after the rolling restart")
        finally:
            producer.stop()
        assert offline_transitions(cluster) == []
        for broker_id in cluster.brokers:
            assert shrunk_to_itself(cluster, broker_id) == []
            assert "controlled shutdown: every leadership moved" in cluster.log_text(broker_id)
        check_every_acknowledged_record(cluster, producer, topic)


def test_a_controller_that_stops_answering_is_given_up_for_the_next(zk_connect, tmp_path):
    """The controller ZooKeeper names hangs (SIGSTOP) as a broker stops: the stopping
    broker's ControlledShutdown to it is given up once ZooKeeper names another (the hung
    one's session expired), and the next one moves the leaderships, whatever
    controller.socket.timeout.ms says (ten minutes here, which the test would not
    outlast). The hung controller's session lasts 6 s, so that the stopping broker asks
    it first even on a loaded machine."""
    settings = {"controller.socket.timeout.ms": 600_000, "zookeeper.session.timeout.ms": 6000}
    with LocalCluster(zk_connect, tmp_path, settings=settings) as cluster:
        cluster.create_topic("handover", PARTITIONS, 3, TOPIC_CONFIGS)
        hung = cluster.controller_id()
        before = cluster.describe("handover")
        stopping = max((b for b in cluster.running() if b != hung),
                       key=lambda b: len(led_by(before, b)))
        assert led_by(before, stopping)
        cluster.pause(hung)
        assert cluster.stop(stopping) == 0
        text = cluster.log_text(stopping)
        assert "controlled shutdown, attempt 1 of 3: no controller answered" in text
        assert "controlled shutdown: every leadership moved" in text
        stays = next(b for b in cluster.running())
        after = cluster.describe("handover", stays)
        assert all(after[p].leader not in (-1, stopping) for p in range(PARTITIONS)), after
        cluster.resume(hung)


def test_the_only_in_sync_replica_still_shuts_down(zk_connect, tmp_path):
    settings = {"controlled.shutdown.retry.backoff.ms": 200}
    with LocalCluster(zk_connect, tmp_path, settings=settings) as cluster:
        cluster.create_topic("only", assignment=[[1, 2]])
        _check_refusals(cluster)
        assert cluster.stop(2) == 0  # leaves the ISR: 1 is its only member
        cluster.wait_for(lambda: cluster.describe("only", 1)[0].isr == [1], 60,
                         what="only-0's ISR down to broker 1")

        assert cluster.stop(1) == 0
        text = cluster.log_text(1)
        assert text.count("no other in-sync replica can lead only-0") == 3
        assert "attempt 3 of 3: no other in-sync replica can lead only-0" in text
        assert ("controlled shutdown failed after 3 attempts; shutting down anyway, still "
                "leading only-0") in text
        assert "shutdown complete" in text
        # offline until 1 is back, as in Kafka, once the controller has seen 1 go
        cluster.wait_for(lambda: cluster.describe("only", 3)[0].leader == -1, 60,
                         what="only-0 offline")
        assert cluster.describe("only", 3)[0].isr == [1]


def _check_refusals(cluster: LocalCluster) -> None:
    """ControlledShutdown on the control channel, as a broker sends it: NOT_CONTROLLER
    from a broker that is not the controller, STALE_BROKER_EPOCH for a broker epoch older
    than the live registration's; neither moves anything."""
    controller = cluster.controller_id()
    other = next(b for b in cluster.running() if b != controller)
    found = cluster.registration(other)
    assert found is not None
    epoch = found[1]
    answer = cluster.control_request(other, CONTROLLED_SHUTDOWN, VERSION,
                                     {"broker_id": other, "broker_epoch": epoch})
    assert (answer["error_code"], answer["remaining_partitions"]) == (NOT_CONTROLLER, [])
    answer = cluster.control_request(controller, CONTROLLED_SHUTDOWN, VERSION,
                                     {"broker_id": other, "broker_epoch": epoch - 1})
    assert (answer["error_code"], answer["remaining_partitions"]) == (STALE_BROKER_EPOCH, [])
    assert fully_replicated_only(cluster)


def fully_replicated_only(cluster: LocalCluster) -> bool:
    info = cluster.describe("only")[0]
    return (info.leader, sorted(info.isr)) == (1, [1, 2])

"""Group coordinators move with ``__consumer_offsets`` leadership (issue 7): three brokers,
a consumer group commits offsets through its coordinator (the leader of the group's
offsets partition), the coordinator's broker is SIGKILLed, and the group finds the new
coordinator and resumes exactly from its committed offsets: no acknowledged commit is
lost, since a commit is answered only once the offsets partition's ISR has it.

Twice: first with the group empty at the kill (a new member resumes where the last one
committed), then with a member in the group that committed up to the kill and goes on
committing through the next coordinator to the end of the topic.

And a deleted topic's committed offsets are dropped by the group's coordinator, whichever
brokers held the topic: every broker hears of the deletion (UpdateMetadata).
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.cluster.harness import LocalCluster

TOPIC = "group-failover"
PARTITIONS = 3
PER_PARTITION = 40
COMMITTED = 25  # the group commits up to this offset of each partition before the kill
MIDDLE = 32     # and up to this one before the second kill
GROUP = "failover-group"
FIND_COORDINATOR = 10
WAIT = 60.0


def coordinator_of(cluster: LocalCluster, broker_id: int | None = None) -> int | None:
    """The group's coordinator as one broker names it (None: not available yet)."""
    answer = cluster.request(broker_id, FIND_COORDINATOR, 3, {"key": GROUP, "key_type": 0})
    return answer["node_id"] if answer["error_code"] == 0 else None


def consumer(bootstrap: str) -> Any:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})


def produce(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.produce(TOPIC, value=f"{p}-{i}".encode(), partition=p)
    assert producer.flush(WAIT) == 0


def consume_and_commit(cluster: LocalCluster) -> None:
    """Read every partition up to ``COMMITTED``, committing after each record (synchronous
    commits: each acknowledged by the coordinator), then leave the group."""
    c = consumer(cluster.bootstrap)
    c.subscribe([TOPIC])
    done: set[int] = set()
    try:
        cluster.wait_for(lambda: _poll_and_commit(c, done), WAIT, interval=0,
                         what=f"offsets up to {COMMITTED} committed on every partition")
        committed = c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)],
                                timeout=WAIT)
        assert {tp.partition: tp.offset for tp in committed} == \
            dict.fromkeys(range(PARTITIONS), COMMITTED)
    finally:
        c.close()


def _poll_and_commit(c: Any, done: set[int]) -> bool:
    msg = c.poll(0.2)
    if msg is not None and not msg.error() and msg.offset() < COMMITTED:
        c.commit(offsets=[TopicPartition(TOPIC, msg.partition(), msg.offset() + 1)],
                 asynchronous=False)
        if msg.offset() + 1 == COMMITTED:
            done.add(msg.partition())
    return len(done) == PARTITIONS


def committed(cluster: LocalCluster, topic: str = TOPIC) -> dict[int, int]:
    """The group's committed offsets, asked by a client that is no member."""
    c = consumer(cluster.bootstrap)
    try:
        found = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                            timeout=WAIT)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in found}


class Member:
    """A member that commits after each record: ``acked`` is what its coordinator
    acknowledged (a refused commit is retried with the next poll)."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.consumer = consumer(cluster.bootstrap)
        self.consumer.subscribe([TOPIC])
        self.first: dict[int, int] = {}
        self.acked: dict[int, int] = {}
        self._read: dict[int, int] = {}  # the offset after the last record read

    def run_until(self, offset: int, what: str) -> None:
        """Consume and commit until every partition's commit reached ``offset``."""
        def step() -> bool:
            self._poll(offset)
            return all(self.acked.get(p) == offset for p in range(PARTITIONS))

        self.cluster.wait_for(step, WAIT, interval=0, what=what)

    def _poll(self, limit: int) -> None:
        """One poll, then a commit of what was read, up to ``limit`` (records read past it
        are committed by a later call with a higher one: the consumer will not read them
        again)."""
        msg = self.consumer.poll(0.2)
        if msg is not None and not msg.error():
            p, o = msg.partition(), msg.offset()
            self.first.setdefault(p, o)
            self._read[p] = max(self._read.get(p, 0), o + 1)
        due = {p: min(o, limit) for p, o in self._read.items()
               if min(o, limit) > self.acked.get(p, 0)}
        if due:
            try:
                self.consumer.commit(offsets=[TopicPartition(TOPIC, p, o)
                                              for p, o in due.items()], asynchronous=False)
            except KafkaException:
                return  # coordinator moving or a rebalance: retried next time
            self.acked.update(due)

    def close(self) -> None:
        self.consumer.close()


def test_group_resumes_from_its_commits_after_the_coordinator_is_killed(
        zk_connect: str, tmp_path: Any, cluster_security: str) -> None:
    with LocalCluster(zk_connect, tmp_path, security=cluster_security) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS, 3)
        produce(cluster.bootstrap)
        # the first FindCoordinator creates __consumer_offsets; then every broker names
        # the same coordinator
        first = cluster.wait_for(lambda: coordinator_of(cluster), WAIT,
                                 what="a coordinator for the group")
        assert {coordinator_of(cluster, b) for b in cluster.running()} == {first}
        consume_and_commit(cluster)

        # an empty group's coordinator dies: a new member starts where the commits were
        second = kill_coordinator(cluster, first)
        member = Member(cluster)
        try:
            member.run_until(MIDDLE, f"commits up to {MIDDLE}")
            assert member.first == dict.fromkeys(range(PARTITIONS), COMMITTED)

            # a member's coordinator dies: nothing it was told was committed is lost, and
            # it goes on committing through the next one
            kill_coordinator(cluster, second)
            assert committed(cluster) == dict.fromkeys(range(PARTITIONS), MIDDLE)
            member.run_until(PER_PARTITION, "commits to the end through the new coordinator")
        finally:
            member.close()
        assert committed(cluster) == dict.fromkeys(range(PARTITIONS), PER_PARTITION)


def kill_coordinator(cluster: LocalCluster, old: int) -> int:
    """SIGKILL the coordinator; returns the next one, once every running broker names it."""
    cluster.kill(old)

    def agreed() -> int | None:
        # each broker learns the new leaders from the controller on its own time
        named = {coordinator_of(cluster, b) for b in cluster.running()}
        return named.pop() if len(named) == 1 and not named & {None, old} else None

    return cluster.wait_for(agreed, WAIT, what="every running broker naming a new coordinator")


def test_a_deleted_topics_offsets_are_dropped(zk_connect: str, tmp_path: Any) -> None:
    with LocalCluster(zk_connect, tmp_path) as cluster:
        cluster.create_topic("doomed", PARTITIONS, 1)  # on some brokers only
        cluster.create_topic(TOPIC, PARTITIONS, 3)
        cluster.wait_for(lambda: coordinator_of(cluster), WAIT, what="a coordinator")
        c = consumer(cluster.bootstrap)
        try:
            c.commit(offsets=[TopicPartition(topic, p, 5) for topic in ("doomed", TOPIC)
                              for p in range(PARTITIONS)], asynchronous=False)
        finally:
            c.close()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for future in admin.delete_topics(["doomed"], operation_timeout=WAIT).values():
            future.result(timeout=WAIT)
        cluster.wait_for(lambda: committed(cluster, "doomed") == dict.fromkeys(
            range(PARTITIONS), -1001), WAIT, what="the deleted topic's offsets dropped")
        assert committed(cluster) == dict.fromkeys(range(PARTITIONS), 5)

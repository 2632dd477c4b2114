"""ElectLeaders on three brokers (auto.leader.rebalance.enable=false, so that only the
elections asked for move leadership back).

Preferred: broker 1, the preferred replica of three partitions, is stopped (SIGTERM: its
controlled shutdown hands the leaderships over) and started again; once it is back in
every ISR the partitions are still led elsewhere, then each is given back to it by a
different client: confluent-kafka's ``elect_leaders`` (sent to the controller), an exact
request to a broker that is not the controller (handed to the controller over the
control channel), and ``pybroker partition elect``. A producer and a consumer run
throughout: every acknowledged record is read back.

Unclean: a partition whose only ISR member is stopped while the other replica, outside
the ISR, is alive stays offline (unclean.leader.election.enable is false) until an
unclean ElectLeaders gives it that replica, with an ISR of it alone; it then takes
writes and reads. The answers of the cases around it are checked on the way.
"""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.broker.wire_client import WireClient
from tests.cli.test_cli import pybroker
from tests.cluster.harness import (
    CLIENT_LOG,
    PRODUCE,
    ContinuousProducer,
    LocalCluster,
    PartitionInfo,
    TailingConsumer,
    produce_body,
    produce_error,
    read_all,
)

ELECT_LEADERS = 43
PREFERRED, UNCLEAN = 0, 1
NONE, UNKNOWN, PREFERRED_NOT_AVAILABLE, ELIGIBLE_NOT_AVAILABLE, NOT_NEEDED = 0, 3, 80, 83, 84
NO_REBALANCE = {"auto.leader.rebalance.enable": False}


def elect(cluster: LocalCluster, broker_id: int, election_type: int,
          partitions: dict[str, list[int]] | None, version: int = 2) -> dict:
    body: dict = {"election_type": election_type, "timeout_ms": 30000,
                  "topic_partitions": None if partitions is None else [
                      {"topic": t, "partitions": ps} for t, ps in partitions.items()]}
    with WireClient(cluster.address(broker_id)) as client:
        return client.request(ELECT_LEADERS, version, body)


def codes(answer: dict) -> dict[tuple[str, int], int]:
    assert answer.get("error_code", 0) == 0, answer
    return {(t["topic"], p["partition_id"]): p["error_code"]
            for t in answer["replica_election_results"] for p in t["partition_result"]}


def every_partition(cluster: LocalCluster, topic: str,
                    check: Callable[[PartitionInfo], bool]) -> bool:
    """Whether ``check`` holds for each partition of ``topic``, as broker 2 (never stopped
    here) says: a broker just started may not know the topic yet."""
    partitions = cluster.describe(topic, 2)
    return bool(partitions) and all(check(p) for p in partitions.values())


def not_controller(cluster: LocalCluster) -> int:
    controller = cluster.controller_id()
    return next(b for b in cluster.running() if b != controller)


def test_preferred_leaders_elected_back_by_every_client(zk_connect, tmp_path):
    topic = "pref"
    with LocalCluster(zk_connect, tmp_path, settings=NO_REBALANCE) as cluster:
        cluster.create_topic(topic, assignment=[[1, 2, 3], [1, 3, 2], [1, 2, 3]])
        producer = ContinuousProducer(cluster.bootstrap, topic)
        reader = TailingConsumer(cluster.bootstrap, topic, 3)
        producer.start()
        reader.start()
        try:
            cluster.wait_for(lambda: len(producer.acked) >= 100, 60, what="100 acks")
            assert cluster.stop(1) == 0
            cluster.wait_for(lambda: every_partition(cluster, topic,
                                                     lambda p: p.leader not in (-1, 1)),
                             60, what="every partition led away from broker 1")
            cluster.restart(1)
            cluster.wait_for(lambda: every_partition(cluster, topic,
                                                     lambda p: sorted(p.isr) == [1, 2, 3]),
                             90, what="broker 1 back in every ISR")
            assert every_partition(cluster, topic, lambda p: p.leader != 1)
            _elect_each_way(cluster, topic)
            mark = len(producer.acked)
            cluster.wait_for(lambda: len(producer.acked) >= mark + 100, 60,
                             what="writes acknowledged after the elections")
        finally:
            producer.stop()
            reader.stop()
        assert not producer.fatal, producer.fatal
        final = read_all(cluster.bootstrap, topic, 3, at_least=producer.acked_ends())
        for partition, offset, n in producer.acked:
            assert final[partition].get(offset) == str(n).encode(), (partition, offset, n)
        for partition, offset, value in reader.seen:
            assert final[partition][offset] == value


def _elect_each_way(cluster: LocalCluster, topic: str) -> None:
    def led_by_1(partition: int) -> bool:
        return cluster.describe(topic)[partition].leader == 1

    # confluent-kafka: the request goes to the controller
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "logger": CLIENT_LOG})
    results = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(60)
    assert {(tp.topic, tp.partition): error for tp, error in results.items()} == {
        (topic, 0): None}
    cluster.wait_for(lambda: led_by_1(0), 30, what="partition 0 led by broker 1")

    # an exact request to a broker that is not the controller; the answer waits until
    # that broker's metadata shows the new leader
    asked = not_controller(cluster)
    assert codes(elect(cluster, asked, PREFERRED, {topic: [1, 0]})) == {
        (topic, 1): NONE, (topic, 0): NOT_NEEDED}
    assert cluster.describe(topic, asked)[1].leader == 1

    # the command line
    done = pybroker(cluster, "partition", "elect", "--type", "preferred", "--topic", topic)
    assert done.stderr == b""
    assert done.stdout.decode().splitlines() == [
        f"{topic}-0: election not needed", f"{topic}-1: election not needed",
        f"{topic}-2: elected (preferred)"]
    cluster.wait_for(lambda: led_by_1(2), 30, what="partition 2 led by broker 1")

    # every partition of every topic: those of __consumer_offsets broker 1 led are given
    # back to it, and then none needs an election
    answer = elect(cluster, not_controller(cluster), PREFERRED, None)
    assert {t for t, _ in codes(answer)} <= {"__consumer_offsets"}
    assert set(codes(answer).values()) <= {NONE}
    answer = elect(cluster, not_controller(cluster), PREFERRED, None)
    assert codes(answer) == {}
    assert sorted(t["topic"] for t in answer["replica_election_results"]) == [
        "__consumer_offsets", topic]


def test_unclean_election_of_an_offline_partition(zk_connect, tmp_path):
    with LocalCluster(zk_connect, tmp_path, settings=NO_REBALANCE) as cluster:
        cluster.create_topic("dirty", assignment=[[1, 2]])
        cluster.create_topic("alone", assignment=[[3]])
        cluster.create_topic("fine", assignment=[[2]])
        assert produce_error(cluster.request(1, PRODUCE, 9, produce_body("dirty", 0, b"a"))) == 0
        cluster.stop(2)  # leaves dirty's ISR
        cluster.wait_for(lambda: cluster.describe("dirty", 1)[0].isr == [1], 60,
                         what="dirty's ISR shrunk to broker 1")
        cluster.stop(1)  # dirty's only ISR member
        cluster.stop(3)  # alone's only replica, for good
        cluster.restart(2)  # alone in the cluster: its controller
        cluster.wait_for(lambda: (p := cluster.describe("fine", 2).get(0)) is not None
                         and p.leader == 2, 60, what="broker 2 leading fine again")
        dirty = cluster.describe("dirty", 2)[0]
        assert (dirty.leader, dirty.isr) == (-1, [1])  # unclean.leader.election.enable=false

        assert codes(elect(cluster, 2, PREFERRED, {"dirty": [0], "nope": [0]})) == {
            ("dirty", 0): PREFERRED_NOT_AVAILABLE, ("nope", 0): UNKNOWN}
        assert codes(elect(cluster, 2, UNCLEAN, {"alone": [0], "dirty": [3]})) == {
            ("alone", 0): ELIGIBLE_NOT_AVAILABLE, ("dirty", 3): UNKNOWN}
        assert codes(elect(cluster, 2, UNCLEAN, {"fine": [0]})) == {("fine", 0): NOT_NEEDED}
        assert codes(elect(cluster, 2, UNCLEAN, {"dirty": [0]})) == {("dirty", 0): NONE}
        dirty = cluster.describe("dirty", 2)[0]
        assert (dirty.leader, dirty.isr) == (2, [2])
        assert produce_error(cluster.request(2, PRODUCE, 9, produce_body("dirty", 0, b"b"))) == 0
        assert cluster.high_watermark("dirty", 0, 2) == 2  # "a" had reached broker 2

        # broker 1 back: the request handed to the controller (broker 2) by broker 1
        cluster.restart(1)
        cluster.wait_for(lambda: (p := cluster.describe("dirty", 1).get(0)) is not None
                         and sorted(p.isr) == [1, 2], 60, what="broker 1 back in dirty's ISR")
        assert codes(elect(cluster, 1, UNCLEAN, {"dirty": [0]})) == {("dirty", 0): NOT_NEEDED}
        assert codes(elect(cluster, 1, PREFERRED, {"dirty": [0]})) == {("dirty", 0): NONE}
        assert cluster.describe("dirty", 1)[0].leader == 1

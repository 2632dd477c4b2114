"""Transactions through failover (issue 14, item 6): brokers SIGKILLed mid-transaction
while confluent-kafka's transactional producer writes to three partitions (replication
factor 3, min.insync.replicas 2, ``__transaction_state`` replicated), and what a
read_committed consumer sees afterwards must match what the producer was told: every
committed record exactly once, nothing of an aborted transaction.

- The coordinator (the leader of the transactional id's ``__transaction_state``
  partition) dies with a transaction open and its records flushed: the producer's commit
  finds the new coordinator, which loaded the transaction from the replicated log.
- The coordinator dies right after it answered EndTxn(commit), with the markers held up
  (the leader of one data partition is stopped): the new coordinator resumes the
  prepared commit and writes every marker.
- The leader of one of the transaction's data partitions dies before the commit: the
  coordinator retries its marker until the new leader takes it.

Each time the killed broker comes back, and every partition's last stable offset reaches
its high watermark once no transaction is open.
"""

from __future__ import annotations

from collections import Counter

from confluent_kafka import KafkaException, Producer

from tests.cluster.harness import CLIENT_LOG, LocalCluster
from tests.cluster.test_cluster_transactions import stable_offsets
from tests.txn.test_coordinator_clients import consume_values

TOPIC = "txn-failover"
PARTITIONS = 3
FIND_COORDINATOR = 10
WAIT = 60.0
SETTINGS = {"transaction.state.log.num.partitions": 3,
            "transaction.state.log.replication.factor": 3,
            "transaction.state.log.min.isr": 2,
            "min.insync.replicas": 2}


def test_coordinator_failover_with_a_transaction_open(zk_connect, tmp_path, cluster_security):
    with LocalCluster(zk_connect, tmp_path, settings=SETTINGS,
                      security=cluster_security) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        producer = _producer(cluster, "coordinator-dies")
        committed = []
        for n in range(2):
            committed.append(_transaction(producer, b"before-%d" % n))
            assert _commit(producer) == "committed"
        coordinator = _coordinator(cluster, "coordinator-dies")
        open_values = _transaction(producer, b"open")

        cluster.kill(coordinator)
        outcome = _commit(producer)
        if outcome == "committed":
            committed.append(open_values)
        else:  # a new instance fences the old one and aborts what it left open
            _producer(cluster, "coordinator-dies")
        expected = [v for values in committed for v in values]
        seen = consume_values(cluster.bootstrap, TOPIC, "read_committed", len(expected), WAIT)
        _assert_exactly(seen, expected, f"after a commit answered {outcome}")

        _rejoin(cluster, coordinator)


def test_new_coordinator_resumes_a_prepared_commit(zk_connect, tmp_path):
    # __transaction_state on two brokers, a data partition led by the third: stopping
    # the third holds up the commit's markers but not the commit's own write. With
    # min.isr 1 the new coordinator completes the transaction while the old one is down.
    settings = {**SETTINGS, "transaction.state.log.replication.factor": 2,
                "transaction.state.log.min.isr": 1}
    with LocalCluster(zk_connect, tmp_path, settings=settings) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        transactional_id = "prepared-commit"
        producer = _producer(cluster, transactional_id)
        coordinator = _coordinator(cluster, transactional_id)
        state_replicas = _state_replicas(cluster, transactional_id)
        assert coordinator in state_replicas and len(state_replicas) == 2, state_replicas
        (outsider,) = set(cluster.brokers) - set(state_replicas)
        cluster.wait_for(lambda: _leader_among(cluster, {outsider}), WAIT,
                         what=f"broker {outsider} leading a partition of {TOPIC}")

        values = _transaction(producer, b"prepared")
        cluster.pause(outsider)
        try:
            assert _commit(producer) == "committed"  # PrepareCommit written, answered
            cluster.kill(coordinator)
        finally:
            cluster.resume(outsider)
        seen = consume_values(cluster.bootstrap, TOPIC, "read_committed", len(values), WAIT)
        _assert_exactly(seen, values, "after the coordinator died in PrepareCommit")
        _wait_stable(cluster)  # every marker written, the old coordinator still down

        _rejoin(cluster, coordinator)


def test_partition_leader_failover_with_a_transaction_open(zk_connect, tmp_path):
    with LocalCluster(zk_connect, tmp_path, settings=SETTINGS) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        transactional_id = "leader-dies"
        producer = _producer(cluster, transactional_id)
        first = _transaction(producer, b"before")
        assert _commit(producer) == "committed"
        coordinator = _coordinator(cluster, transactional_id)
        others = set(cluster.brokers) - {coordinator}
        victim = cluster.wait_for(lambda: _leader_among(cluster, others), WAIT,
                                  what=f"a partition led by another broker than {coordinator}")

        second = _transaction(producer, b"open")
        cluster.kill(victim)
        assert _commit(producer) == "committed"
        _transaction(producer, b"aborted")  # read_committed must not see it
        producer.abort_transaction(WAIT)
        seen = consume_values(cluster.bootstrap, TOPIC, "read_committed",
                              len(first) + len(second), WAIT)
        _assert_exactly(seen, first + second, "after a partition leader died")

        _rejoin(cluster, victim)


# -- the producer -----------------------------------------------------------------------

def _producer(cluster: LocalCluster, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": cluster.bootstrap,
                         "transactional.id": transactional_id,
                         "topic.metadata.refresh.interval.ms": 1000,
                         "logger": CLIENT_LOG})
    producer.init_transactions(WAIT)
    return producer


def _transaction(producer: Producer, prefix: bytes) -> list[bytes]:
    """Begins a transaction and writes two records to every partition, flushed: they are
    in the logs, not yet committed. Returns their values."""
    producer.begin_transaction()
    values = []
    for partition in range(PARTITIONS):
        for i in range(2):
            values.append(b"%s-%d-%d" % (prefix, partition, i))
            producer.produce(TOPIC, values[-1], partition=partition)
    assert producer.flush(WAIT) == 0
    return values


def _commit(producer: Producer) -> str:
    """Commits as librdkafka's documentation says to: a retriable error means the outcome
    is not known yet, so commit again; an abortable one means abort. Returns "committed",
    "aborted" or "fatal" (the client can do nothing more: its transactional id goes to a
    new instance)."""
    while True:
        try:
            producer.commit_transaction(WAIT)
            return "committed"
        except KafkaException as exc:
            error = exc.args[0]
            if error.retriable():
                continue
            if error.txn_requires_abort():
                producer.abort_transaction(WAIT)
                return "aborted"
            assert error.fatal(), error
            return "fatal"


# -- what the cluster says --------------------------------------------------------------

def _coordinator(cluster: LocalCluster, transactional_id: str) -> int:
    def find() -> int | None:
        found = cluster.request(None, FIND_COORDINATOR, 3,
                                {"key": transactional_id, "key_type": 1})
        return found["node_id"] if found["error_code"] == 0 else None

    return cluster.wait_for(find, WAIT, what=f"the coordinator of {transactional_id}")


def _state_replicas(cluster: LocalCluster, transactional_id: str) -> list[int]:
    from pybroker.txn.records import partition_of

    index = partition_of(transactional_id, SETTINGS["transaction.state.log.num.partitions"])
    return cluster.describe("__transaction_state")[index].replicas


def _leader_among(cluster: LocalCluster, brokers: set[int]) -> int | None:
    """One of ``brokers`` that leads a partition of TOPIC (a preferred leader may take a
    moment to lead again), None while none does."""
    leaders = {info.leader for info in cluster.describe(TOPIC).values()} & brokers
    return min(leaders, default=None)


def _rejoin(cluster: LocalCluster, broker_id: int) -> None:
    """Restarts a killed broker; once it is back in every ISR and no transaction is open,
    every partition's last stable offset is its high watermark."""
    cluster.restart(broker_id)
    cluster.wait_for(lambda: _whole_isr(cluster), WAIT,
                     what=f"broker {broker_id} back in every ISR of {TOPIC}")
    _wait_stable(cluster)


def _wait_stable(cluster: LocalCluster) -> None:
    for partition in range(PARTITIONS):
        cluster.wait_for(lambda p=partition: _stable(cluster, p), WAIT,
                         what=f"{TOPIC}-{partition}: last stable offset at the high "
                              "watermark")


def _whole_isr(cluster: LocalCluster) -> bool:
    # a broker restarted a moment ago answers Metadata without the topic until the
    # controller has sent it the topic's partitions
    partitions = cluster.describe(TOPIC)
    return len(partitions) == PARTITIONS and all(len(p.isr) == 3 for p in partitions.values())


def _stable(cluster: LocalCluster, partition: int) -> bool:
    info = cluster.describe(TOPIC).get(partition)
    if info is None or info.leader < 0:
        return False
    offsets = stable_offsets(cluster, TOPIC, partition, info.leader)
    return offsets is not None and offsets[0] == offsets[1] > 0


def _assert_exactly(seen: list[bytes], expected: list[bytes], when: str) -> None:
    counts = Counter(seen)
    lost = sorted(set(expected) - set(counts))
    doubled = sorted(v for v, n in counts.items() if n > 1)
    foreign = sorted(set(counts) - set(expected))
    assert not (lost or doubled or foreign), (
        f"read_committed {when}: lost {lost}, seen twice {doubled}, not committed {foreign}")

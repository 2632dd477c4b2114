"""Transactions across brokers: the transaction coordinator (the leader of the
transactional id's ``__transaction_state`` partition) writes the markers of partitions
led by other brokers through WriteTxnMarkers to their leaders (``MarkerWriter``), so a
read_committed consumer sees every committed transaction on every partition, and none of
the aborted ones, and each partition's last stable offset reaches its high watermark.
A partition leader asks a coordinator on another broker whether a partition is in a
transaction before it writes the transaction's first batch there (KIP-890)."""

from __future__ import annotations

from confluent_kafka import Producer

from pybroker._native.records import encode_batch
from pybroker.errors import ErrorCode
from tests.cluster.harness import LocalCluster
from tests.txn.test_coordinator_clients import consume_values

TOPIC = "txn-across"
PARTITIONS = 3
TRANSACTIONAL_ID = "across-brokers"
PRODUCE, FETCH, FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, END_TXN = \
    0, 1, 10, 22, 24, 26
WAIT = 60.0


def test_markers_reach_the_partitions_other_brokers_lead(zk_connect, tmp_path, cluster_security):
    settings = {"transaction.state.log.num.partitions": 3}
    with LocalCluster(zk_connect, tmp_path, size=3, settings=settings,
                      security=cluster_security) as cluster:
        cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=2)
        producer = Producer({"bootstrap.servers": cluster.bootstrap,
                             "transactional.id": TRANSACTIONAL_ID})
        producer.init_transactions(WAIT)
        found = cluster.request(None, FIND_COORDINATOR, 3,
                                {"key": TRANSACTIONAL_ID, "key_type": 1})
        assert found["error_code"] == 0
        leaders = {p: info.leader for p, info in cluster.describe(TOPIC).items()}
        assert set(leaders.values()) - {found["node_id"]}, \
            f"every partition led by the coordinator {found['node_id']}: {leaders}"
        for round_, commit in enumerate((True, False, True)):
            producer.begin_transaction()
            for p in range(PARTITIONS):
                producer.produce(TOPIC, b"%s-%d-%d" % (b"c" if commit else b"a", round_, p),
                                 partition=p)
            assert producer.flush(WAIT) == 0
            if commit:
                producer.commit_transaction(WAIT)
            else:
                producer.abort_transaction(WAIT)
        values = consume_values(cluster.bootstrap, TOPIC, "read_committed", 2 * PARTITIONS)
        assert sorted(values) == sorted(b"c-%d-%d" % (r, p) for r in (0, 2)
                                        for p in range(PARTITIONS))
        for p, leader in leaders.items():
            # three records and three markers, all stable
            assert stable_offsets(cluster, TOPIC, p, leader) == (6, 6)


def stable_offsets(cluster: LocalCluster, topic: str, partition: int,
                   leader: int) -> tuple[int, int] | None:
    """(high watermark, last stable offset) of a partition as its leader answers a
    read_committed Fetch; None when it refuses (it does not lead the partition now)."""
    answer = cluster.request(leader, FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 1, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [
            {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
             "current_leader_epoch": -1, "log_start_offset": -1}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    fetched = answer["responses"][0]["partitions"][0]
    if fetched["error_code"] != 0:
        return None
    return fetched["high_watermark"], fetched["last_stable_offset"]


def test_a_leader_asks_the_coordinator_on_another_broker(zk_connect, tmp_path, cluster_security):
    settings = {"transaction.state.log.num.partitions": 3}
    with LocalCluster(zk_connect, tmp_path, size=3, settings=settings,
                      security=cluster_security) as cluster:
        cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=2)

        def coordinator() -> int | None:
            found = cluster.request(None, FIND_COORDINATOR, 3,
                                    {"key": TRANSACTIONAL_ID, "key_type": 1})
            return found["node_id"] if found["error_code"] == 0 else None

        coordinator_id = cluster.wait_for(coordinator, WAIT, what="a transaction coordinator")

        def init() -> dict | None:
            answer = cluster.request(coordinator_id, INIT_PRODUCER_ID, 4, {
                "transactional_id": TRANSACTIONAL_ID, "transaction_timeout_ms": 60000,
                "producer_id": -1, "producer_epoch": -1})
            return answer if answer["error_code"] == 0 else None

        producer = cluster.wait_for(init, WAIT, what="a producer id")
        pid, epoch = producer["producer_id"], producer["producer_epoch"]
        leaders = {p: info.leader for p, info in cluster.describe(TOPIC).items()}
        partition, leader = next((p, b) for p, b in leaders.items() if b != coordinator_id)

        def produce(sequence: int) -> int:
            batch = encode_batch([b"v%d" % sequence], producer_id=pid, producer_epoch=epoch,
                                 base_sequence=sequence, transactional=True)
            answer = cluster.request(leader, PRODUCE, 9, {
                "transactional_id": TRANSACTIONAL_ID, "acks": -1, "timeout_ms": 30000,
                "topic_data": [{"name": TOPIC, "partition_data": [
                    {"index": partition, "records": batch}]}]})
            return answer["responses"][0]["partition_responses"][0]["error_code"]

        assert produce(0) == ErrorCode.INVALID_TXN_STATE  # not added to the transaction
        added = cluster.request(coordinator_id, ADD_PARTITIONS, 3, {
            "v3_and_below_transactional_id": TRANSACTIONAL_ID, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": TOPIC, "partitions": [partition]}]})
        assert added["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
            "partition_error_code"] == 0
        assert produce(0) == 0
        ended = cluster.request(coordinator_id, END_TXN, 3, {
            "transactional_id": TRANSACTIONAL_ID, "producer_id": pid, "producer_epoch": epoch,
            "committed": True})
        assert ended["error_code"] == 0
        assert consume_values(cluster.bootstrap, TOPIC, "read_committed", 1) == [b"v0"]

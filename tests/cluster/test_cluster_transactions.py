"""Transactions across brokers: the transaction coordinator (the leader of the
transactional id's ``__transaction_state`` partition) writes the markers of partitions
led by other brokers through WriteTxnMarkers to their leaders (``MarkerWriter``), so a
read_committed consumer sees every committed transaction on every partition, and none of
the aborted ones, and each partition's last stable offset reaches its high watermark."""

from __future__ import annotations

from confluent_kafka import Producer

from tests.cluster.harness import LocalCluster
from tests.txn.test_coordinator_clients import consume_values

TOPIC = "txn-across"
PARTITIONS = 3
TRANSACTIONAL_ID = "across-brokers"
FETCH, FIND_COORDINATOR = 1, 10
WAIT = 60.0


def test_markers_reach_the_partitions_other_brokers_lead(zk_connect, tmp_path):
    settings = {"transaction.state.log.num.partitions": 3}
    with LocalCluster(zk_connect, tmp_path, size=3, settings=settings) as cluster:
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
            answer = cluster.request(leader, FETCH, 11, {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                "isolation_level": 1, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": TOPIC, "partitions": [
                    {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                     "current_leader_epoch": -1, "log_start_offset": -1}]}],
                "forgotten_topics_data": [], "rack_id": ""})
            fetched = answer["responses"][0]["partitions"][0]
            # three records and three markers, all stable
            assert fetched["high_watermark"] == fetched["last_stable_offset"] == 6, fetched

"""``broker.rack`` on a real three-broker cluster, racks a, a, b: each broker registers
its rack in ``/brokers/ids/<id>`` (Kafka's ``rack`` field), the controller carries it in
UpdateMetadata, and every broker reports each broker's rack in Metadata and
DescribeCluster (read here by confluent-kafka). New topics and partitions are placed
rack-aware (each partition of two replicas on both racks), and ``pybroker cluster
rebalance`` plans a topic lying on rack a only so that each partition spans both racks."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.cluster.harness import LocalCluster
from tests.cluster.test_cluster_cli import pybroker
from tests.cluster.test_cluster_rebalance import plan_rows

RACKS = {1: "a", 2: "a", 3: "b"}
# two replicas each, all on rack a
ONE_RACK = [[1, 2], [2, 1], [1, 2], [2, 1]]


@pytest.fixture(scope="module")
def racked(tmp_path_factory, zookeeper):
    with LocalCluster(zookeeper.connect, tmp_path_factory.mktemp("racks"), size=3,
                      broker_settings={b: {"broker.rack": r} for b, r in RACKS.items()}
                      ) as cluster:
        cluster.create_topic("onerack", assignment=ONE_RACK)
        yield cluster


def test_each_broker_registers_its_rack(racked):
    for broker_id, rack in RACKS.items():
        registration = racked.registration(broker_id)
        assert registration is not None and registration[0]["rack"] == rack


def test_every_broker_reports_every_rack_in_metadata(racked):
    for asked in RACKS:
        racked.wait_for(lambda asked=asked: racked.broker_ids(asked) == set(RACKS),
                        what=f"broker {asked} knows every broker")
        answer = racked.metadata([], broker_id=asked)
        assert {b["node_id"]: b["rack"] for b in answer["brokers"]} == RACKS


def test_describe_cluster_reports_racks_to_a_client(racked):
    admin = AdminClient({"bootstrap.servers": racked.bootstrap})
    described = admin.describe_cluster(request_timeout=30).result(timeout=60)
    assert {node.id: node.rack for node in described.nodes} == RACKS


def test_rebalance_puts_each_partition_on_both_racks(racked):
    done = pybroker("cluster", "rebalance", "--topic", "onerack", "-b", racked.bootstrap)
    assert done.returncode == 0, done.stderr
    partitions, brokers = plan_rows(done.stdout, "onerack")
    assert {b: row[0] for b, row in brokers.items()} == RACKS
    targets = {index: [int(b) for b in target.split(",")]
               for index, (_, target) in partitions.items()}
    assert sorted(targets) == list(range(len(ONE_RACK)))  # every partition moves
    for replicas in targets.values():
        assert len(replicas) == 2 and {RACKS[b] for b in replicas} == {"a", "b"}


def test_new_topics_and_partitions_span_both_racks(racked):
    placed = racked.create_topic("placed", partitions=6, replication_factor=2)
    admin = AdminClient({"bootstrap.servers": racked.bootstrap})
    admin.create_partitions([NewPartitions("placed", 9)])["placed"].result(timeout=60)
    racked.wait_for(lambda: len(racked.describe("placed")) == 9, what="placed: 9 partitions")
    grown = racked.describe("placed")
    assert [info.replicas for _, info in sorted(placed.items())] == \
        [grown[p].replicas for p in range(6)]
    for info in grown.values():
        assert {RACKS[b] for b in info.replicas} == {"a", "b"}

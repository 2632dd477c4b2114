"""A cluster whose brokers talk to each other over TLS (``inter.broker.listener.name``
an SSL listener, brokers authenticated by their certificates) while clients have a
PLAINTEXT and an SSL listener on each broker: registrations carry every endpoint, each
client is told the endpoints of the listener it connected on, replication runs over the
SSL listener."""

from __future__ import annotations

import re

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from tests.cluster.harness import LocalCluster
from tests.tls.certs import make_stores

_SSL_LISTENER = re.compile(r"listener SSL \(SSL\) on \S+:(\d+)")


def test_inter_broker_tls(zk_connect, tmp_path):
    stores = make_stores(str(tmp_path))
    settings = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                "inter.broker.listener.name": "SSL",
                "ssl.keystore.location": stores.keystore,
                "ssl.truststore.location": stores.ca,
                "ssl.client.auth": "required"}
    with LocalCluster(zk_connect, tmp_path / "cluster", size=3, settings=settings) as cluster:
        ssl_ports = {i: int(_SSL_LISTENER.findall(cluster.log_text(i))[-1])
                     for i in cluster.brokers}
        registration, _ = cluster.registration(1) or ({}, 0)
        assert registration["endpoints"] == [
            f"PLAINTEXT://127.0.0.1:{cluster.brokers[1].port}",
            f"SSL://127.0.0.1:{ssl_ports[1]}"]
        assert registration["listener_security_protocol_map"] == {
            "PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}
        assert registration["port"] == ssl_ports[1]  # the inter-broker listener's

        cluster.create_topic("replicated", partitions=3, replication_factor=3)
        client = {"bootstrap.servers": f"127.0.0.1:{ssl_ports[1]}",
                  "security.protocol": "SSL", "ssl.ca.location": stores.ca,
                  "ssl.certificate.location": stores.client_cert,
                  "ssl.key.location": stores.client_key}
        brokers = AdminClient(client).list_topics(timeout=30).brokers
        assert {b.id: b.port for b in brokers.values()} == ssl_ports
        plain = {int(b["node_id"]): b["port"] for b in cluster.metadata([])["brokers"]}
        assert plain == {i: b.port for i, b in cluster.brokers.items()}

        values = [f"record-{i}".encode() * 50 for i in range(300)]
        replicated_round_trip(cluster, ssl_ports, client, client, "tls-group", values, "TLS")


def replicated_round_trip(cluster: LocalCluster, inter_broker_ports: dict[int, int],
                          producer_config: dict, consumer_config: dict, group: str,
                          values: list[bytes], listener: str) -> None:
    """Produce ``values`` to the 3-replica topic "replicated" with acks=all, check every
    follower fetched from its leaders over the inter-broker listener (``listener``, on
    ``inter_broker_ports``), and consume them all back in group ``group``."""
    producer = Producer({**producer_config, "acks": "all"})
    for value in values:
        producer.produce("replicated", value)
    assert producer.flush(60) == 0
    # acks=all with an ISR of three: every follower fetched them over the listener
    partitions = cluster.describe("replicated")
    assert all(sorted(p.isr) == [1, 2, 3] for p in partitions.values())
    for follower in cluster.brokers:
        log = cluster.log_text(follower)
        for leader in {p.leader for p in partitions.values()} - {follower}:
            assert f"PeerClient(127.0.0.1:{inter_broker_ports[leader]}): connected" in log

    consumer = Consumer({**consumer_config, "group.id": group,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["replicated"])
    received: list[bytes] = []
    # interval 0: the poll itself waits for a record, and yields one at a time
    cluster.wait_for(lambda: _poll(consumer, received) >= len(values), 60,
                     what=f"every record consumed over {listener}", interval=0)
    consumer.close()
    assert sorted(received) == sorted(values)


def _poll(consumer: Consumer, into: list[bytes]) -> int:
    msg = consumer.poll(0.5)
    if msg is not None and msg.error() is None:
        into.append(msg.value())
    return len(into)

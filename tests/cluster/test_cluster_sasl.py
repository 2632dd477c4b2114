"""A cluster whose brokers talk to each other over SASL_SSL (TLS, and each broker
authenticated with SCRAM as the user ``broker``, a super user of the authorizer) while
clients have a PLAINTEXT and a SASL_SSL listener on each broker: replication runs over the
SASL_SSL listener, and SCRAM credentials made through one broker authenticate clients
on every broker."""

from __future__ import annotations

import re

from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.cluster.harness import LocalCluster
from tests.cluster.test_cluster_tls import replicated_round_trip
from tests.tls.certs import make_stores

_SASL_SSL_LISTENER = re.compile(r"listener SASL_SSL \(SASL_SSL\) on \S+:(\d+)")
SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
              'username="broker" password="broker-secret";')


def _add_user(bootstrap: str, user: str, password: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until answered
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion(user, ScramCredentialInfo(
            ScramMechanism.SCRAM_SHA_512, 4096), password.encode())])
    for future in futures.values():
        future.result(timeout=30)


def test_inter_broker_sasl_ssl(zk_connect, tmp_path):
    stores = make_stores(str(tmp_path))
    settings = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                "inter.broker.listener.name": "SASL_SSL",
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "sasl.jaas.config": SCRAM_JAAS,
                "ssl.keystore.location": stores.keystore,
                "ssl.truststore.location": stores.ca,
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "super.users": "User:broker;User:ANONYMOUS;User:alice"}
    with LocalCluster(zk_connect, tmp_path / "cluster", size=3, settings=settings) as cluster:
        ports = {i: int(_SASL_SSL_LISTENER.findall(cluster.log_text(i))[-1])
                 for i in cluster.brokers}
        # the brokers' own user, made through broker 1's PLAINTEXT listener: until then
        # their connections to each other are refused and retried
        _add_user(f"127.0.0.1:{cluster.brokers[1].port}", "broker", "broker-secret")
        _add_user(f"127.0.0.1:{cluster.brokers[1].port}", "alice", "alice-secret")
        cluster.create_topic("replicated", partitions=3, replication_factor=3)

        def client(broker_id: int) -> dict:
            return {"bootstrap.servers": f"127.0.0.1:{ports[broker_id]}",
                    "security.protocol": "SASL_SSL", "ssl.ca.location": stores.ca,
                    "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice",
                    "sasl.password": "alice-secret"}

        values = [f"record-{i}".encode() * 20 for i in range(200)]
        replicated_round_trip(cluster, ports, client(2), client(3), "sasl-group", values,
                              "SASL_SSL")


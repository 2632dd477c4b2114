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

from tests.cluster.harness import (
    INTER_BROKER_PASSWORD,
    INTER_BROKER_USER,
    LocalCluster,
    sasl_ssl_settings,
)
from tests.cluster.test_cluster_tls import replicated_round_trip

_SASL_SSL_LISTENER = re.compile(r"listener SASL_SSL \(SASL_SSL\) on \S+:(\d+)")


def _add_user(bootstrap: str, user: str, password: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until answered
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion(user, ScramCredentialInfo(
            ScramMechanism.SCRAM_SHA_512, 4096), password.encode())])
    for future in futures.values():
        future.result(timeout=30)


def test_inter_broker_sasl_ssl(zk_connect, tmp_path):
    # the harness's secured settings given as the test's own: no credential is written
    # for the brokers before they start (the harness's sasl_ssl mode writes one)
    settings = {**sasl_ssl_settings(str(tmp_path)),
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "super.users": f"User:{INTER_BROKER_USER};User:ANONYMOUS;User:alice"}
    ca = settings["ssl.truststore.location"]
    with LocalCluster(zk_connect, tmp_path / "cluster", size=3, settings=settings) as cluster:
        ports = {i: int(_SASL_SSL_LISTENER.findall(cluster.log_text(i))[-1])
                 for i in cluster.brokers}
        # the brokers' own user, made through broker 1's PLAINTEXT listener: until then
        # their connections to each other are refused and retried
        _add_user(f"127.0.0.1:{cluster.brokers[1].port}", INTER_BROKER_USER,
                  INTER_BROKER_PASSWORD)
        _add_user(f"127.0.0.1:{cluster.brokers[1].port}", "alice", "alice-secret")
        cluster.create_topic("replicated", partitions=3, replication_factor=3)

        def client(broker_id: int) -> dict:
            return {"bootstrap.servers": f"127.0.0.1:{ports[broker_id]}",
                    "security.protocol": "SASL_SSL", "ssl.ca.location": ca,
                    "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice",
                    "sasl.password": "alice-secret"}

        values = [f"record-{i}".encode() * 20 for i in range(200)]
        replicated_round_trip(cluster, ports, client(2), client(3), "sasl-group", values,
                              "SASL_SSL")


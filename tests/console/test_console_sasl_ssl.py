"""The console of a broker whose only listener is SASL_SSL: it connects as the broker
itself (its truststore, and the inter-broker SASL user of the listener's JAAS
configuration), so its pages show what a client authenticated there sees, and the
records it browses and the log sizes it asks each broker for (pybroker's own client,
DescribeLogDirs) come over TLS and SASL too."""

from __future__ import annotations

import urllib.parse
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.console.helpers import console_url, fetch, parse
from tests.console.test_console_http import SIZE
from tests.tls.certs import make_stores

TIMEOUT = 30.0
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" '
        'user_admin="admin-secret" user_alice="alice-secret";')


def test_console_of_a_sasl_ssl_only_broker(broker_factory: Any, tmp_path: Any) -> None:
    stores = make_stores(str(tmp_path))
    broker = broker_factory(listeners="SASL_SSL://127.0.0.1:0",
                            sasl_enabled_mechanisms="PLAIN",
                            sasl_mechanism_inter_broker_protocol="PLAIN",
                            sasl_jaas_config=JAAS,
                            ssl_keystore_location=stores.keystore,
                            ssl_truststore_location=stores.ca,
                            metrics_listener="127.0.0.1:0")
    alice = {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_SSL",
             "ssl.ca.location": stores.ca, "sasl.mechanisms": "PLAIN",
             "sasl.username": "alice", "sasl.password": "alice-secret"}
    admin = AdminClient(alice)  # referenced until it answered
    admin.create_topics([NewTopic("secured", 1, 1)])["secured"].result(TIMEOUT)
    producer = Producer(alice)
    for i in range(3):
        producer.produce("secured", f"record-{i}".encode(), key=b"k")
    assert producer.flush(TIMEOUT) == 0

    url = console_url(broker)
    status, text = fetch(f"{url}/topic?name=secured")
    assert status == 200, text
    partitions = parse(text).tables["partitions"]
    assert [row[4:6] for row in partitions] == [["0", "3"]]  # watermarks: ListOffsets
    assert SIZE.match(partitions[0][7]) and partitions[0][7] != "0 B", partitions

    query = urllib.parse.urlencode({"topic": "secured", "partition": 0, "offset": 0})
    status, text = fetch(f"{url}/records?{query}")
    assert status == 200, text
    assert [row[3] for row in parse(text).tables["records"]] == [
        "record-0", "record-1", "record-2"]

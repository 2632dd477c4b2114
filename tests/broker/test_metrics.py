"""``metrics.listener``: Prometheus's parser reads ``GET /metrics`` of a broker that real
clients produce to and consume from, and the figures match what they did."""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.admin.clients import create_topic, unique
from tests.broker.prometheus import metrics_url, scrape
from tests.broker.wire_client import WireClient, fetch_body

RECORDS = 10
API_VERSIONS, METADATA, FETCH = 18, 3, 1
HISTOGRAM = "kafka_network_requestmetrics_totaltime_seconds"
DASHBOARD = os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "grafana",
                         "pybroker.json")
METRIC_NAME = re.compile(r"\b(?:kafka|pybroker)_[a-z0-9_]+")
COMMITTED = 3


@pytest.fixture(scope="module")
def metrics_broker(module_broker_factory):
    return module_broker_factory(metrics_listener="127.0.0.1:0")


def test_metrics_report_what_clients_did(metrics_broker):
    bootstrap, topic, group = metrics_broker.bootstrap, unique("metrics"), unique("group")
    create_topic(bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    payload = b"x" * 100
    for _ in range(RECORDS):
        producer.produce(topic, payload, partition=0)
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    received = 0
    for _ in range(300):
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            received += 1
        if received == RECORDS:
            break
    assert received == RECORDS
    consumer.commit(offsets=[TopicPartition(topic, 0, COMMITTED)], asynchronous=False)
    try:
        values = scrape(metrics_url(metrics_broker))
    finally:
        consumer.close()

    def value(name: str, **labels: str) -> float:
        return values[(name, tuple(sorted(labels.items())))]

    assert value("kafka_server_brokertopicmetrics_bytesin_total", topic=topic) \
        >= RECORDS * len(payload)
    assert value("kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == RECORDS
    assert value("kafka_server_brokertopicmetrics_bytesout_total", topic=topic) \
        >= RECORDS * len(payload)
    assert value("kafka_network_requestmetrics_requests_total", request="Produce") >= 1
    assert value("kafka_network_requestmetrics_requests_total", request="OffsetCommit") >= 1
    assert value("kafka_log_log_size", topic=topic, partition="0") \
        >= RECORDS * len(payload)
    assert value("kafka_log_log_size", topic=topic, partition="1") == 0
    assert value("kafka_log_log_numlogsegments", topic=topic, partition="0") == 1
    # the high watermark of partition 0 is RECORDS; the group committed COMMITTED
    assert value("pybroker_group_lag", group=group, topic=topic, partition="0") \
        == RECORDS - COMMITTED
    assert value("pybroker_group_state", group=group, state="Stable") == 1
    assert value("pybroker_group_members", group=group) == 1
    partitions = value("kafka_server_replicamanager_partitioncount")
    assert partitions >= 2  # this topic's, and the internal topics'
    assert value("kafka_server_replicamanager_leadercount") == partitions
    assert value("kafka_server_replicamanager_underreplicatedpartitions") == 0
    stats = metrics_broker.stats()  # the stats file: the same counters, a moment later
    assert 0 < value("pybroker_zero_copy_bytes_total") + value("pybroker_copied_bytes_total") \
        <= stats["zero_copy_bytes"] + stats["copied_bytes"]


def test_request_times_are_a_histogram_per_api(metrics_broker):
    """Every answered request is counted once in its API's histogram, whichever way the
    connection served it: answered inline, pipelined behind others (the worker), or
    parked by its handler (a long-polling fetch)."""
    bootstrap, topic = metrics_broker.bootstrap, unique("timed")
    create_topic(bootstrap, topic)
    base = metrics_url(metrics_broker)
    before = scrape(base)
    with WireClient(bootstrap) as client:
        for _ in range(5):
            client.request(API_VERSIONS, 3, {})
        for _ in range(20):  # sent before any is read: queued on the connection
            client.send(METADATA, 12, {"topics": None})
        for _ in range(20):
            client.read_frame()
        client.request(FETCH, 12, fetch_body(topic, 0, 0, max_wait_ms=50))
    after = scrape(base)
    bounds = sorted(float(dict(labels)["le"]) for name, labels in after
                    if name == HISTOGRAM + "_bucket" and ("request", "Fetch") in labels)
    assert bounds[-1] == float("inf") and len(bounds) > 10

    def made(api: str) -> float:
        def count(values: dict, suffix: str, le: str | None = None) -> float:
            labels = (("le", le), ("request", api)) if le else (("request", api),)
            return values.get((HISTOGRAM + suffix, labels), 0)
        buckets = [count(after, "_bucket", _le(bound)) for bound in bounds]
        assert buckets == sorted(buckets), f"{api}: buckets are cumulative"
        assert buckets[-1] == count(after, "_count")
        assert count(after, "_sum") >= count(before, "_sum")
        return count(after, "_count") - count(before, "_count")

    assert made("ApiVersions") == 5
    assert made("Metadata") == 20
    assert made("Fetch") == 1


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def test_single_node_cluster_figures(metrics_broker):
    values = scrape(metrics_url(metrics_broker))
    assert values[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1
    assert values[("kafka_controller_kafkacontroller_offlinepartitionscount", ())] == 0
    assert values[("kafka_server_replicamanager_underminisrpartitioncount", ())] == 0
    assert values[("kafka_server_replicamanager_isrshrinks_total", ())] == 0
    assert values[("pybroker_network_threads", ())] == 3  # num.network.threads' default
    assert values[("pybroker_event_loop_cpu_seconds_total", ())] > 0
    # served from the start (tests/broker/test_cold_reads.py makes them count)
    assert values[("pybroker_cold_regions_total", ())] >= 0
    assert values[("pybroker_cold_read_threads_busy_seconds_total", ())] >= 0


def test_the_grafana_dashboard_queries_what_a_broker_serves(metrics_broker):
    """``deploy/grafana/pybroker.json`` is a dashboard whose every query names metrics a
    broker that clients used serves samples of."""
    with open(DASHBOARD, encoding="utf-8") as f:
        dashboard = json.load(f)
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "instance"} <= variables
    queried = set()
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            queried |= set(METRIC_NAME.findall(target["expr"]))
    assert len(queried) > 20

    bootstrap, topic, group = metrics_broker.bootstrap, unique("dashboard"), unique("group")
    create_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    producer.produce(topic, b"x", partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
        served = {name for name, _ in scrape(metrics_url(metrics_broker))}
    finally:
        consumer.close()
    assert queried - served == set()


def test_other_paths_are_not_found(metrics_broker):
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(metrics_url(metrics_broker) + "/nowhere", timeout=10)
    assert refused.value.code == 404


def test_scrapes_while_clients_produce(metrics_broker):
    bootstrap, topic = metrics_broker.bootstrap, unique("scraped")
    create_topic(bootstrap, topic)
    base = metrics_url(metrics_broker)
    scrapes: list[float] = []
    done = threading.Event()

    def scrape_until_done() -> None:
        while not done.is_set():
            scrapes.append(scrape(base).get(
                ("kafka_server_brokertopicmetrics_messagesin_total", (("topic", topic),)), 0))

    scraper = threading.Thread(target=scrape_until_done)
    scraper.start()
    delivered: list[int] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    try:
        for i in range(2000):
            producer.produce(topic, str(i).encode(),
                             on_delivery=lambda err, msg: delivered.append(err is None))
            producer.poll(0)
        assert producer.flush(30) == 0
    finally:
        done.set()
        scraper.join()
    assert len(delivered) == 2000 and all(delivered)
    assert scrapes and scrapes == sorted(scrapes)  # a counter never goes back
    assert scrape(base)[("kafka_server_brokertopicmetrics_messagesin_total",
                         (("topic", topic),))] == 2000


def test_a_metrics_port_in_use_stops_the_start_with_a_line(broker_factory):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match="cannot start"):
            broker_factory(metrics_listener=f"127.0.0.1:{port}")

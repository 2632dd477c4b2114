"""kafka-python's producer and consumer work unchanged under quotas they go far over:
throttled (their connections muted, fetches answered empty), every record is written
once and read back in order, none fails."""

from __future__ import annotations

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.admin.clients import create_topic, unique
from tests.broker.prometheus import metrics_url, scrape
from tests.conftest import BrokerProcess
from tests.quota.quota_clients import alter

RECORDS = 50
QUOTA = 10_000  # bytes a second: the 50 KB below take about five seconds each way


def test_kafka_python_under_produce_and_fetch_quotas(broker_factory) -> None:
    broker: BrokerProcess = broker_factory(quota_window_num=2,
                                           metrics_listener="127.0.0.1:0")
    topic = unique("kp-quota")
    create_topic(broker.bootstrap, topic)
    assert alter(broker.bootstrap, {"client-id": "kp"},
                 {"producer_byte_rate": QUOTA, "consumer_byte_rate": QUOTA})["error_code"] == 0
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, client_id="kp",
                             batch_size=2048, linger_ms=0)
    futures = [producer.send(topic, b"%04d" % i + b"x" * 996, partition=0)
               for i in range(RECORDS)]
    producer.flush(60)
    assert [f.get(timeout=60).offset for f in futures] == list(range(RECORDS))
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, client_id="kp",
                             enable_auto_commit=False, max_partition_fetch_bytes=4096)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    values: list[bytes] = []
    for _ in range(200):
        if len(values) >= RECORDS:
            break
        values += [r.value for r in consumer.poll(timeout_ms=300).get(tp, [])]
    consumer.close()
    assert [v[:4] for v in values] == [b"%04d" % i for i in range(RECORDS)]
    metrics = scrape(metrics_url(broker))
    entity = (("client_id", "kp"), ("user", ""))
    assert metrics[("kafka_server_produce_throttle_time_ms_total", entity)] > 0
    assert metrics[("kafka_server_fetch_throttle_time_ms_total", entity)] > 0

"""The pybroker PySpark data source on a real local Spark and a real broker."""

import json
import os
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.partitioner.default import murmur2
from pyspark.sql import functions as F

pytestmark = pytest.mark.slow

PARTITIONS = 4


def create_topic(bootstrap, name, partitions=PARTITIONS):
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def consume_all(bootstrap, topic, partitions, expected, timeout=60):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False, "fetch.max.bytes": 50 << 20})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, deadline = [], time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        for m in consumer.consume(100_000, timeout=2):
            assert m.error() is None, m.error()
            got.append((m.partition(), m.key(), m.value(), m.headers()))
    consumer.close()
    return got


def test_batch_write_of_a_million_rows_reads_back_everywhere(spark, module_broker):
    bootstrap, topic = module_broker.bootstrap, "spark-million"
    create_topic(bootstrap, topic)
    n = 1_000_000
    df = spark.range(n).select(
        F.format_string("key-%d", F.col("id") % 5000).alias("key"),
        F.format_string("value-%d", F.col("id")).alias("value"),
        F.array(F.struct(F.lit("row").alias("key"),
                         F.col("id").cast("string").cast("binary").alias("value"))
                ).alias("headers"))
    (df.write.format("pybroker").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", topic).mode("append").save())

    # Another Kafka client sees every row, in the partition Java's partitioner picks.
    messages = consume_all(bootstrap, topic, PARTITIONS, n)
    assert len(messages) == n
    seen = set()
    for partition, key, value, headers in messages:
        row = int(value[6:])
        assert key == b"key-%d" % (row % 5000)
        assert partition == (murmur2(key) & 0x7FFFFFFF) % PARTITIONS
        assert headers == [("row", b"%d" % row)]
        seen.add(row)
    assert seen == set(range(n))

    # And the pybroker reader gives the same rows with Spark's Kafka source schema: the
    # headers column only with includeHeaders=true, as there.
    plain = (spark.read.format("pybroker").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).load())
    assert plain.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                             "timestampType"]
    assert plain.selectExpr("count(*) AS n", "sum(length(value)) AS v").collect()[0] == \
        (n, sum(len(m[2]) for m in messages))
    read = (spark.read.format("pybroker").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("includeHeaders", "true").load())
    assert read.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                            "timestampType", "headers"]
    assert read.count() == n
    summary = read.select(
        F.count_distinct("value").alias("distinct_values"),
        F.sum(F.when(F.col("headers")[0]["value"].cast("string") ==
                     F.expr("substring(cast(value as string), 7)"), 1).otherwise(0)
              ).alias("headers_match"),
        F.min("offset").alias("min_offset")).collect()[0]
    assert summary["distinct_values"] == n
    assert summary["headers_match"] == n
    assert summary["min_offset"] == 0
    per_partition = {r["partition"]: r["count"]
                     for r in read.groupBy("partition").count().collect()}
    from collections import Counter
    assert per_partition == dict(Counter(p for p, *_ in messages))


def test_starting_and_ending_offsets(spark, module_broker):
    bootstrap, topic = module_broker.bootstrap, "spark-ranges"
    create_topic(bootstrap, topic, 1)
    spark.range(100).select(F.col("id").cast("string").alias("value")) \
        .write.format("pybroker").option("kafka.bootstrap.servers", bootstrap) \
        .option("topic", topic).mode("append").save()
    read = (spark.read.format("pybroker").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", json.dumps({topic: {"0": 10}}))
            .option("endingOffsets", json.dumps({topic: {"0": 25}})).load())
    assert [r["offset"] for r in read.orderBy("offset").collect()] == list(range(10, 25))


def test_stream_from_rate_source_into_the_broker(spark, module_broker, tmp_path):
    bootstrap, topic = module_broker.bootstrap, "spark-rate"
    create_topic(bootstrap, topic, 2)
    query = (spark.readStream.format("rate").option("rowsPerSecond", 2000).load()
             .select(F.col("value").cast("string").alias("key"),
                     F.col("value").cast("string").alias("value"))
             .writeStream.format("pybroker").option("kafka.bootstrap.servers", bootstrap)
             .option("topic", topic).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="1 second").start())
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(
                p["numInputRows"] for p in query.recentProgress) < 4000:
            time.sleep(0.5)
    finally:
        query.stop()
    written = sum(p["numInputRows"] for p in query.recentProgress)
    assert written >= 4000
    messages = consume_all(bootstrap, topic, 2, written)
    values = {int(v) for _, _, v, _ in messages}
    # At-least-once: nothing the sink committed is missing (duplicates would be allowed).
    # The committed micro-batches hold the rate source's first `written` values; the one
    # the stop cancelled may have sent some of its batches (each partition's batches are
    # sent as they fill, so what it left is not a prefix), and is not checked.
    assert set(range(written)) <= values


def test_stream_read_restarts_from_its_checkpoint(spark, module_broker, tmp_path):
    bootstrap, topic = module_broker.bootstrap, "spark-stream-in"
    create_topic(bootstrap, topic, 2)

    def produce(start, count):
        spark.range(start, start + count).select(
            F.col("id").cast("string").alias("key"), F.col("id").cast("string").alias("value")) \
            .write.format("pybroker").option("kafka.bootstrap.servers", bootstrap) \
            .option("topic", topic).mode("append").save()

    def run_available_now():
        query = (spark.readStream.format("pybroker")
                 .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
                 .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 3000)
                 .load().select("partition", "offset", F.col("value").cast("string"))
                 .writeStream.format("parquet").option("path", str(tmp_path / "out"))
                 .option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        return query

    produce(0, 10_000)
    first = run_available_now()
    assert all(p["numInputRows"] <= 3000 for p in first.recentProgress)
    assert sum(p["numInputRows"] for p in first.recentProgress) == 10_000
    produce(10_000, 5_000)
    second = run_available_now()
    assert sum(p["numInputRows"] for p in second.recentProgress) == 5_000
    out = spark.read.parquet(str(tmp_path / "out"))
    assert out.count() == 15_000
    assert {int(r["value"]) for r in out.select("value").collect()} == set(range(15_000))
    assert os.path.isdir(tmp_path / "cp" / "offsets")

"""Exactly-once writes and read_committed reads of the pybroker data source, on a real
local Spark (tests/spark/conftest.py: a failed task is retried once, as on a cluster) and
a real broker."""

import time

import pyarrow as pa
import pytest
from pyspark import TaskContext
from pyspark.sql import functions as F

from pybroker.client import READ_COMMITTED, BulkProducer, Cluster
from tests.spark.test_spark import create_topic

pytestmark = pytest.mark.slow


def read(spark, bootstrap, topic, isolation):
    return (spark.read.format("pybroker").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("kafka.isolation.level", isolation).load())


def values_seen(df):
    """(rows, distinct values) of a read."""
    row = df.select(F.count("*").alias("n"), F.count_distinct("value").alias("d")).collect()[0]
    return row["n"], row["d"]


def wait_for_rows(bootstrap, topic):
    """Until some rows of the topic reached the broker (from a Spark task: a UDF that
    fails its task only once the writer has sent something)."""
    cluster = Cluster(bootstrap)
    try:
        deadline = time.monotonic() + 30
        while sum(cluster.list_offsets(topic, -1)) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        cluster.close()


def test_exactly_once_write_is_visible_once_committed(spark, module_broker):
    bootstrap, topic = module_broker.bootstrap, "eos-write"
    create_topic(bootstrap, topic, 3)
    n = 50_000
    df = spark.range(0, n, 1, 4).select(
        F.format_string("key-%d", F.col("id") % 101).alias("key"),
        F.col("id").cast("string").alias("value"))
    (df.write.format("pybroker").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", topic).option("exactlyOnce", "true")
     .option("kafka.batch.size", 16384).mode("append").save())

    assert values_seen(read(spark, bootstrap, topic, "read_committed")) == (n, n)
    # The four tasks' transactions are committed: nothing is left open on any partition.
    cluster = Cluster(bootstrap)
    try:
        assert cluster.list_offsets(topic, -1, READ_COMMITTED) == cluster.list_offsets(topic, -1)
    finally:
        cluster.close()


@pytest.fixture
def small_arrow_batches(spark):
    """Arrow batches of 1,000 rows to the writer instead of Spark's 10,000, for the test
    that fails a task once the writer has sent rows: with 10,000-row batches none reached
    the writer before its UDF's wait for them ran out (30 s)."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, "1000")
    yield
    spark.conf.set(key, before)


@pytest.mark.usefixtures("small_arrow_batches")
def test_a_retried_task_leaves_no_duplicates(spark, module_broker):
    bootstrap, topic = module_broker.bootstrap, "eos-retry"
    create_topic(bootstrap, topic, 2)
    n = 20_000

    @F.udf("string")
    def fail_first_attempt(row):
        """The row as a string; the first attempt fails at row 15,000 of its 20,000, once
        some of the rows before it reached the broker (the writer sends them as its
        4 KiB batches fill, so the wait is short)."""
        if row == 15_000 and TaskContext.get().attemptNumber() == 0:
            wait_for_rows(bootstrap, topic)
            raise RuntimeError("the first attempt fails")
        return str(row)

    df = spark.range(0, n, 1, 1).select(fail_first_attempt("id").alias("value"))
    (df.write.format("pybroker").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", topic).option("exactlyOnce", "true")
     .option("kafka.batch.size", 4096).mode("append").save())

    # The failed attempt's rows are in the log, aborted: read_committed skips them.
    uncommitted, _ = values_seen(read(spark, bootstrap, topic, "read_uncommitted"))
    assert uncommitted > n
    assert values_seen(read(spark, bootstrap, topic, "read_committed")) == (n, n)


def test_a_failed_write_leaves_nothing_visible(spark, module_broker):
    bootstrap, topic = module_broker.bootstrap, "eos-failed"
    create_topic(bootstrap, topic, 2)

    @F.udf("string")
    def fail_in_partition_1(row):
        """Partition 1 fails on every attempt, once partition 0 has sent rows."""
        if TaskContext.get().partitionId() == 1 and row % 10_000 == 5_000:
            wait_for_rows(bootstrap, topic)
            raise RuntimeError("partition 1 fails on every attempt")
        return str(row)

    df = spark.range(0, 20_000, 1, 2).select(fail_in_partition_1("id").alias("value"))
    with pytest.raises(Exception, match="partition 1 fails"):
        (df.write.format("pybroker").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", topic).option("exactlyOnce", "true")
         .option("kafka.transaction.timeout.ms", 10_000)
         .option("kafka.batch.size", 4096).mode("append").save())

    # Every transaction of the write ends aborted: by the failing task, by the driver's
    # abort of the write, or at the latest by its timeout (a task killed mid-way).
    cluster = Cluster(bootstrap)
    try:
        deadline = time.monotonic() + 60
        while cluster.list_offsets(topic, -1, READ_COMMITTED) != \
                cluster.list_offsets(topic, -1) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert cluster.list_offsets(topic, -1, READ_COMMITTED) == cluster.list_offsets(topic, -1)
    finally:
        cluster.close()
    assert read(spark, bootstrap, topic, "read_uncommitted").count() > 0
    assert read(spark, bootstrap, topic, "read_committed").count() == 0


def test_read_committed_skips_an_aborted_transaction(spark, module_broker, tmp_path):
    bootstrap, topic = module_broker.bootstrap, "eos-read"
    create_topic(bootstrap, topic, 2)

    def rows(tag, count=5_000):
        return pa.array([b"%s-%d" % (tag, i) for i in range(count)])

    with BulkProducer(bootstrap, transactional_id="eos-read-writer",
                      batch_bytes=8192) as producer:
        for tag, commit in ((b"first", True), (b"aborted", False), (b"second", True)):
            producer.begin_transaction()
            producer.send_arrow(topic, rows(tag))
            producer.flush()
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
        producer.begin_transaction()  # left open: read_committed stops before it
        producer.send_arrow(topic, rows(b"open"))
        producer.flush()

        committed = read(spark, bootstrap, topic, "read_committed")
        tags = {r["tag"]: r["count"] for r in committed.groupBy(
            F.substring_index(F.col("value").cast("string"), "-", 1).alias("tag"))
            .count().collect()}
        assert tags == {"first": 5_000, "second": 5_000}
        assert read(spark, bootstrap, topic, "read_uncommitted").count() == 20_000

        # A streaming read_committed read gets the same rows, and an exactlyOnce
        # streaming write (a transaction per task and micro-batch) passes them on.
        create_topic(bootstrap, f"{topic}-copy", 2)
        query = (spark.readStream.format("pybroker")
                 .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
                 .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 4000)
                 .option("kafka.isolation.level", "read_committed").load()
                 .select("value")
                 .writeStream.format("pybroker").option("kafka.bootstrap.servers", bootstrap)
                 .option("topic", f"{topic}-copy").option("exactlyOnce", "true")
                 .option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert len(query.recentProgress) >= 3  # several micro-batches, each committed
        copied = read(spark, bootstrap, f"{topic}-copy", "read_committed")
        assert sorted(r["value"].decode() for r in copied.select("value").collect()) == \
            sorted([f"first-{i}" for i in range(5_000)] +
                   [f"second-{i}" for i in range(5_000)])
        producer.abort_transaction()

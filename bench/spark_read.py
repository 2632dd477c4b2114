"""Spark read benchmark: the ``pybroker`` batch reader against the fastest Python clients.

    python3 -m bench.spark_read [--rows 2000000] [--rounds 3] [--readers S,P,K,A] [--out DIR]

A broker this script starts (temporary data dir, free port) gets one topic of
``--partitions`` partitions holding ``--rows`` rows of ``--key-bytes`` keys and
``--value-bytes`` values (written once, by the bulk producer, before any timing). Then the
readers take turns, round by round (S P K A S P K A ...), each reading the whole topic from
the earliest offsets:

  S  spark      ``spark.read.format("pybroker")`` on ``local[2]``, materialised by
                ``count(*), sum(length(key)), sum(length(value))`` (Spark reads every key
                and value column to answer)
  P  pybroker   ``Fetcher.read_range`` of every partition in turn, in this one process:
                the native decoder into Arrow columns (the engine of S's tasks)
  K  confluent  one confluent-kafka Consumer assigned every partition from the beginning,
                ``consume(num_messages=10000)`` until every row came (librdkafka's fetcher
                threads decode; Python touches each message once, in the list)
  A  aiokafka   one AIOKafkaConsumer, ``getmany(max_records=10000)`` until every row came
  L  kafka-python  one KafkaConsumer, ``poll(max_records=10000)``; slow: not by default

Every round is checked for completeness (rows read == ``--rows``). A warm-up of each reader
on a small topic (untimed) loads modules and Spark's Python workers first, and one untimed
S read of the whole topic lets Spark's JIT compile its row conversion (the first full
read took 5x as long as the next ones). The figure per reader is the
median rows/s of its rounds; the verdict (issue 18: S >= the fastest Python client) is on
the median per round of S over the best client of that round, since the load of a shared
host drifts between rounds. Results go to ``DIR/spark_read.json`` and ``DIR/spark_read.md``
and the Markdown is printed with the exact command, the date and the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from typing import Any

from bench.driver.local_broker import LocalBroker
from bench.spark_ingest import (
    add_common_arguments,
    check_common_arguments,
    command_line,
    create_topic,
    machine_facts,
    publish,
    start_spark,
)

SCHEMA = "pybroker-spark-read/1"
READERS = {"S": "spark format(\"pybroker\")", "P": "pybroker Fetcher.read_range",
           "K": "confluent-kafka consume()", "A": "aiokafka getmany()",
           "L": "kafka-python poll()"}
CLIENTS = "PKAL"
BATCH = 10_000


def fill_topic(bootstrap: str, topic: str, rows: int, key_bytes: int,
               value_bytes: int) -> None:
    """``rows`` rows with distinct keys, in Arrow batches through the bulk producer."""
    import pyarrow as pa

    from pybroker.client import BulkProducer
    chunk = 100_000
    with BulkProducer(bootstrap, client_id="bench-spark-read") as producer:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            ids = [str(i).encode() for i in range(start, start + n)]
            keys = pa.array([i.rjust(key_bytes, b"k") for i in ids], pa.binary())
            values = pa.array([(i + b":").ljust(value_bytes, b"v") for i in ids], pa.binary())
            producer.send_arrow(topic, values, keys)


# -- the readers: each returns the rows it read --------------------------------------------------

def read_spark(spark, bootstrap: str, topic: str) -> int:
    row = spark.read.format("pybroker").option("kafka.bootstrap.servers", bootstrap) \
        .option("subscribe", topic).load() \
        .selectExpr("count(*) AS n", "sum(length(key)) AS k", "sum(length(value)) AS v") \
        .collect()[0]
    return int(row["n"])


def read_pybroker(bootstrap: str, topic: str) -> int:
    from pybroker.client import Cluster, Fetcher
    from pybroker.spark.options import EARLIEST, LATEST
    cluster = Cluster(bootstrap, "bench-spark-read")
    try:
        starts, ends = cluster.list_offsets(topic, EARLIEST), cluster.list_offsets(topic, LATEST)
        fetcher = Fetcher(cluster)
        rows = 0
        for p, (start, end) in enumerate(zip(starts, ends, strict=True)):
            for cols in fetcher.read_range(topic, p, start, end):
                rows += len(cols["value"])
        return rows
    finally:
        cluster.close()


def read_confluent(bootstrap: str, topic: str, partitions: int, rows: int) -> int:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-spark-read",
                         "enable.auto.commit": False, "fetch.max.bytes": 64 << 20,
                         "max.partition.fetch.bytes": 8 << 20})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got = 0
        while got < rows:
            messages = consumer.consume(num_messages=BATCH, timeout=1.0)
            got += len(messages)
            if messages and messages[-1].error():
                raise RuntimeError(f"confluent-kafka: {messages[-1].error()}")
        return got
    finally:
        consumer.close()


def read_aiokafka(bootstrap: str, topic: str, partitions: int, rows: int) -> int:
    async def run() -> int:
        from aiokafka import AIOKafkaConsumer, TopicPartition
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    fetch_max_bytes=64 << 20,
                                    max_partition_fetch_bytes=8 << 20)
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            got = 0
            while got < rows:
                batches = await consumer.getmany(timeout_ms=1000, max_records=BATCH)
                got += sum(len(b) for b in batches.values())
            return got
        finally:
            await consumer.stop()
    return asyncio.run(run())


def read_kafka_python(bootstrap: str, topic: str, partitions: int, rows: int) -> int:
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             fetch_max_bytes=64 << 20, max_partition_fetch_bytes=8 << 20)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got = 0
        while got < rows:
            batches = consumer.poll(timeout_ms=1000, max_records=BATCH)
            got += sum(len(b) for b in batches.values())
        return got
    finally:
        consumer.close()


def read_once(reader: str, spark, bootstrap: str, topic: str, partitions: int,
              rows: int) -> tuple[float, int]:
    start = time.perf_counter()
    if reader == "S":
        got = read_spark(spark, bootstrap, topic)
    elif reader == "P":
        got = read_pybroker(bootstrap, topic)
    elif reader == "K":
        got = read_confluent(bootstrap, topic, partitions, rows)
    elif reader == "A":
        got = read_aiokafka(bootstrap, topic, partitions, rows)
    else:
        got = read_kafka_python(bootstrap, topic, partitions, rows)
    return time.perf_counter() - start, got


# -- the report ------------------------------------------------------------------------------

def summarise(rounds: list[dict[str, Any]], args: argparse.Namespace, command: str,
              started_at: str, machine: dict[str, Any]) -> dict[str, Any]:
    readers = {}
    for key in args.readers:
        rates = [r["rows_per_s"] for r in rounds if r["reader"] == key]
        readers[key] = {"name": READERS[key], "rows_per_s": rates,
                        "median_rows_per_s": round(statistics.median(rates), 1)}
    clients = [k for k in args.readers if k in CLIENTS]
    per_round = []
    if "S" in readers and clients:
        for number in range(1, args.rounds + 1):
            rate = {r["reader"]: r["rows_per_s"] for r in rounds if r["round"] == number}
            best = max(clients, key=lambda k: rate[k])
            per_round.append({"round": number, "best_client": best,
                              "s_over_best": round(rate["S"] / rate[best], 3)})
    verdict = statistics.median(r["s_over_best"] for r in per_round) if per_round else None
    return {
        "schema": SCHEMA, "command": command, "started_at": started_at, "machine": machine,
        "config": {"master": args.master, "rows": args.rows, "key_bytes": args.key_bytes,
                   "value_bytes": args.value_bytes, "partitions": args.partitions,
                   "rounds": args.rounds, "readers": args.readers},
        "rounds": rounds, "readers": readers,
        "ratios": {"per_round": per_round, "s_over_best_paired": verdict,
                   "met": verdict is not None and verdict >= 1.0},
    }


def markdown(result: dict[str, Any]) -> str:
    m, cfg, ratios = result["machine"], result["config"], result["ratios"]
    lines = [
        "# Spark read: the pybroker reader vs the fastest Python clients", "",
        f"`{result['command']}`", "",
        f"{result['started_at']} on {m['host']}: {m['nproc']} cpus ({m['cpu_model']}), "
        f"kernel {m['kernel']}, Python {m['python']}, pyspark {m['pyspark']}, "
        f"pyarrow {m['pyarrow']}, librdkafka {m['librdkafka']}, load average at start "
        f"{', '.join(f'{x:.2f}' for x in m['loadavg_at_start'])}.",
        f"`{cfg['master']}` for Spark; {cfg['rows']:,} rows of {cfg['key_bytes']} B keys and "
        f"{cfg['value_bytes']} B values in {cfg['partitions']} partitions, {cfg['rounds']} "
        "rounds, median per reader.", "",
        "| reader | median rows/s | rows/s per round |", "|---|---:|---|",
    ]
    for key, r in result["readers"].items():
        rates = ", ".join(f"{x:,.0f}" for x in r["rows_per_s"])
        lines.append(f"| {key} {r['name']} | {r['median_rows_per_s']:,.0f} | {rates} |")
    if ratios["per_round"]:
        per_round = ", ".join(f"{r['s_over_best']:.2f} ({r['best_client']})"
                              for r in ratios["per_round"])
        lines += ["", f"S over the fastest client of each round: {per_round}; median "
                  f"**{ratios['s_over_best_paired']:.2f}** (target >= 1.00: "
                  f"{'met' if ratios['met'] else 'MISSED'})."]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python3 -m bench.spark_read",
                                     description=__doc__.split("\n\n")[0])
    add_common_arguments(parser)
    parser.add_argument("--readers", default="SPKA",
                        help=f"letters of the readers to run, of {''.join(READERS)}")
    parser.add_argument("--out", help="directory for spark_read.json and spark_read.md")
    args = parser.parse_args(argv)
    args.readers = "".join(dict.fromkeys(args.readers.replace(",", "").upper()))
    if not args.readers or set(args.readers) - set(READERS):
        parser.error(f"--readers takes letters of {''.join(READERS)}")
    check_common_arguments(parser, args)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = command_line("bench.spark_read", argv)
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    machine = machine_facts()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="pybroker-spark-read-") as workdir, \
            LocalBroker(workdir) as broker:
        spark = None
        try:
            topic, warm = "read-all", "read-warm"
            for name, rows in ((topic, args.rows), (warm, min(args.rows, 20_000))):
                create_topic(broker.bootstrap, name, args.partitions)
                fill_topic(broker.bootstrap, name, rows, args.key_bytes, args.value_bytes)
            spark = start_spark(args) if "S" in args.readers else None
            for reader in args.readers:
                read_once(reader, spark, broker.bootstrap, warm, args.partitions,
                          min(args.rows, 20_000))
            if spark is not None:  # Spark's JIT: its first full read was 5x slower
                read_once("S", spark, broker.bootstrap, topic, args.partitions, args.rows)
            for number in range(1, args.rounds + 1):
                for reader in args.readers:
                    seconds, got = read_once(reader, spark, broker.bootstrap, topic,
                                             args.partitions, args.rows)
                    if got != args.rows:
                        raise RuntimeError(f"round {number} reader {reader}: read {got} "
                                           f"rows, expected {args.rows}")
                    rounds.append({"round": number, "reader": reader,
                                   "seconds": round(seconds, 4),
                                   "rows_per_s": round(args.rows / seconds, 1)})
                    print(f"[round {number}] {reader} {READERS[reader]}: {seconds:.3f} s, "
                          f"{args.rows / seconds:,.0f} rows/s", file=sys.stderr, flush=True)
        finally:
            if spark is not None:
                spark.stop()
    result = summarise(rounds, args, command, started_at, machine)
    publish(result, markdown(result), args.out, "spark_read")
    return 0


if __name__ == "__main__":
    if __package__ in (None, ""):  # run as a file: make `bench` and `pybroker` importable
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())

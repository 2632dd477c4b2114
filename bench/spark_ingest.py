"""Spark ingest benchmark: the ``pybroker`` data source against its ceiling and the usual way.

    python3 -m bench.spark_ingest [--rows 2000000] [--rounds 3] [--out DIR] [--profile]

One run on ``local[2]`` writes the same cached DataFrame (``--rows`` rows of
``--key-bytes`` keys and ``--value-bytes`` values; cached and counted before any timing)
with three writers, in alternating rounds (A B C A B C ...), each A and C round to a fresh
topic of ``--partitions`` partitions on a broker this script starts (temporary data dir,
free port) and stops:

  A  pybroker    ``df.write.format("pybroker")``: Arrow batches -> native murmur2 ->
                 native record batches -> pipelined Produce requests
  B  ceiling     a Python data source whose ``DataSourceArrowWriter`` only sums
                 ``batch.nbytes``: what Spark costs before any byte is sent
  C  confluent   ``foreachPartition`` with a confluent-kafka Producer per partition,
                 ``produce()`` per row, ``flush()`` at the end (linger.ms=5, ~1 MB batches,
                 acks=all, idempotence on)

With ``--profile``, one more A write after the timed rounds (untimed: py-spy slows what
it samples) is recorded with ``py-spy record --native`` on Spark's Python workers:
``pyspy-A.folded`` (folded stacks) and ``profile-A.md`` (shares of the writer's steps and
the hottest frames) go to ``--out``.

Every round is checked, untimed, for completeness: the rows B's tasks saw, and for A and C
the topic's end offsets, must add up to ``--rows``. A warm-up round of each writer on a
small slice (untimed) loads the Python workers' modules first. The figure per writer is
the median rows/s of its rounds; the ratios are given both of those medians and round by
round, and the targets (issue 5: A >= 70% of B, A >= 5x C) are judged on the median of the
per-round ratios, since load on a shared host drifts between rounds.
Results go to ``DIR/spark_ingest.json`` and ``DIR/spark_ingest.md``, and the Markdown is
printed with the exact command, the date and the machine.

Timing never decides a test: tests/bench/test_spark_ingest.py only checks that a tiny run
produces a complete report.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from bench.driver.local_broker import LocalBroker
from bench.driver.procstat import CLOCK_TICKS, BrokerProbe, host_cpu_ticks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = "pybroker-spark-ingest/1"
WRITERS = {"A": "pybroker", "B": "arrow-count (ceiling)", "C": "confluent foreachPartition"}
TARGET_A_OF_B, TARGET_A_OVER_C = 0.70, 5.0
WARMUP_ROWS = 20_000
# Frames of the writer's steps in a Spark Python worker, for --profile: (label, the
# substrings a folded stack must all hold). Shares are inclusive, of the samples of the
# writer's thread (the task's) and of the bulk producer's sender thread.
WRITER_FRAME = "_write_batches ("
PROFILE_STEPS = [
    ("Arrow batches read from the JVM", ("ArrowStreamSerializer.load_stream",)),
    ("BulkProducer.send_arrow", ("BulkProducer.send_arrow (",)),
    ("- murmur2 partitioning (partition_rows)", ("partition_rows",)),
    ("- gather rows by partition (pyarrow take)", ("compute.py:",)),
    ("- appending rows to the open batches (BatchBuilder.append)", ("pb_builder_append",)),
    ("- finishing batches: header, CRC (BatchBuilder.finish)", ("BulkProducer._finish (",
                                                              "finish (pybroker/")),
    ("- waiting for the sender (back-pressure)", ("BulkProducer._finish (", "Condition.wait")),
    ("- waking the sender", ("BulkProducer._wake (",)),
    ("BulkProducer.flush (the last acknowledgements)", ("BulkProducer.flush (",)),
]
SENDER_FRAME = "BulkProducer._run_sender ("
SENDER_STEPS = [
    ("sending Produce requests (sendmsg, and poll while the socket is full)",
     ("BrokerConnection.send_parts (",)),
    ("polling for acknowledgements and new batches", ("_wait_and_receive (", "poll")),
    ("reading and decoding responses (_receive_one)", ("_receive_one (",)),
    ("retries (sleep, metadata refresh)", ("BulkProducer._retry (",)),
]


# -- B: the Spark-side ceiling ---------------------------------------------------------------

@dataclass
class CountCommit(WriterCommitMessage):
    rows: int
    bytes: int


class CountingWriter(DataSourceArrowWriter):
    """Receives the Arrow batches and only counts them; reports totals to a file because
    ``commit`` runs in a Spark Python worker, not in this process."""

    def __init__(self, report_path: str) -> None:
        self.report_path = report_path

    def write(self, iterator) -> CountCommit:
        rows = nbytes = 0
        for batch in iterator:
            rows += batch.num_rows
            nbytes += batch.nbytes
        return CountCommit(rows, nbytes)

    def commit(self, messages) -> None:
        done = [m for m in messages if m is not None]
        with open(self.report_path, "w") as f:
            json.dump({"rows": sum(m.rows for m in done),
                       "bytes": sum(m.bytes for m in done)}, f)


class CountingDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_arrow_count"

    def schema(self) -> str:
        return "key binary, value binary"

    def writer(self, schema, overwrite: bool) -> CountingWriter:
        return CountingWriter(self.options["report"])


# -- C: the usual approach ------------------------------------------------------------------

def confluent_partition_writer(bootstrap: str, topic: str):
    """The function ``foreachPartition`` runs: one Producer per Spark partition."""
    def write(rows) -> None:
        from confluent_kafka import Producer
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                             "batch.size": 1_000_000, "acks": "all",
                             "enable.idempotence": True})
        for row in rows:
            while True:
                try:
                    producer.produce(topic, value=row.value, key=row.key)
                    break
                except BufferError:  # local queue full: serve delivery reports, retry
                    producer.poll(0.05)
        left = producer.flush(120)
        if left:
            raise RuntimeError(f"{left} messages not delivered to {topic}")
    return write


# -- the broker ------------------------------------------------------------------------------



def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def rows_in_topic(bootstrap: str, topic: str) -> int:
    from pybroker.client import Cluster
    cluster = Cluster(bootstrap, "bench-spark-ingest")
    try:
        return sum(cluster.list_offsets(topic, -1)) - sum(cluster.list_offsets(topic, -2))
    finally:
        cluster.close()


# -- the run ---------------------------------------------------------------------------------

def _stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces


def spark_cpu_ticks(jvm_pid: int) -> tuple[int, int]:
    """(JVM, Python workers) clock ticks: the JVM's own threads, and every process below
    it (pyspark.daemon and its forked workers) plus the children they reaped."""
    parents: dict[int, int] = {}
    ticks: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = _stat_fields(int(entry))
        except (OSError, ValueError):
            continue  # exited meanwhile
        parents[int(entry)] = int(fields[1])
        # utime + stime (fields 14, 15); cutime + cstime (16, 17): reaped children
        ticks[int(entry)] = (int(fields[11]) + int(fields[12]),
                             int(fields[13]) + int(fields[14]))
    below: set[int] = set()
    frontier = {jvm_pid}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - below
        below |= frontier
    own, reaped = ticks.get(jvm_pid, (0, 0))
    return own, reaped + sum(sum(ticks[pid]) for pid in below)


def machine_facts() -> dict[str, Any]:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), model)
    except OSError:
        pass
    import pyarrow
    import pyspark
    try:
        import confluent_kafka
        librdkafka = confluent_kafka.libversion()[0]
    except ImportError:
        librdkafka = "unavailable"
    return {"host": platform.node(), "nproc": os.cpu_count(), "cpu_model": model,
            "kernel": platform.release(), "python": platform.python_version(),
            "pyspark": pyspark.__version__, "pyarrow": pyarrow.__version__,
            "librdkafka": librdkafka, "loadavg_at_start": list(os.getloadavg())}


def start_spark(args: argparse.Namespace):
    from pyspark.sql import SparkSession
    env_path = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    spark = (SparkSession.builder.master(args.master)
             .appName("pybroker-spark-ingest")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", args.driver_memory)
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", args.arrow_batch_rows)
             .config("spark.executorEnv.PYTHONPATH", env_path)
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(CountingDataSource)
    return spark


def build_frame(spark, rows: int, key_bytes: int, value_bytes: int, slices: int):
    """Distinct keys of exactly ``key_bytes`` and values of exactly ``value_bytes``."""
    from pyspark.sql import functions as F
    ident = F.col("id").cast("string")
    return spark.range(0, rows, numPartitions=slices).select(
        F.lpad(ident, key_bytes, "k").cast("binary").alias("key"),
        F.rpad(F.concat(ident, F.lit(":")), value_bytes, "v").cast("binary").alias("value"))


def python_workers(jvm_pid: int) -> list[int]:
    """Pids of the Spark Python workers (``pyspark.worker``) below the JVM."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            grandparent = int(_stat_fields(int(_stat_fields(int(entry))[1]))[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"pyspark.daemon" in cmdline and b"pyspark.worker" in cmdline and \
                grandparent == jvm_pid:
            pids.append(int(entry))
    return pids


def profile_markdown(folded: str, command: str) -> str:
    totals: dict[str, int] = {}
    samples = writer = sender = gc = 0
    with open(folded) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not count.isdigit():
                continue
            samples += int(count)
            gc += int(count) if "gc_collect_main" in stack else 0
            if WRITER_FRAME in stack:
                writer += int(count)
                steps = PROFILE_STEPS
            elif SENDER_FRAME in stack:
                sender += int(count)
                steps = SENDER_STEPS
            else:
                continue
            for label, needles in steps:
                if all(n in stack for n in needles):
                    totals[label] = totals.get(label, 0) + int(count)
    lines = ["# Where an A (pybroker) write spends the Spark Python workers' time", "",
             f"py-spy record --native on every `pyspark.worker` during one untimed A write "
             f"after `{command}`. The writer (`{WRITER_FRAME.strip(' (')}`) ran in {writer} "
             f"of {samples} samples (blocked reads and polls included); of the others, {gc} "
             "are the pyspark daemon's gc.collect() after each task, the rest the workers "
             "idle between tasks.", "",
             "| step (inclusive) | share of the writer's samples |", "|---|---:|"]
    for label, _ in PROFILE_STEPS:
        lines.append(f"| {label} | {totals.get(label, 0) / max(1, writer):.1%} |")
    lines += ["", f"The bulk producer's sender thread (`{SENDER_FRAME.strip(' (')}`): {sender} "
              "samples.", "", "| sender step (inclusive) | share of the sender's samples |",
              "|---|---:|"]
    for label, _ in SENDER_STEPS:
        lines.append(f"| {label} | {totals.get(label, 0) / max(1, sender):.1%} |")
    with open(folded) as f:
        top = subprocess.run([sys.executable, os.path.join(ROOT, "perf", "perfkit.py"), "top",
                              "25"], stdin=f, capture_output=True, text=True, check=True)
    lines += ["", "Hottest frames of all the samples:", "", "```", top.stdout.rstrip(), "```"]
    return "\n".join(lines) + "\n"


class IngestBench:
    def __init__(self, args: argparse.Namespace, spark, broker: LocalBroker, workdir: str,
                 command: str) -> None:
        self.args, self.spark, self.broker, self.workdir = args, spark, broker, workdir
        self.command = command
        self.topics = 0

    def fresh_topic(self, writer: str) -> str:
        self.topics += 1
        name = f"ingest-{writer}-{self.topics}"
        create_topic(self.broker.bootstrap, name, self.args.partitions)
        return name

    def measure(self, writer: str, df) -> dict[str, Any]:
        """One timed write of ``df`` with the CPU seconds it cost the Spark JVM, the Spark
        Python workers and the broker (the CPU window also holds the topic creation and
        the row check, a few ms), and how busy the whole host was meanwhile (other work on
        a shared machine shows there)."""
        probe = BrokerProbe(self.broker.pid)
        jvm_pid = self.spark.sparkContext._gateway.proc.pid
        broker0, spark0, host0 = probe.cpu_ticks(), spark_cpu_ticks(jvm_pid), host_cpu_ticks()
        seconds, received = self.write(writer, df)
        broker1, spark1, host1 = probe.cpu_ticks(), spark_cpu_ticks(jvm_pid), host_cpu_ticks()
        return {"seconds": round(seconds, 4), "rows": received,
                "rows_per_s": round(self.args.rows / seconds, 1),
                "cpu_s": {"spark_jvm": round((spark1[0] - spark0[0]) / CLOCK_TICKS, 2),
                          "spark_python": round((spark1[1] - spark0[1]) / CLOCK_TICKS, 2),
                          "broker": round((broker1 - broker0) / CLOCK_TICKS, 2)},
                "host_busy": round((host1[0] - host0[0]) / max(1, host1[1] - host0[1]), 3)}

    def write(self, writer: str, df) -> tuple[float, int]:
        """Time one write of ``df``; returns (seconds, rows the sink received)."""
        bootstrap = self.broker.bootstrap
        if writer == "B":
            report = os.path.join(self.workdir, f"count-{time.monotonic_ns()}.json")
            start = time.perf_counter()
            df.write.format("bench_arrow_count").option("report", report) \
                .mode("append").save()
            seconds = time.perf_counter() - start
            with open(report) as f:
                return seconds, json.load(f)["rows"]
        topic = self.fresh_topic(writer)
        start = time.perf_counter()
        if writer == "A":
            df.write.format("pybroker").option("kafka.bootstrap.servers", bootstrap) \
                .option("topic", topic).mode("append").save()
        else:
            df.foreachPartition(confluent_partition_writer(bootstrap, topic))
        seconds = time.perf_counter() - start
        return seconds, rows_in_topic(bootstrap, topic)

    def profile(self, df, out_dir: str, command: str) -> None:
        """One untimed A write with py-spy on every Spark Python worker."""
        os.makedirs(out_dir, exist_ok=True)
        workers = python_workers(self.spark.sparkContext._gateway.proc.pid)
        if not workers:
            raise RuntimeError("--profile: no Spark Python worker found")
        spies = []
        for pid in workers:
            out = os.path.join(self.workdir, f"pyspy-{pid}.folded")
            spies.append((out, subprocess.Popen(
                ["py-spy", "record", "--native", "--rate", "250", "--pid", str(pid),
                 "--format", "raw", "--output", out],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))
        time.sleep(2)  # py-spy attaches
        try:
            self.write("A", df)
        finally:
            for _, spy in spies:
                spy.send_signal(signal.SIGINT)  # py-spy writes its file and exits
            for _, spy in spies:
                spy.wait(60)
        folded = os.path.join(out_dir, "pyspy-A.folded")
        with open(folded, "w") as merged:
            for out, _ in spies:
                if os.path.exists(out):
                    with open(out) as f:
                        merged.write(f.read())
        with open(os.path.join(out_dir, "profile-A.md"), "w") as f:
            f.write(profile_markdown(folded, command))

    def run(self) -> list[dict[str, Any]]:
        args = self.args
        df = build_frame(self.spark, args.rows, args.key_bytes, args.value_bytes,
                         args.slices).cache()
        counted = df.count()  # materialise the cache before any timing
        if counted != args.rows:
            raise RuntimeError(f"cached frame has {counted} rows, expected {args.rows}")
        warm = df.limit(min(WARMUP_ROWS, args.rows)).repartition(args.slices).cache()
        warm.count()
        for writer in WRITERS:
            self.write(writer, warm)
        warm.unpersist()
        rounds = []
        for number in range(1, args.rounds + 1):
            for writer in WRITERS:
                figures = self.measure(writer, df)
                if figures["rows"] != args.rows:
                    raise RuntimeError(f"round {number} writer {writer}: the sink got "
                                       f"{figures['rows']} rows, expected {args.rows}")
                rounds.append({"round": number, "writer": writer, **figures})
                cpu = figures["cpu_s"]
                print(f"[round {number}] {writer} {WRITERS[writer]}: {figures['seconds']:.3f} s, "
                      f"{figures['rows_per_s']:,.0f} rows/s; CPU s: JVM {cpu['spark_jvm']}, "
                      f"Python workers {cpu['spark_python']}, broker {cpu['broker']}; host "
                      f"{figures['host_busy']:.0%} busy", file=sys.stderr, flush=True)
        if args.profile:
            self.profile(df, args.out, self.command)
        df.unpersist()
        return rounds


def summarise(rounds: list[dict[str, Any]], args: argparse.Namespace, command: str,
              started_at: str, machine: dict[str, Any]) -> dict[str, Any]:
    writers = {}
    for key, label in WRITERS.items():
        mine = [r for r in rounds if r["writer"] == key]
        median = statistics.median(r["rows_per_s"] for r in mine)
        writers[key] = {"name": label, "rows_per_s": [r["rows_per_s"] for r in mine],
                        "median_rows_per_s": round(median, 1),
                        "median_mb_per_s": round(
                            median * (args.key_bytes + args.value_bytes) / 1e6, 2),
                        "median_cpu_s": {part: statistics.median(r["cpu_s"][part] for r in mine)
                                         for part in ("spark_jvm", "spark_python", "broker")},
                        "median_host_busy": statistics.median(r["host_busy"] for r in mine)}
    a, b, c = (writers[k]["median_rows_per_s"] for k in "ABC")
    # Pair by pair: A against the B and the C of the same round.
    per_round = []
    for number in sorted({r["round"] for r in rounds}):
        rate = {r["writer"]: r["rows_per_s"] for r in rounds if r["round"] == number}
        per_round.append({"round": number, "a_of_b": round(rate["A"] / rate["B"], 3),
                          "a_over_c": round(rate["A"] / rate["C"], 2)})
    # The verdict goes by the median of the per-round ratios: on a shared host the load
    # drifts between rounds, and a ratio of medians can pair A's quiet round with B's
    # busy one; writes seconds apart in one round saw the same machine.
    paired_b = statistics.median(r["a_of_b"] for r in per_round)
    paired_c = statistics.median(r["a_over_c"] for r in per_round)
    return {
        "schema": SCHEMA,
        "command": command,
        "started_at": started_at,
        "machine": machine,
        "config": {"master": args.master, "rows": args.rows, "key_bytes": args.key_bytes,
                   "value_bytes": args.value_bytes, "partitions": args.partitions,
                   "rounds": args.rounds, "slices": args.slices,
                   "arrow_max_records_per_batch": args.arrow_batch_rows},
        "rounds": rounds,
        "writers": writers,
        "ratios": {
            "a_of_b": round(a / b, 3), "a_over_c": round(a / c, 2), "per_round": per_round,
            "a_of_b_paired": paired_b, "a_over_c_paired": paired_c,
            "target_a_of_b": TARGET_A_OF_B, "target_a_over_c": TARGET_A_OVER_C,
            "met_a_of_b": paired_b >= TARGET_A_OF_B, "met_a_over_c": paired_c >= TARGET_A_OVER_C,
        },
    }


def markdown(result: dict[str, Any]) -> str:
    m, cfg, ratios = result["machine"], result["config"], result["ratios"]
    writers = result["writers"]
    lines = [
        "# Spark ingest: pybroker writer vs its ceiling and confluent-kafka",
        "",
        f"`{result['command']}`",
        "",
        f"{result['started_at']} on {m['host']}: {m['nproc']} cpus ({m['cpu_model']}), "
        f"kernel {m['kernel']}, Python {m['python']}, pyspark {m['pyspark']}, "
        f"pyarrow {m['pyarrow']}, librdkafka {m['librdkafka']}, load average at start "
        f"{', '.join(f'{x:.2f}' for x in m['loadavg_at_start'])}.",
        f"`{cfg['master']}`, {cfg['rows']:,} rows of {cfg['key_bytes']} B keys and "
        f"{cfg['value_bytes']} B values cached in {cfg['slices']} slices, "
        f"{cfg['partitions']} topic partitions, Arrow batches of "
        f"{cfg['arrow_max_records_per_batch']} rows, {cfg['rounds']} rounds (A B C ...), "
        "median per writer.",
        "",
        "| writer | median rows/s | median MB/s | rows/s per round | CPU s: Spark JVM | "
        "Spark Python | broker | host busy |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for key, w in writers.items():
        rounds = ", ".join(f"{r:,.0f}" for r in w["rows_per_s"])
        cpu = w["median_cpu_s"]
        lines.append(f"| {key} {w['name']} | {w['median_rows_per_s']:,.0f} | "
                     f"{w['median_mb_per_s']:.2f} | {rounds} | {cpu['spark_jvm']} | "
                     f"{cpu['spark_python']} | {cpu['broker']} | {w['median_host_busy']:.0%} |")

    def verdict(met: bool) -> str:
        return "met" if met else "MISSED"

    per_round = ratios["per_round"]
    a_of_b = ", ".join(f"{r['a_of_b']:.1%}" for r in per_round)
    a_over_c = ", ".join(f"{r['a_over_c']:.2f}x" for r in per_round)
    lines += [
        "",
        "| ratio | of the medians | per round | median per round | target (on the "
        "median per round) |",
        "|---|---:|---|---:|---|",
        f"| A / B | {ratios['a_of_b']:.1%} | {a_of_b} | {ratios['a_of_b_paired']:.1%} | "
        f">= {ratios['target_a_of_b']:.0%}: {verdict(ratios['met_a_of_b'])} |",
        f"| A / C | {ratios['a_over_c']:.2f}x | {a_over_c} | {ratios['a_over_c_paired']:.2f}x | "
        f">= {ratios['target_a_over_c']:.0f}x: {verdict(ratios['met_a_over_c'])} |",
        "",
        "CPU seconds per write (Spark JVM threads, Spark's Python workers, the broker) and "
        "host busy (share of all cpus busy, any process) are medians over the rounds; the "
        "broker runs on the same cpus as Spark.",
    ]
    if "profile-A.md" in result.get("files", []):
        lines += ["", "Where an A write spends the Spark Python workers' time (py-spy, one "
                  "untimed write): [profile-A.md](profile-A.md)."]
    return "\n".join(lines) + "\n"


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """The rows, topic and Spark settings the Spark benches share."""
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--key-bytes", type=int, default=16)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4, help="topic partitions")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--arrow-batch-rows", type=int, default=10_000,
                        help="spark.sql.execution.arrow.maxRecordsPerBatch")


def check_common_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.rounds < 1 or args.rows < 1:
        parser.error("--rounds and --rows must be positive")


def command_line(module: str, argv: list[str] | None) -> str:
    """The bench's command exactly as typed (``sys.orig_argv``: the interpreter's own
    argv, -m included), or as it would be typed for ``argv`` given in Python."""
    return shlex.join(sys.orig_argv if argv is None else
                      [sys.executable, "-m", module, *argv])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python3 -m bench.spark_ingest",
                                     description=__doc__.split("\n\n")[0])
    add_common_arguments(parser)
    parser.add_argument("--slices", type=int, default=2,
                        help="partitions of the cached DataFrame (Spark tasks per write)")
    parser.add_argument("--out", help="directory for spark_ingest.json and spark_ingest.md")
    parser.add_argument("--profile", action="store_true",
                        help="after the rounds, py-spy one untimed A write into --out")
    args = parser.parse_args(argv)
    if args.profile and not args.out:
        parser.error("--profile needs --out")
    check_common_arguments(parser, args)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = command_line("bench.spark_ingest", argv)
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    machine = machine_facts()
    with tempfile.TemporaryDirectory(prefix="pybroker-spark-ingest-") as workdir, \
            LocalBroker(workdir) as broker:
        spark = None
        try:
            spark = start_spark(args)
            rounds = IngestBench(args, spark, broker, workdir, command).run()
        finally:
            if spark is not None:
                spark.stop()
    result = summarise(rounds, args, command, started_at, machine)
    result["files"] = ["spark_ingest.json", "spark_ingest.md"] + (
        ["profile-A.md", "pyspy-A.folded"] if args.profile else [])
    publish(result, markdown(result), args.out, "spark_ingest")
    return 0


def publish(result: dict[str, Any], text: str, out: str | None, name: str) -> None:
    """``name``.json and ``name``.md into ``out`` (when given); the Markdown printed."""
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, f"{name}.json"), "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        with open(os.path.join(out, f"{name}.md"), "w") as f:
            f.write(text)
    print(text, end="")


if __name__ == "__main__":
    if __package__ in (None, ""):  # run as a file: make `bench` and `pybroker` importable
        sys.path.insert(0, ROOT)
    sys.exit(main())

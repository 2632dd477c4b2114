"""What transactions cost a producer, side by side with Apache Kafka 4.1 (issue 14).

    python3 -m bench.transactions [--rounds 3] [--brokers kafka,pybroker] [--out DIR]
        [--seconds 15] [--warmup 5] [--partitions 4] [--record-bytes 1024]
        [--commit-ms 100] [-X key=value]...

Kafka (``kafka.sh`` of the reference folder) and pybroker (``python3 -m pybroker serve`` of
this checkout) are each started fresh per round, in turn, alternating which goes first;
both with their defaults. Against each, after an unmeasured warm-up (the plain producer
for ``--warmup`` seconds: a fresh JVM compiles its hot paths under its first load), the
same producer runs twice, each time to a fresh topic of ``--partitions`` partitions:

- **plain**: idempotent, acks=all, unkeyed ``--record-bytes`` records at full speed;
- **transactional**: the same plus a ``transactional.id``: begin, produce for
  ``--commit-ms``, commit, begin again.

The order of the two alternates per round (plain first in odd rounds), since a broker's
later runs find more written before them. Issue 14's targets: transactional / plain
>= 0.97 on pybroker (the 3% that Kafka's documentation gives for itself with 1 KiB
records committing every 100 ms), and pybroker's transactional MB/s at least Kafka's.

The load generator is ``transactions_producer.c`` beside this file, a librdkafka program
compiled at the start of the run (``cc``, librdkafka's headers: ``make system-deps``),
one process. Its transactions are those of Kafka's own ``kafka-producer-perf-test
--transaction-duration-ms``: produce for the duration, then commit, which waits until
every queued record is acknowledged. The alternatives measure the client more than the
broker on this 2-core machine: rdkafka_performance has no transactions;
kafka-producer-perf-test is a second JVM beside Kafka's, compiling its own hot paths
during the run; a confluent-kafka producer in Python pays the interpreter per record on
one thread (measured here on a busy machine: one process made 95-120 MB/s with that
thread the limit, while this program made 100-200 MB/s with about 30% less CPU per GB),
and several Python processes would each take CPU the broker needs and be several
transactional producers, not one. The program hands librdkafka records from a static
pool without a copy, so its CPU is what any client spends on batching, requests and
acknowledgements; it is reported beside the broker's, and the host's busy share tells
whether the CPUs were the limit.

Producer settings: acks=all, enable.idempotence=true, linger.ms=5 (run-workloads.sh's W2),
queue.buffering.max.kbytes=4096, otherwise librdkafka's defaults; ``-X`` adds or
overrides librdkafka properties for both modes. A commit waits until every queued record
is acknowledged, so the queue's depth sets how long it takes: 4 MiB at 150-200 MB/s is
20-30 ms, and a transaction lasts little more than the 100 ms the issue names. With the
Java producer's default ``buffer.memory`` of 32 MiB (``-X
queue.buffering.max.kbytes=32768``) commits took 200-1000 ms here, so transactions came
every 300 ms to 1.5 s and their fixed costs weighed less. The report gives the measured
transaction length.

Measured in the producer's own window, after ``--warmup`` seconds (transactional: after
``init_transactions``), for ``--seconds`` seconds:

- plain: records acknowledged in the window / its length;
- transactional: the window runs from a commit's completion to the completion of the
  first commit ``--seconds`` later; records of the transactions committed in it / its
  length. So both count the steady state, and every transactional record counted is
  committed.

MB/s counts value bytes (no keys), MB = 10^6 bytes. Broker CPU: utime + stime of its
process (/proc/PID/stat, all threads) over the window, sampled every 0.1 s, per GB
produced in it. The producer's CPU (getrusage, all its threads) over the same window.
Reported: medians with each round's value in parentheses; the pybroker / Kafka ratio is
taken per round, then the median. Files: ``result.json`` and ``result.md`` in ``--out``.
One machine runs both brokers and the client: run it on a quiet machine, and compare only
figures from the same run. Exit status: 0, 1 when a producer failed (its error is in
the result, the rest still runs), 2 when the run could not happen (no compiler or
librdkafka headers, a broker that did not start).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import IO, Any

from confluent_kafka.admin import AdminClient

from bench.cleaner import (
    Broker,
    Row,
    add_side_by_side_args,
    chosen_brokers,
    create_topic,
    path,
    ratio,
    table,
)
from bench.driver.procstat import BrokerProbe, host_cpu_ticks
from bench.hostile.patterns import raise_fd_limit
from bench.hostile.side_by_side import REFERENCE
from bench.replicated import write_report
from bench.single_node import machine

PRODUCER_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                               "transactions_producer.c")
PRODUCER_CONFIG = {"linger.ms": "5", "queue.buffering.max.kbytes": "4096"}
MODES = ("plain", "transactional")
SAMPLE_S = 0.1
# init_transactions, the last commit and the final flush may each wait up to 60 s.
PRODUCER_SLACK_S = 200


def build_producer(directory: str) -> str:
    """Compiles transactions_producer.c into ``directory``; its path."""
    binary = os.path.join(directory, "transactions_producer")
    command = [os.environ.get("CC", "cc"), "-O2", "-Wall", "-o", binary, PRODUCER_SOURCE,
               "-lrdkafka"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except FileNotFoundError as e:
        raise RuntimeError(f"no C compiler ({e}): make system-deps") from e
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed (librdkafka's headers come with "
                           f"librdkafka-dev: make system-deps):\n{done.stderr[-2000:]}")
    return binary


def producer_command(binary: str, bootstrap: str, topic: str, transactional_id: str | None,
                     args: argparse.Namespace) -> list[str]:
    command = [binary, "-b", bootstrap, "-t", topic, "-s", str(args.record_bytes),
               "-w", str(args.warmup), "-d", str(args.seconds)]
    config = dict(PRODUCER_CONFIG, **args.producer_config)
    if transactional_id is not None:
        command += ["-i", str(args.commit_ms)]
        config["transactional.id"] = transactional_id
    for key, value in config.items():
        command += ["-X", f"{key}={value}"]
    return command


def run_producer(command: list[str], pid: int, timeout: float) -> dict[str, Any]:
    """Runs the producer while sampling the broker's CPU (and the host's) every 0.1 s;
    its figures with the broker's CPU over its window, or {"error": ...}."""
    probe = BrokerProbe(pid)
    host: list[tuple[float, int, int]] = []    # (monotonic, busy ticks, all ticks)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(command, stdout=out, stderr=err)
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                return {"error": f"the producer took more than {timeout:.0f} s"}
            probe.sample()
            host.append((time.monotonic(), *host_cpu_ticks()))
            time.sleep(SAMPLE_S)
        lines = _read(out).splitlines()
        problems = _read(err)
    if proc.returncode or not lines:
        return {"error": f"producer exit status {proc.returncode}: {problems[-2000:]}"}
    figures: dict[str, Any] = json.loads(lines[-1])
    start, end = figures["window_start"], figures["window_end"]
    figures["broker_cpu_s"] = cpu = probe.cpu_seconds(start, end)
    gb = figures["bytes"] / 1e9
    figures["broker_cpu_s_per_gb"] = cpu / gb if cpu is not None and gb else None
    figures["client_cpu_s_per_gb"] = figures["client_cpu_s"] / gb if gb else None
    figures["host_busy"] = _busy_share(host, start, end)
    if figures["transactions"]:
        figures["transaction_ms"] = figures["seconds"] * 1e3 / figures["transactions"]
    return figures


def _read(f: IO[str]) -> str:
    f.seek(0)
    return f.read()


def _busy_share(samples: list[tuple[float, int, int]], start: float, end: float
                ) -> float | None:
    """The share of all CPUs busy (any process) between the samples nearest two times."""
    if len(samples) < 2:
        return None
    first = min(samples, key=lambda s: abs(s[0] - start))
    last = min(samples, key=lambda s: abs(s[0] - end))
    return (last[1] - first[1]) / max(1, last[2] - first[2])


def run_broker(broker: Broker, binary: str, round_no: int, args: argparse.Namespace
               ) -> dict[str, dict[str, Any]]:
    bootstrap, pid, _ = broker.start(raise_fd_limit())
    print(f"[r{round_no} {broker.label}] {bootstrap} pid {pid}", file=sys.stderr)
    try:
        return measure_broker(broker, binary, bootstrap, pid, round_no, args)
    finally:
        broker.stop()


def warm_up(admin: AdminClient, binary: str, bootstrap: str, pid: int, round_no: int,
            args: argparse.Namespace) -> None:
    """The plain producer for ``--warmup`` seconds, unmeasured, so that neither mode meets
    a cold broker (a fresh JVM compiles its hot paths in its first seconds of load)."""
    topic = f"txn-bench-warm-up-r{round_no}"
    create_topic(admin, topic, args.partitions, {})
    command = producer_command(binary, bootstrap, topic, None, args)
    run = run_producer([*command, "-w", "0", "-d", str(max(args.warmup, 0.1))], pid,
                       args.warmup + PRODUCER_SLACK_S)
    if "error" in run:
        raise RuntimeError(f"the warm-up failed: {run['error']}")
    os.sync()


def measure_broker(broker: Broker, binary: str, bootstrap: str, pid: int, round_no: int,
                   args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Both modes against a started broker, by mode (its admin client gone when this
    returns, before the broker stops)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    warm_up(admin, binary, bootstrap, pid, round_no, args)
    figures: dict[str, dict[str, Any]] = {}
    for mode in MODES if round_no % 2 else MODES[::-1]:
        topic = f"txn-bench-{mode}-r{round_no}"
        create_topic(admin, topic, args.partitions, {})
        transactional_id = f"txn-bench-r{round_no}" if mode == "transactional" else None
        command = producer_command(binary, bootstrap, topic, transactional_id, args)
        figures[mode] = run_producer(command, pid, args.warmup + args.seconds + PRODUCER_SLACK_S)
        print(f"[r{round_no} {broker.label}] {mode} {figures[mode]}", file=sys.stderr)
        os.sync()  # the run's log written back now, not during the next run
    return figures


ROWS = [
    Row("plain (idempotent) MB/s", path("plain", "mb_per_s"), "{:.0f}", compared=True),
    Row("transactional MB/s", path("transactional", "mb_per_s"), "{:.0f}",
        "pybroker / Kafka >= 1.0", compared=True),
    Row("transactional / plain", ratio(path("transactional", "mb_per_s"),
                                       path("plain", "mb_per_s")),
        "{:.3f}", "pybroker >= 0.97"),
    Row("plain records/s", path("plain", "records_per_s"), "{:.0f}", compared=True),
    Row("transactional records/s", path("transactional", "records_per_s"), "{:.0f}",
        compared=True),
    Row("plain: broker CPU s per GB", path("plain", "broker_cpu_s_per_gb"), "{:.2f}",
        compared=True),
    Row("transactional: broker CPU s per GB", path("transactional", "broker_cpu_s_per_gb"),
        "{:.2f}", compared=True),
    Row("plain: producer CPU s per GB", path("plain", "client_cpu_s_per_gb"), "{:.2f}"),
    Row("transactional: producer CPU s per GB", path("transactional", "client_cpu_s_per_gb"),
        "{:.2f}"),
    Row("plain: host CPUs busy (share)", path("plain", "host_busy"), "{:.2f}"),
    Row("transactional: host CPUs busy (share)", path("transactional", "host_busy"),
        "{:.2f}"),
    Row("transactions committed in the window", path("transactional", "transactions"),
        "{:.0f}"),
    Row("transaction length ms (window / transactions)", path("transactional",
                                                               "transaction_ms"), "{:.0f}"),
    Row("commit_transaction() p50 ms", path("transactional", "commit_ms_p50"), "{:.1f}"),
    Row("commit_transaction() max ms", path("transactional", "commit_ms_max"), "{:.1f}"),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.transactions",
                                     description=__doc__.split("\n\n")[0])
    add_side_by_side_args(parser)
    parser.add_argument("--seconds", type=float, default=15, help="measured, per run")
    parser.add_argument("--warmup", type=float, default=5, help="unmeasured, per run")
    parser.add_argument("--partitions", type=int, default=4, help="of each run's topic")
    parser.add_argument("--record-bytes", type=int, default=1024, help="value bytes")
    parser.add_argument("--commit-ms", type=int, default=100,
                        help="how long each transaction produces before its commit")
    parser.add_argument("-X", dest="producer_config", metavar="KEY=VALUE", action="append",
                        default=[], help="a librdkafka property of the producer (repeatable)")
    parser.add_argument("--reference", default=REFERENCE,
                        help=f"the folder of kafka.sh (default {REFERENCE})")
    parser.add_argument("--out", default=None, help="directory for result.json/result.md")
    args = parser.parse_args(argv)
    if any("=" not in item for item in args.producer_config):
        parser.error("-X: KEY=VALUE")
    args.producer_config = dict(item.split("=", 1) for item in args.producer_config)
    brokers = chosen_brokers(parser, args)
    result: dict[str, Any] = {
        "command": " ".join(["python3 -m bench.transactions", *(argv or sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(),
        "producer_config": dict(PRODUCER_CONFIG, **args.producer_config), "rounds": []}
    with tempfile.TemporaryDirectory(prefix="bench-transactions-") as build:
        try:
            binary = build_producer(build)
            for round_no in range(1, args.rounds + 1):
                order = brokers if round_no % 2 else brokers[::-1]
                result["rounds"].append({b.label: run_broker(b, binary, round_no, args)
                                         for b in order})
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            print(f"bench.transactions: {e}", file=sys.stderr)
            return 2
    result["loadavg_1m_end"] = os.getloadavg()[0]
    result["table"] = table(result["rounds"], [b.label for b in brokers], ROWS)
    write_report(result, args.out)
    failed = [f"r{n} {label} {mode}" for n, r in enumerate(result["rounds"], 1)
              for label, figures in r.items() for mode, run in figures.items() if "error" in run]
    if failed:
        print(f"bench.transactions: failed runs: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

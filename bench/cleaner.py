"""The log cleaner side by side with Apache Kafka 4.1's, and what it costs a producer.

    python3 -m bench.cleaner [--rounds 3] [--brokers kafka,pybroker] [--out DIR]
        [--mb 256] [--keys 10000] [--value-bytes 256] [--tombstones 0.05] [--partitions 1]
        [--segment-mib 8] [--w2-messages 2000000]

Kafka (``kafka.sh`` of the reference folder) and pybroker (``python3 -m pybroker serve`` of
this checkout) are each started fresh per round, in turn, alternating which goes first;
both with ``log.cleaner.backoff.ms=200`` (Kafka's default 15 s idle sleep would leave the
cleaner asleep through most of a W2 run) and otherwise their defaults (one cleaner
thread, a 128 MiB dedupe buffer, no I/O throttle). Two figures per broker and round:

1. **Cleaner throughput.** A compacted topic (``--partitions``, ``segment.bytes`` of
   ``--segment-mib``) gets the same data set on both brokers: ``--mb`` MB (10^6 bytes of
   keys and values) of records over ``--keys`` keys (``key-%08d``, drawn uniformly by a
   seeded generator, so every run sends the same sequence; 10,000 keys over 256 MB of
   256-byte values updates each key about 90 times: 99% of the records are obsolete),
   ``--tombstones`` of them tombstones (null values), produced with confluent-kafka
   (acks=1, linger.ms=5, no compression, not idempotent). Cleaning is held off while it
   is written (``min.compaction.lag.ms`` of a day); then the data is synced to disk and
   an IncrementalAlterConfigs sets ``min.compaction.lag.ms=0``: cleaning can start. It is
   done when, for every partition, a cleaning round has reached the base offset of the
   active segment (which is never cleaned).

   Measured on both sides from the cleaner's own reports of each round, summed over the
   topic's rounds: **bytes of log read by the cleaner / seconds of cleaning**, in MB/s
   (10^6 bytes). The bytes are those of the segments each round rewrote, from the log
   start to the end of the round, clean and dirty, each byte once per round (the pass
   that builds the offset map over the dirty section is in the seconds, not the bytes):
   pybroker's cleaner logs them per round (``cleaned offsets [a, b): K keys, N bytes ->
   M in S s``); Kafka logs the sizes of the segments replaced and of the cleaned one in
   each "Swapping in cleaned segment" line (its round statistics, "MB of log processed",
   count the same bytes but print MiB to 0.1). The seconds run from the start of the
   round (building the offset map) to its last cleaned segment swapped in: pybroker
   logs them to the millisecond; Kafka prints them to 0.1 s only, so they are taken from
   the timestamps of its ``log-cleaner.log`` lines, "Beginning cleaning of log" to the
   round's statistics, which also covers the write of its cleaner-offset-checkpoint
   (milliseconds; pybroker's seconds do not include its own). ``wall_s`` is the time
   from the alter to the last round seen ended (the logs polled every 0.1 s), which
   includes up to the 200 ms idle backoff.

2. **W2 beside the cleaner.** The standard W2 (``run-workloads.sh``: rdkafka_performance,
   ``--w2-messages`` x 1 KiB, acks=1, linger.ms=5, 4 partitions) against a topic with
   ``cleanup.policy=compact`` and ``segment.bytes`` of ``--segment-mib``, so segments roll
   and the cleaner works while the producer runs, and the same against a topic with
   ``cleanup.policy=delete`` (nothing to clean), on the same broker, each twice in ABBA
   order (compact, delete, delete, compact; the reverse in every other round), after
   run-workloads.sh's unmeasured warm-up (500k x 100 B, fewer if W2 is shorter): the
   runs of one broker get slower the more it has written, so a policy measured only
   first or only second would carry that position in its figure. A compacted topic refuses records without a key, so every record
   carries the key ``w2`` and ``-X partitioner=random`` spreads them over the 4
   partitions as W2's unkeyed records are: the cleaner reads every byte and keeps one
   record per partition. The figure is the producer's MB/s as rdkafka_performance prints
   it (the mean of a policy's two runs), compacted / delete; the issue's target is at least 0.90 for pybroker. Reported
   beside it: the log the cleaner had processed by the time the producer ended and how
   long after that it reached the active segments (the cleaner finishing the backlog,
   waited for so the next run does not compete with it), and the broker's CPU seconds
   during the run (/proc).

Each figure's log is synced to disk before the next. Medians of the rounds; the
pybroker / Kafka ratio is taken per round, then the median. Files: ``result.json`` and
``result.md`` in ``--out``. One machine runs both brokers and every client: run it on a
quiet machine, and compare only figures from the same run.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from bench.hostile.patterns import raise_fd_limit
from bench.hostile.side_by_side import REFERENCE, Kafka, PyBroker
from bench.replicated import write_report
from bench.single_node import machine, process_cpu_seconds

BROKER_SETTINGS = {"log.cleaner.backoff.ms": 200}
HOLD_MS = 86_400_000          # min.compaction.lag.ms while the data set is written
W2_PARTITIONS, W2_RECORD_BYTES, W2_KEY = 4, 1024, "w2"
WARM_UP_MESSAGES = 500_000
SEGMENT_FILE = re.compile(r"(\d{20})\.log")
POLL_S = 0.1

Broker = Kafka | PyBroker


# -- the data set ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class DataSet:
    mb: float
    keys: int
    value_bytes: int
    tombstones: float
    seed: int = 13

    @property
    def count(self) -> int:
        return int(self.mb * 1e6 // (len(self.key(0)) + self.value_bytes))

    @staticmethod
    def key(k: int) -> bytes:
        return b"key-%08d" % k

    def records(self) -> Iterator[tuple[bytes, bytes | None]]:
        """The same (key, value) sequence every time; value None is a tombstone."""
        rng = random.Random(self.seed)
        keys = [self.key(k) for k in range(self.keys)]
        pool = rng.randbytes(self.value_bytes + 4096)
        for i in range(self.count):
            key = keys[rng.randrange(self.keys)]
            if rng.random() < self.tombstones:
                yield key, None
            else:
                yield key, pool[i & 4095:(i & 4095) + self.value_bytes]


def produce(bootstrap: str, topic: str, data: DataSet) -> None:
    failed: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                         "enable.idempotence": False, "delivery.report.only.error": True,
                         "on_delivery": lambda err, _msg: failed.append(err)})
    for key, value in data.records():
        while True:
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(120)
    if left or failed:
        raise RuntimeError(f"{topic}: {left} records not delivered, {len(failed)} failed "
                           f"(first: {failed[:1]})")


# -- admin ------------------------------------------------------------------------------------

def create_topic(admin: AdminClient, topic: str, partitions: int,
                 configs: dict[str, str]) -> None:
    futures = admin.create_topics([NewTopic(topic, partitions, 1, config=configs)],
                                  operation_timeout=30, request_timeout=30)
    futures[topic].result(60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if found is not None and not found.error and len(found.partitions) == partitions \
                and all(p.leader >= 0 for p in found.partitions.values()):
            return
        time.sleep(POLL_S)
    raise RuntimeError(f"{topic}: no leader for every partition in 30 s")


def set_topic_config(admin: AdminClient, topic: str, key: str, value: str) -> None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource], request_timeout=30)[resource].result(60)


# -- the cleaner's own reports --------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class CleanerRound:
    topic: str
    partition: int
    end: int              # the offset the round reached (exclusive): the next first dirty
    bytes_read: int
    bytes_written: int
    seconds: float

    @classmethod
    def of(cls, log: str, end: str, read: float, written: float, seconds: float
           ) -> CleanerRound:
        topic, partition = log.rsplit("-", 1)
        return cls(topic, int(partition), int(end), int(read), int(written), seconds)


_PYBROKER_ROUND = re.compile(r" (\S+): cleaned offsets \[\d+, (\d+)\): \d+ keys, (\d+) bytes"
                             r" -> (\d+) in ([\d.]+) s")
_KAFKA_LINE = r"^\[([^\]]+)\] INFO [^\n]*?"
_KAFKA_BEGIN = re.compile(_KAFKA_LINE + r"Beginning cleaning of log (\S+)", re.M)
_KAFKA_SWAP = re.compile(_KAFKA_LINE + r"Swapping in cleaned segment LogSegment\(baseOffset=\d+,"
                         r" size=(\d+),[^\n]*? for segment\(s\) \[([^\]]*)\] in log "
                         r"Log\(dir=[^,]*/([^,/]+),", re.M)
_KAFKA_STATS = re.compile(_KAFKA_LINE + r"\n\tLog cleaner thread \d+ cleaned log (\S+) "
                          r"\(dirty section = \[\d+, (\d+)\]\)", re.M)
_SEGMENT_SIZE = re.compile(r"size=(\d+)")


def pybroker_rounds(text: str) -> list[CleanerRound]:
    """Rounds from pybroker's log (pybroker.log.log_cleaner's line per round)."""
    return [CleanerRound.of(log, end, int(read), int(written), float(seconds))
            for log, end, read, written, seconds in _PYBROKER_ROUND.findall(text)]


def kafka_rounds(text: str) -> list[CleanerRound]:
    """Rounds from Kafka's log-cleaner.log (one cleaner thread: its lines do not
    interleave). Each round runs from its "Beginning cleaning of log" line to its
    statistics (timestamps to the millisecond; the statistics print seconds to 0.1 and
    sizes in MiB to 0.1, too coarse here); the bytes are those of its "Swapping in cleaned
    segment" lines: the sizes of the segments replaced (read) and of the cleaned one
    (written)."""
    def when(stamp: str) -> float:
        return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
    events = sorted((m for pattern in (_KAFKA_BEGIN, _KAFKA_SWAP, _KAFKA_STATS)
                     for m in pattern.finditer(text)), key=lambda m: m.start())
    open_rounds: dict[str, list[float]] = {}   # log -> [began, read, written]
    rounds = []
    for m in events:
        if m.re is _KAFKA_BEGIN:
            open_rounds[m.group(2)] = [when(m.group(1)), 0, 0]
        elif m.re is _KAFKA_SWAP and m.group(4) in open_rounds:
            sizes = open_rounds[m.group(4)]
            sizes[1] += sum(int(size) for size in _SEGMENT_SIZE.findall(m.group(3)))
            sizes[2] += int(m.group(2))
        elif m.re is _KAFKA_STATS and m.group(2) in open_rounds:
            began, read, written = open_rounds.pop(m.group(2))
            rounds.append(CleanerRound.of(m.group(2), m.group(3), read, written,
                                          when(m.group(1)) - began))
    return rounds


def cleaner_rounds(broker: Broker, topic: str) -> list[CleanerRound]:
    if isinstance(broker, Kafka):
        logs = os.path.join(broker.work, "logs")
        paths = [*sorted(glob.glob(os.path.join(logs, "log-cleaner.log.*"))),
                 os.path.join(logs, "log-cleaner.log")]
        rounds = kafka_rounds("".join(_read(p) for p in paths))
    else:
        assert broker.broker is not None, "pybroker not started"
        rounds = pybroker_rounds(_read(broker.broker.log_path))
    return [r for r in rounds if r.topic == topic]


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def active_base(broker: Broker, topic: str, partition: int) -> int:
    """The base offset of the partition's active (last) segment, from its directory."""
    directory = os.path.join(broker.work, "data", f"{topic}-{partition}")
    return max(int(m.group(1)) for m in map(SEGMENT_FILE.fullmatch, os.listdir(directory))
               if m)


def wait_cleaned(broker: Broker, topic: str, partitions: int, timeout: float
                 ) -> float | None:
    """When (monotonic) every partition's cleaning was seen to reach its active segment;
    None if not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        reached: dict[int, int] = {}
        for r in cleaner_rounds(broker, topic):
            reached[r.partition] = max(reached.get(r.partition, 0), r.end)
        if all(reached.get(p, 0) >= active_base(broker, topic, p) for p in range(partitions)):
            return time.monotonic()
        if time.monotonic() > deadline:
            return None
        time.sleep(POLL_S)


# -- the two figures -------------------------------------------------------------------------

def measure_cleaner(broker: Broker, admin: AdminClient, bootstrap: str, topic: str,
                    args: argparse.Namespace) -> dict[str, Any]:
    data = DataSet(args.mb, args.keys, args.value_bytes, args.tombstones)
    create_topic(admin, topic, args.partitions, {
        "cleanup.policy": "compact", "segment.bytes": str(args.segment_mib << 20),
        "min.compaction.lag.ms": str(HOLD_MS)})
    started = time.monotonic()
    produce(bootstrap, topic, data)
    produce_s = time.monotonic() - started
    os.sync()
    opened = time.monotonic()
    set_topic_config(admin, topic, "min.compaction.lag.ms", "0")
    done = wait_cleaned(broker, topic, args.partitions, args.timeout)
    if done is None:
        raise RuntimeError(f"{broker.label}: {topic} not cleaned up to its active segments "
                           f"in {args.timeout:.0f} s")
    rounds = cleaner_rounds(broker, topic)
    read = sum(r.bytes_read for r in rounds)
    seconds = sum(r.seconds for r in rounds)
    os.sync()
    return {"records": data.count, "produce_s": round(produce_s, 3), "rounds": len(rounds),
            "bytes_read": read, "bytes_written": sum(r.bytes_written for r in rounds),
            "seconds": round(seconds, 3), "mb_s": read / max(seconds, 1e-3) / 1e6,
            "wall_s": round(done - opened, 3)}


_PERF_SUMMARY = re.compile(r"^% (\d+) messages produced \((\d+) bytes\), (\d+) delivered .* "
                           r"in (\d+)ms: (\d+) msgs/s and ([\d.]+) MB/s", re.M)


def rdkafka_produce(broker: Broker, bootstrap: str, topic: str, record_bytes: int,
                    count: int, args: argparse.Namespace, *extra: str) -> dict[str, Any]:
    """rdkafka_performance as run-workloads.sh runs it (acks=1, linger.ms=5): its summary."""
    command = [os.path.join(args.reference, "rdkafka_performance"), "-P", "-t", topic,
               "-s", str(record_bytes), "-c", str(count), "-b", bootstrap,
               "-X", "linger.ms=5", "-a", "1", *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    found = _PERF_SUMMARY.findall(done.stdout + done.stderr)
    if done.returncode or not found:
        raise RuntimeError(f"{broker.label}: rdkafka_performance failed ({done.returncode}):"
                           f" {(done.stdout + done.stderr)[-2000:]}")
    produced, nbytes, delivered, elapsed_ms, msgs_s, mb_s = found[-1]
    return {"messages": int(produced), "delivered": int(delivered), "bytes": int(nbytes),
            "elapsed_ms": int(elapsed_ms), "msgs_s": int(msgs_s), "mb_s": float(mb_s)}


def warm_up(broker: Broker, admin: AdminClient, bootstrap: str, round_no: int,
            args: argparse.Namespace) -> None:
    """run-workloads.sh's warm-up (500k x 100 B, unmeasured) before the W2 figures, never
    longer than they are."""
    topic = f"warm-up-r{round_no}"
    create_topic(admin, topic, W2_PARTITIONS, {})
    rdkafka_produce(broker, bootstrap, topic, 100, min(WARM_UP_MESSAGES, args.w2_messages),
                    args)
    os.sync()


def measure_w2(broker: Broker, admin: AdminClient, bootstrap: str, pid: int, topic: str,
               policy: str, args: argparse.Namespace) -> dict[str, Any]:
    create_topic(admin, topic, W2_PARTITIONS, {
        "cleanup.policy": policy, "segment.bytes": str(args.segment_mib << 20)})
    time.sleep(1)  # as run-workloads.sh: the new partitions settled
    cpu = process_cpu_seconds(pid)
    result = rdkafka_produce(broker, bootstrap, topic, W2_RECORD_BYTES, args.w2_messages, args,
                             "-k", W2_KEY, "-X", "partitioner=random")
    ended = time.monotonic()
    result["broker_cpu_s"] = round(process_cpu_seconds(pid) - cpu, 2)
    during = cleaner_rounds(broker, topic)
    result["cleaned_mb_during"] = sum(r.bytes_read for r in during) / 1e6
    result["cleaner_rounds_during"] = len(during)
    if policy == "compact":
        caught_up = wait_cleaned(broker, topic, W2_PARTITIONS, args.timeout)
        result["catch_up_s"] = None if caught_up is None else round(caught_up - ended, 3)
    os.sync()
    return result


def run_broker(broker: Broker, round_no: int, args: argparse.Namespace) -> dict[str, Any]:
    bootstrap, pid, _ = broker.start(raise_fd_limit())
    print(f"[r{round_no} {broker.label}] {bootstrap} pid {pid}", file=sys.stderr)
    try:
        return measure_broker(broker, bootstrap, pid, round_no, args)
    finally:
        broker.stop()


def measure_broker(broker: Broker, bootstrap: str, pid: int, round_no: int,
                   args: argparse.Namespace) -> dict[str, Any]:
    """Both figures against a started broker (its admin client gone when this returns,
    before the broker stops)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    label = f"[r{round_no} {broker.label}]"
    figures: dict[str, Any] = {
        "cleaner": measure_cleaner(broker, admin, bootstrap, f"clean-r{round_no}", args),
        "w2": {}}
    print(f"{label} cleaner {figures['cleaner']}", file=sys.stderr)
    if args.w2_messages:
        warm_up(broker, admin, bootstrap, round_no, args)
        first, second = ["compact", "delete"] if round_no % 2 else ["delete", "compact"]
        runs: dict[str, list[dict[str, Any]]] = {first: [], second: []}
        for i, policy in enumerate([first, second, second, first]):
            run = measure_w2(broker, admin, bootstrap, pid, f"w2-{policy}-r{round_no}-{i}",
                             policy, args)
            runs[policy].append(run)
            print(f"{label} W2 {policy} {run}", file=sys.stderr)
        figures["w2"] = {policy: _mean_run(both) for policy, both in runs.items()}
        figures["w2_runs"] = runs
    return figures


def _mean_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A policy's figures over its runs: the mean of each number (None if any is None)."""
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        values = [run.get(key) for run in runs]
        numbers = [v for v in values if isinstance(v, (int, float))]
        if isinstance(value, (int, float)) and len(numbers) == len(values):
            out[key] = sum(numbers) / len(numbers)
        else:
            out[key] = value if all(v == value for v in values) else None
    return out


# -- the report ------------------------------------------------------------------------------

Figure = Callable[[dict[str, Any]], float | None]


def path(*keys: str) -> Figure:
    """The figure at ``keys`` of one broker's round (None where that part did not run)."""
    def get(figures: dict[str, Any]) -> float | None:
        value: Any = figures
        for key in keys:
            if not isinstance(value, dict) or key not in value:
                return None
            value = value[key]
        return value
    return get


def _divided(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def ratio(numerator: Figure, denominator: Figure) -> Figure:
    return lambda figures: _divided(numerator(figures), denominator(figures))


@dataclasses.dataclass(frozen=True)
class Row:
    label: str
    figure: Figure
    fmt: str
    target: str = ""
    compared: bool = False   # a pybroker / Kafka ratio means something


ROWS = [
    Row("cleaner: MB/s of log read per second of cleaning", path("cleaner", "mb_s"), "{:.0f}",
        "pybroker / Kafka >= 1.0", compared=True),
    Row("cleaner: MB read, all rounds", lambda r: r["cleaner"]["bytes_read"] / 1e6, "{:.0f}"),
    Row("cleaner: MB written, all rounds", lambda r: r["cleaner"]["bytes_written"] / 1e6,
        "{:.1f}"),
    Row("cleaner: seconds from the alter to cleaned", path("cleaner", "wall_s"), "{:.2f}"),
    Row("W2 to a compacted topic, cleaner running, MB/s", path("w2", "compact", "mb_s"),
        "{:.0f}", compared=True),
    Row("W2 to a cleanup.policy=delete topic, MB/s", path("w2", "delete", "mb_s"), "{:.0f}",
        compared=True),
    Row("W2 compacted / delete", ratio(path("w2", "compact", "mb_s"),
                                       path("w2", "delete", "mb_s")),
        "{:.2f}", "pybroker >= 0.90"),
    Row("log cleaned while the compacted W2 ran, MB", path("w2", "compact", "cleaned_mb_during"),
        "{:.0f}"),
    Row("cleaner done after the compacted W2 ended, s", path("w2", "compact", "catch_up_s"),
        "{:.2f}"),
    Row("broker CPU s, compacted W2 / delete W2",
        ratio(path("w2", "compact", "broker_cpu_s"), path("w2", "delete", "broker_cpu_s")),
        "{:.2f}"),
]


def table(rounds: list[dict[str, dict[str, Any]]], labels: list[str],
          rows: list[Row] = ROWS) -> str:
    """Medians (each round's value in parentheses) per broker, and with both brokers the
    median of the per-round pybroker / Kafka ratios: one line per row."""
    def cell(values: list[float | None], fmt: str) -> str:
        found = [v for v in values if v is not None]
        if not found:
            return "-"
        text = fmt.format(statistics.median(found))
        return text + (f" ({', '.join(fmt.format(v) for v in found)})" if len(found) > 1 else "")

    both = labels == [Kafka.label, PyBroker.label]
    header = ["figure", *labels, *(["pybroker / Kafka"] if both else []), "target"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [cell([row.figure(r[label]) for r in rounds], row.fmt) for label in labels]
        if both:
            cells.append(cell([_divided(row.figure(r[PyBroker.label]), row.figure(r[Kafka.label]))
                               for r in rounds], "{:.2f}") if row.compared else "")
        lines.append(f"| {row.label} | {' | '.join(cells)} | {row.target} |")
    return "\n".join(lines)


def add_side_by_side_args(parser: argparse.ArgumentParser) -> None:
    """``--rounds`` and ``--brokers`` (read with ``chosen_brokers``)."""
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--brokers", default="kafka,pybroker",
                        help="kafka, pybroker or both (default both)")


def chosen_brokers(parser: argparse.ArgumentParser, args: argparse.Namespace,
                   settings: Mapping[str, object] | None = None) -> list[Broker]:
    """The brokers ``--brokers`` names, Kafka (of ``--reference``) first, each to be
    started with ``settings``."""
    wanted = args.brokers.split(",")
    if not wanted or not set(wanted) <= {"kafka", "pybroker"}:
        parser.error("--brokers: kafka, pybroker or kafka,pybroker")
    return [b for b in (Kafka(args.reference, settings), PyBroker(settings))
            if b.label.split("-")[0] in wanted]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.cleaner",
                                     description=__doc__.split("\n\n")[0])
    add_side_by_side_args(parser)
    parser.add_argument("--mb", type=float, default=256, help="data set, MB of keys+values")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--value-bytes", type=int, default=256)
    parser.add_argument("--tombstones", type=float, default=0.05, help="share of records")
    parser.add_argument("--partitions", type=int, default=1, help="of the data set's topic")
    parser.add_argument("--segment-mib", type=int, default=8, help="segment.bytes of topics")
    parser.add_argument("--w2-messages", type=int, default=2_000_000,
                        help="W2's record count (0: no W2 figure)")
    parser.add_argument("--timeout", type=float, default=600,
                        help="seconds for a cleaning or a W2 run to finish")
    parser.add_argument("--reference", default=REFERENCE,
                        help=f"kafka.sh and rdkafka_performance (default {REFERENCE})")
    parser.add_argument("--out", default=None, help="directory for result.json/result.md")
    args = parser.parse_args(argv)
    brokers = chosen_brokers(parser, args, BROKER_SETTINGS)
    result: dict[str, Any] = {
        "command": " ".join(["python3 -m bench.cleaner", *(argv or sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(),
        "broker_settings": BROKER_SETTINGS, "rounds": []}
    try:
        for round_no in range(1, args.rounds + 1):
            order = brokers if round_no % 2 else brokers[::-1]
            result["rounds"].append({b.label: run_broker(b, round_no, args) for b in order})
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print(f"bench.cleaner: {e}", file=sys.stderr)
        return 2
    result["loadavg_1m_end"] = os.getloadavg()[0]
    result["table"] = table(result["rounds"], [b.label for b in brokers])
    write_report(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Moving a big partition to a new broker while a producer writes (issue 17): how long the
move takes and what the producer feels, against the same producer without a move.

    python3 -m bench.reassign [--size 1GiB] [--rate MSGS|--calibrate SECONDS]
        [--window 20] [--rounds 3] [--to 1,4] [--throttle BYTES_PER_S] [--warmup 2]
        [--out DIR] [--set KEY=VALUE ...]

One run, in this order, on a local cluster of four brokers and a ZooKeeper
(bench.replicated's ``Cluster``; broker 4 holds nothing until the move). Two topics of
one partition each on brokers [1, 2] (leader 1, min.insync.replicas 2): ``moving``, the
partition that moves, and ``produced``, the producer's. The producer writes to a
partition of its own so that the moved partition is ``--size`` whatever the rate, while
it shares the leader, the follower, the disk and the CPUs with the move.

1. **fill**: ``moving`` filled to ``--size`` with bench.single_node's 1 MiB batches of
   1 KiB records, acks=all; the high watermark must count every batch.
2. **calibrate** (unless ``--rate``): the driver's librdkafka producer (bench/driver,
   1 KiB records, acks=all, idempotent) into ``produced`` as fast as it goes for
   ``--calibrate`` seconds; the rate of the rest of the run is half of what it got.
3. **baseline**: the same producer at that fixed rate for ``--window`` seconds.
4. **move**: the producer again at that rate; when its measured window starts
   ``moving`` is reassigned to ``--to`` (AlterPartitionReassignments; with
   ``--throttle``, as ``kafka-reassign-partitions.sh --throttle`` does: both
   replication rates of every broker and the topic's throttled-replica lists), and the
   window ends when the move is complete: no reassignment listed
   (ListPartitionReassignments) and Metadata shows the target as replicas and ISR.
   Steps 3 and 4 make a round; there are ``--rounds`` of them, the move going back to
   [1, 2] in every second round (the same bytes copied: a replica removed is deleted).
5. **check**: both partitions are read back from the beginning (a librdkafka consumer
   at each one's leader) and counted: ``moving`` must hold exactly the fill's records,
   ``produced`` exactly what every producer phase had acknowledged (``data.ok``);
   a run that lost (or duplicated) data says so and exits 1.

Each producer phase starts with an unmeasured warm-up (``--warmup``, 2 s). Reported: the
move's duration, the partition's bytes at the request and on the new replicas at the
end, bytes moved per second (the new replicas' log bytes over the move's duration), and
the producer's throughput and p50/p99/p99.9/max publish latency (librdkafka's
per-message produce-to-acknowledgement time, including the acknowledgements that come
after its window closes) at calibration, in the baseline window and during the move,
with their medians over the rounds. The default move, [1, 2] -> [1, 4], copies one
replica to the new broker while broker 1 keeps leading; ``--to 3,4`` moves both replicas
and the leadership.

A throttle measures, as Kafka's does, over ``replication.quota.window.num`` (11) samples
of a second, at least 10 s at the start: a fresh move copies up to 10 s worth of the
rate before it is held back, so a small partition is not throttled at all.

Everything shares this machine: the copy, the producer, the four brokers and ZooKeeper.
The result says how busy it was (load average at the end).
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from bench import replicated, single_node
from bench.driver import report
from bench.driver.recorder import T_END, T_MEASURE
from bench.driver.runner import Phase, Run
from bench.driver.workload import Consumers, Workload
from bench.single_node import machine, one_mib_batch, produce_frame, recv_frame

ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS, INCREMENTAL_ALTER_CONFIGS = 45, 46, 44
TOPIC_RESOURCE, SET = 2, 0
MOVING, PRODUCED, SOURCE = "moving", "produced", [1, 2]
BROKERS = 4
IN_FLIGHT = 4
WARMUP = 2.0
THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


def parse_size(text: str) -> int:
    """``20MB``, ``1GiB``, ``1073741824``: bytes (MB = 10^6, MiB = 2^20)."""
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
             "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "b": 1}
    lowered = text.strip().lower()
    for unit, factor in units.items():
        if lowered.endswith(unit):
            return int(float(lowered[:-len(unit)]) * factor)
    return int(lowered)


# -- the partition --------------------------------------------------------------------------

def fill(port: int, size: int) -> int:
    """Writes 1 MiB batches (acks=all, IN_FLIGHT in flight) until ``size`` bytes; returns
    the records written, checked against the high watermark."""
    batch = one_mib_batch()
    frame = produce_frame(MOVING, 0, batch, -1)
    batches = max(1, -(-size // len(batch)))
    scratch = memoryview(bytearray(1 << 16))
    with socket.create_connection(("127.0.0.1", port)) as sock:
        outstanding = 0
        for _ in range(batches):
            sock.sendall(frame)
            outstanding += 1
            if outstanding >= IN_FLIGHT:
                recv_frame(sock, scratch)
                outstanding -= 1
        for _ in range(outstanding):
            recv_frame(sock, scratch)
    records = batches * (single_node.BATCH_BYTES // (single_node.RECORD_BYTES + 16))
    stored = replicated.high_watermarks(port, MOVING, 1)[0]
    if stored != records:
        raise RuntimeError(f"fill: {records} records sent, the high watermark is {stored}")
    return records


def partition(port: int, topic: str) -> dict[str, Any]:
    """``topic``-0 as Metadata shows it: leader, replicas, isr."""
    answer = replicated.request(port, 3, 12, {
        "topics": [{"name": topic}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False})
    found = answer["topics"][0]["partitions"][0]
    return {"leader": found["leader_id"], "replicas": found["replica_nodes"],
            "isr": found["isr_nodes"]}


def in_sync(port: int, topic: str, replicas: list[int]) -> bool:
    return sorted(partition(port, topic)["isr"]) == sorted(replicas)


def log_bytes(data_dir: str) -> int:
    """Bytes of ``moving``-0's segment files in one broker's data dir (0 when absent)."""
    directory = os.path.join(data_dir, f"{MOVING}-0")
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0
    return sum(os.path.getsize(os.path.join(directory, n)) for n in names if n.endswith(".log"))


def set_throttle(port: int, source: list[int], target: list[int]) -> None:
    """The topic's throttled replicas as Kafka's reassignment tool lists them: the
    current replicas serve throttled, the added ones fetch throttled (the rates are
    the brokers' settings, given at start)."""
    added = [b for b in target if b not in source]
    lists = {"leader.replication.throttled.replicas": ",".join(f"0:{b}" for b in source),
             "follower.replication.throttled.replicas": ",".join(f"0:{b}" for b in added)}
    answer = replicated.request(port, INCREMENTAL_ALTER_CONFIGS, 0, {"resources": [{
        "resource_type": TOPIC_RESOURCE, "resource_name": MOVING,
        "configs": [{"name": k, "config_operation": SET, "value": v}
                    for k, v in lists.items()]}], "validate_only": False})
    error = answer["responses"][0]["error_code"]
    if error:
        raise RuntimeError(f"IncrementalAlterConfigs {lists}: error {error}")


def move(cluster: replicated.Cluster, source: list[int], target: list[int], throttle: bool,
         timeout: float) -> dict[str, Any]:
    """Requests the move and waits until it is complete; the figures of the move."""
    port = cluster.leader_port
    if throttle:
        set_throttle(port, source, target)
    bytes_at_request = log_bytes(cluster.data_dirs[0])
    started = time.monotonic()
    answer = replicated.request(port, ALTER_REASSIGNMENTS, 0, {"timeout_ms": 30000, "topics": [
        {"name": MOVING, "partitions": [{"partition_index": 0, "replicas": target}]}]})
    errors = [answer["error_code"]] + [p["error_code"] for t in answer["responses"]
                                       for p in t["partitions"]]
    if any(errors):
        raise RuntimeError(f"AlterPartitionReassignments to {target}: errors {errors}")

    def complete() -> bool:
        listed = replicated.request(port, LIST_REASSIGNMENTS, 0,
                                    {"timeout_ms": 30000, "topics": None})["topics"]
        now = partition(port, MOVING)
        return (not listed and now["replicas"] == target
                and sorted(now["isr"]) == sorted(target) and now["leader"] in target)
    cluster.wait_for(complete, f"move of {MOVING}-0 to {target}", timeout)
    seconds = time.monotonic() - started
    added = [b for b in target if b not in source]
    moved = sum(log_bytes(cluster.data_dirs[b - 1]) for b in added)
    return {"seconds": round(seconds, 3), "bytes_at_request": bytes_at_request,
            "bytes_on_new_replicas": moved, "mb_per_s": round(moved / seconds / 1e6, 3),
            "from": source, "to": target, "replicas_added": added,
            "after": partition(port, MOVING)}


def count_records(bootstrap: str, topic: str, end: int) -> dict[str, int]:
    """Reads ``topic``-0 from offset 0 to ``end``: the records found and errors met."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-reassign-check",
                         "enable.auto.commit": False, "fetch.max.bytes": 64 << 20,
                         "max.partition.fetch.bytes": 8 << 20})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    found = errors = 0
    next_offset = 0
    idle_until = time.monotonic() + 60
    try:
        while next_offset < end and time.monotonic() < idle_until:
            batch = consumer.consume(10000, 1.0)
            if batch:
                idle_until = time.monotonic() + 60
            for message in batch:
                if message.error():
                    errors += 1
                else:
                    found += 1
                    offset = message.offset()
                    assert offset is not None  # a record read has an offset
                    next_offset = offset + 1
    finally:
        consumer.close()
    return {"records_read": found, "read_errors": errors, "read_up_to": next_offset}


# -- the producer ---------------------------------------------------------------------------

class PartitionRun(Run):
    """A driver run producing into the existing ``produced`` topic. With ``during``, that
    function runs in a thread from the start of the measured window, and the window
    ends when it returns (its result in ``during_result``, its failure in
    ``during_error``)."""

    def __init__(self, workload: Workload, bootstrap: str,
                 during: Callable[[], dict[str, Any]] | None = None) -> None:
        super().__init__(workload, bootstrap)
        self.topics = [PRODUCED]
        self.during = during
        self.during_result: dict[str, Any] | None = None
        self.during_error: BaseException | None = None
        self.window = workload.duration

    def create_topics(self) -> None:
        """The topic was made with the cluster, on the moving partition's brokers."""

    def release(self, phase: Phase, warmup: float, duration: float) -> None:
        super().release(phase, warmup, duration)
        if self.during is not None and phase.name == "produce":
            threading.Thread(target=self._during, args=(phase,), daemon=True).start()

    def _during(self, phase: Phase) -> None:
        time.sleep(max(0.0, phase.control[T_MEASURE] - time.monotonic()))
        try:
            assert self.during is not None
            self.during_result = self.during()
        except BaseException as e:  # reported by the caller, the producers stopped
            self.during_error = e
        finally:
            end = time.monotonic()
            self.window = end - phase.control[T_MEASURE]
            phase.control[T_END] = end
            self.times["produce_end"] = end


def produce(cluster: replicated.Cluster, workload: Workload,
            during: Callable[[], dict[str, Any]] | None = None) -> tuple[dict, dict | None]:
    """One producer phase; the driver's result (its window as long as it really was) and
    ``during``'s."""
    run = PartitionRun(workload, f"127.0.0.1:{cluster.leader_port}", during)
    raw = run.execute()
    if run.during_error is not None:
        raise RuntimeError(f"during the producer's window: {run.during_error}") \
            from run.during_error
    raw["workload"] = workload.with_overrides(duration=run.window)
    return report.build_result(raw), run.during_result


def producer_figures(result: dict[str, Any]) -> dict[str, Any]:
    publish, counts = result["publish"], result["counts"]
    latency = publish["latency_ms"]
    return {"seconds": publish["seconds"], "msgs_per_s": publish["msgs_per_s"],
            "mb_per_s": publish["mb_per_s"],
            "latency_ms": {k: latency.get(k) for k in ("p50", "p99", "p99.9", "max")},
            "acked": counts["acked"], "produce_errors": counts["produce_errors"],
            "error_samples": counts["error_samples"], "consistent": counts["consistent"]}


def workload(rate: int | None, seconds: float, warmup: float) -> Workload:
    return Workload(name="reassign", partitions=1, message_size=1024, rate=rate, acks="all",
                    consumers=Consumers(groups=0, per_group=0), warmup=warmup,
                    duration=seconds, producer_config={"enable.idempotence": True})


# -- the run ----------------------------------------------------------------------------------

def run(args: argparse.Namespace, settings: dict[str, str]) -> dict[str, Any]:
    target = [int(b) for b in args.to.split(",")]
    size = parse_size(args.size)
    result: dict[str, Any] = {"size_bytes": size, "source": SOURCE, "target": target,
                              "throttle_bytes_per_s": args.throttle}
    root = tempfile.mkdtemp(prefix="pybroker-bench-reassign-")
    cluster = None
    try:
        cluster = replicated.Cluster(root, settings, brokers=BROKERS)
        port = cluster.leader_port
        for topic in (MOVING, PRODUCED):
            replicated.create_topic(port, topic, 1, SOURCE)
            cluster.wait_for(functools.partial(in_sync, port, topic, SOURCE),
                             f"{topic}-0 in sync on {SOURCE}")
        started = time.monotonic()
        fill_records = fill(port, size)
        result["fill"] = {"records": fill_records,
                          "seconds": round(time.monotonic() - started, 3),
                          "log_bytes": log_bytes(cluster.data_dirs[0])}
        acked = 0
        rate = args.rate
        if rate is None:
            calibration, _ = produce(cluster, workload(None, args.calibrate, args.warmup))
            result["calibration"] = producer_figures(calibration)
            acked += calibration["counts"]["acked"]
            rate = max(1, int(calibration["publish"]["msgs_per_s"] / 2))
        result["rate_msgs_per_s"] = rate
        result["rounds"] = []
        for round_no in range(args.rounds):
            source, dest = (SOURCE, target) if round_no % 2 == 0 else (target, SOURCE)
            baseline, _ = produce(cluster, workload(rate, args.window, args.warmup))
            acked += baseline["counts"]["acked"]
            # The window ends when the move is complete; its planned length only bounds it.
            during, moved = produce(cluster,
                                    workload(rate, 2 * args.move_timeout, args.warmup),
                                    functools.partial(move, cluster, source, dest,
                                                      args.throttle is not None,
                                                      args.move_timeout))
            acked += during["counts"]["acked"]
            result["rounds"].append({"baseline": producer_figures(baseline),
                                     "during_move": producer_figures(during),
                                     "move": moved})
        result["data"] = {MOVING: check(cluster, MOVING, fill_records),
                          PRODUCED: check(cluster, PRODUCED, acked)}
        result["data"]["ok"] = all(result["data"][t]["ok"] for t in (MOVING, PRODUCED))
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    return result


def check(cluster: replicated.Cluster, topic: str, expected: int) -> dict[str, Any]:
    """``topic``-0 read back from its leader: exactly the ``expected`` records."""
    leader = partition(cluster.leader_port, topic)["leader"]
    bootstrap = f"127.0.0.1:{cluster.ports[leader - 1]}"
    end = replicated.high_watermarks(cluster.ports[leader - 1], topic, 1)[0]
    read = count_records(bootstrap, topic, end)
    return {"expected_records": expected, "high_watermark": end, **read,
            "ok": read["records_read"] == expected == end and read["read_errors"] == 0}


def median(figures: list[dict[str, Any]], *path: str) -> float:
    """The median over ``figures`` of the value at ``path`` (keys, outermost first)."""
    values: list[float] = []
    for found in figures:
        value: Any = found
        for key in path:
            value = value[key]
        values.append(value)
    return statistics.median(values)


def cell(figures: list[dict[str, Any]], *path: str) -> str:
    """The median of ``path`` over ``figures``, then each one's value in parentheses."""
    text = f"{median(figures, *path):,.1f}"
    if len(figures) == 1:
        return text
    return f"{text} ({', '.join(f'{median([f], *path):,.1f}' for f in figures)})"


def table(result: dict[str, Any]) -> str:
    rounds, data = result["rounds"], result["data"]
    moves = [r["move"] for r in rounds]
    throttle = result["throttle_bytes_per_s"]
    lines = [
        f"Moves of a {moves[0]['bytes_at_request'] / 2 ** 30:.2f} GiB partition between "
        f"{result['source']} and {result['target']}"
        + (f", throttled at {throttle:,} B/s" if throttle is not None else "")
        + f", producer at {result['rate_msgs_per_s']:,} msg/s of 1 KiB, acks=all; medians "
          f"of {len(rounds)} rounds (each round's value in parentheses)",
        "",
        f"move: {cell(moves, 'seconds')} s, {cell(moves, 'mb_per_s')} MB/s onto the new "
        "replicas",
        "",
        "| producer window | msg/s | MB/s | p50 ms | p99 ms | p99.9 ms | max ms | errors |",
        "|---|---|---|---|---|---|---|---|"]
    windows = [(key, [r[key] for r in rounds]) for key in ("baseline", "during_move")]
    if "calibration" in result:
        windows.insert(0, ("calibration", [result["calibration"]]))
    labels = {"calibration": "calibration (max)", "baseline": "baseline",
              "during_move": "during the move"}
    for key, figures in windows:
        lines.append(f"| {labels[key]} | {cell(figures, 'msgs_per_s')} | "
                     f"{cell(figures, 'mb_per_s')} | "
                     + " | ".join(cell(figures, 'latency_ms', q)
                                  for q in ("p50", "p99", "p99.9", "max"))
                     + f" | {sum(f['produce_errors'] for f in figures)} |")
    lines.append("")
    for topic in (MOVING, PRODUCED):
        found = data[topic]
        lines.append(f"Data, {topic}: {found['records_read']:,} records read of "
                     f"{found['expected_records']:,} written (high watermark "
                     f"{found['high_watermark']:,}, read errors {found['read_errors']}): "
                     f"{'OK' if found['ok'] else 'DATA LOST OR DUPLICATED'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1GiB", help="the partition's size before the move")
    parser.add_argument("--rate", type=int, default=None,
                        help="producer msgs/s (default: half the calibrated rate)")
    parser.add_argument("--calibrate", type=float, default=10.0,
                        help="seconds of the calibration at full speed (without --rate)")
    parser.add_argument("--window", type=float, default=20.0, help="baseline seconds")
    parser.add_argument("--rounds", type=int, default=3,
                        help="baseline and move, the move there and back in turn")
    parser.add_argument("--to", default="1,4", help="the target replicas, leader first")
    parser.add_argument("--throttle", type=int, default=None,
                        help="replication throttle in bytes/s (both sides, every broker)")
    parser.add_argument("--warmup", type=float, default=WARMUP,
                        help="unmeasured seconds at the start of each producer phase")
    parser.add_argument("--move-timeout", type=float, default=3600.0,
                        help="seconds before a move that has not finished fails the run")
    replicated.add_cluster_args(parser)
    args = parser.parse_args(argv)
    settings = dict(item.split("=", 1) for item in args.set)
    if args.throttle is not None:
        settings.update({key: str(args.throttle) for key in THROTTLE_RATES})
    result: dict[str, Any] = {
        "command": " ".join(["python3 -m bench.reassign", *(argv or sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(),
        "cluster_settings": {**replicated.CLUSTER_SETTINGS, **settings}}
    result.update(run(args, settings))
    result["loadavg_1m_end"] = os.getloadavg()[0]
    result["table"] = table(result)
    replicated.write_report(result, args.out)
    return 0 if result["data"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

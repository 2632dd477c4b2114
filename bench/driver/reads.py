"""Read workloads: a preloaded topic read by consumers that cost the client little per byte.

``fanout``: ``consumers.groups`` readers (each its own process, no group: each reads every
partition) read the whole topic from offset 0 at once, from the page cache. Figures: the
aggregate throughput (records and value bytes delivered over all readers, divided by the
time from the common start to the last reader's end) and the broker's CPU seconds per GB
delivered.

``cold-read``: one reader reads the whole topic after its pages were dropped from the page
cache (bench.driver.pagecache; needs the broker's data dir), while a tailing consumer on a
second, one-partition topic records end-to-end latency of a steady producer
(``tail_rate`` messages/s of ``tail_message_size`` B; librdkafka, acks=1, linger.ms=5 as
the reference's W4; the consumer assigned to the partition, no group). The tail's p50/p99 during the cold
read are set against its own p50/p99 over ``idle_seconds`` just before, in the same run.
The resident fraction of the topic's segment files (``*.log``) is measured before and
after the drop and after the read. Both modes delete their topics at the end.

Readers (``consumer_backend``):
  raw                   bench.driver.rawclient.read_topic in a spawned process; the
                        processes connect first and start together on one event.
  rdkafka_performance   ``rdkafka_performance -C`` (the reference's consumer, the same flags
                        as its W3) per reader, all launched at once; its time includes
                        process start-up (milliseconds).
MB/s and CPU per GB count value bytes (records x message_size, MB = 10^6 bytes), the same
for both backends; the raw reader also reports the record-batch bytes it received
(``wire_bytes``), which must equal the preloaded batch bytes times the readers.

result.json (schema "pybroker-bench-read/1"): schema, workload, run, preload {records,
value_bytes, batch_bytes, seconds}, read {readers, messages, bytes, wire_bytes, seconds,
msgs_per_s, mb_per_s, per_reader}, broker (as the driver's: phases [{phase: "read", ...}]),
counts {checks, consistent}, and for cold-read: resident {before_drop, after_drop,
after_read} (fractions of pages) and tail {idle, cold} each {count, p50, p99, max} in ms.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import queue
import re
import secrets
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any

import numpy as np

from bench.driver import pagecache, rawclient
from bench.driver.messages import read_stamp, stamp
from bench.driver.procstat import BrokerProbe
from bench.driver.progress import Progress
from bench.driver.runner import SETUP_TIMEOUT, TICK, RunError, create_topics
from bench.driver.workload import Workload

SCHEMA = "pybroker-bench-read/1"
TAIL_WARMUP = 2.0      # seconds of tail traffic before its idle window opens
COLD_RESIDENT = 0.1    # a cold read with more of the topic resident is not cold
RDKAFKA_SUMMARY = re.compile(r"^% (\d+) messages \((\d+) bytes\) consumed in (\d+)ms", re.M)


def rdkafka_performance_path(given: str | None = None) -> str | None:
    path = given or os.environ.get("RDKAFKA_PERFORMANCE")
    return path if path and os.access(path, os.X_OK) else None


class ReadRun:
    def __init__(self, workload: Workload, bootstrap: str, broker_pid: int | None = None,
                 data_dir: str | None = None, progress: Progress | None = None,
                 rdkafka_performance: str | None = None):
        self.workload = workload
        self.bootstrap = bootstrap
        self.data_dir = data_dir
        self.progress = progress or Progress()
        self.probe = BrokerProbe(broker_pid) if broker_pid else None
        self.rdkafka_performance = rdkafka_performance_path(rdkafka_performance)
        if workload.consumer_backend == "rdkafka_performance" and not self.rdkafka_performance:
            raise RunError("consumer_backend rdkafka_performance: give its path with "
                           "--rdkafka-performance or RDKAFKA_PERFORMANCE")
        if workload.mode == "cold-read" and not (data_dir and os.path.isdir(data_dir)):
            raise RunError("cold-read drops the topic's pages: give the broker's --data-dir "
                           f"(got {data_dir!r})")
        run_id = time.strftime("%H%M%S") + "-" + secrets.token_hex(3)
        self.topic = f"bench-{workload.name}-{run_id}"
        self.tail_topic = f"{self.topic}-tail"
        self.ctx = mp.get_context("spawn")

    def execute(self) -> dict[str, Any]:
        w = self.workload
        started_wall = time.time()
        topics = [self.topic] + ([self.tail_topic] if w.mode == "cold-read" else [])
        create_topics(self.bootstrap, topics, [w.partitions, 1][:len(topics)],
                      w.replication_factor)
        self.progress.update("preload", f"{w.preload_bytes / 1e6:,.0f} MB into {self.topic}")
        t0 = time.monotonic()
        loaded = rawclient.preload(self.bootstrap, self.topic, w.partitions, w.preload_bytes,
                                   w.message_size, w.batch_size)
        loaded["seconds"] = round(time.monotonic() - t0, 3)
        self.progress.end_line()
        result: dict[str, Any] = {
            "schema": SCHEMA, "workload": w.as_dict(),
            "run": {"bootstrap": self.bootstrap, "topic": self.topic,
                    "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z",
                                                time.localtime(started_wall)),
                    "host": platform.node(), "cpus": os.cpu_count(),
                    "data_dir": self.data_dir},
            "preload": {"records": loaded["records"],
                        "value_bytes": loaded["records"] * w.message_size,
                        "batch_bytes": loaded["batch_bytes"], "seconds": loaded["seconds"]},
        }
        try:
            if w.mode == "fanout":
                figures = self.read(w.consumers.groups, loaded["end_offsets"])
            else:
                figures = self.cold_read(loaded["end_offsets"], result)
            result.update(self.summarize(figures, loaded, result))
        finally:
            delete_topics(self.bootstrap, topics)
        return result

    # -- readers ---------------------------------------------------------------------------

    def read(self, readers: int, end_offsets: list[int]) -> dict[str, Any]:
        """All readers at once; {"per_reader": [...], "go": t, "end": t} (monotonic)."""
        if self.workload.consumer_backend == "raw":
            return self.read_raw(readers, end_offsets)
        return self.read_rdkafka(readers, sum(end_offsets))

    def read_raw(self, readers: int, end_offsets: list[int]) -> dict[str, Any]:
        w = self.workload
        ready, results, go = self.ctx.Queue(), self.ctx.Queue(), self.ctx.Event()
        spec = {"bootstrap": self.bootstrap, "topic": self.topic, "end_offsets": end_offsets,
                "fetch_max_bytes": w.fetch_max_bytes,
                "partition_max_bytes": w.partition_max_bytes}
        processes = [self.ctx.Process(target=raw_reader, args=(i, spec, ready, go, results),
                                      name=f"bench-reader-{i}", daemon=True)
                     for i in range(readers)]
        for p in processes:
            p.start()
        try:
            connected, deadline = 0, time.monotonic() + SETUP_TIMEOUT
            while connected < readers:
                self.progress.update("setup", f"{connected}/{readers} readers connected")
                try:
                    ready.get(timeout=TICK)
                    connected += 1
                except queue.Empty:
                    if not results.empty():  # a reader failed before it was ready
                        raise RunError(f"reader failed:\n{results.get()[1]}") from None
                    if time.monotonic() > deadline:
                        raise RunError(f"{readers - connected} readers not connected after "
                                       f"{SETUP_TIMEOUT:.0f}s") from None
            self.sample()
            started = time.monotonic()
            go.set()
            per_reader = self.collect(results, readers, processes, started)
        finally:
            for p in processes:
                p.join(10)
                if p.is_alive():
                    p.terminate()
        return {"per_reader": per_reader, "go": started,
                "end": max(r["finished"] for r in per_reader)}

    def read_rdkafka(self, readers: int, records: int) -> dict[str, Any]:
        assert self.rdkafka_performance  # checked in __init__
        partitions = [arg for p in range(self.workload.partitions) for arg in ("-p", str(p))]
        command = [self.rdkafka_performance, "-C", "-t", self.topic, "-b", self.bootstrap,
                   *partitions, "-o", "beginning", "-c", str(records),
                   "-X", "queued.min.messages=1000000", "-X", "fetch.queue.backoff.ms=0"]
        outputs = [tempfile.TemporaryFile("w+") for _ in range(readers)]
        self.sample()
        started = time.monotonic()
        processes = [subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
                     for out in outputs]
        finished: dict[int, float] = {}
        try:
            while len(finished) < readers:
                for i, process in enumerate(processes):
                    if i not in finished and process.poll() is not None:
                        finished[i] = time.monotonic()
                self.watch(f"{len(finished)}/{readers} readers done", started)
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        self.progress.end_line()
        per_reader = []
        for i, (process, out) in enumerate(zip(processes, outputs, strict=True)):
            out.seek(0)
            output = out.read()
            out.close()
            found = RDKAFKA_SUMMARY.findall(output)
            if process.returncode != 0 or not found:
                raise RunError(f"rdkafka_performance reader {i} exited "
                               f"{process.returncode}:\n{output[-2000:]}")
            per_reader.append({"records": int(found[-1][0]), "bytes": None,
                               "finished": finished[i]})
        return {"per_reader": per_reader, "go": started, "end": max(finished.values())}

    def collect(self, results: Any, readers: int, processes: list[Any],
                started: float) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        while len(got) < readers:
            self.watch(f"{len(got)}/{readers} readers done", started)
            try:
                kind, payload = results.get_nowait()
            except queue.Empty:
                if not any(p.is_alive() for p in processes):
                    raise RunError("a reader exited without a result") from None
                continue
            if kind == "error":
                raise RunError(f"reader failed:\n{payload}")
            got.append(payload)
        self.progress.end_line()
        return got

    def watch(self, text: str, started: float) -> None:
        self.sample()
        self.progress.update("read", f"{time.monotonic() - started:5.1f}s {text}")
        time.sleep(TICK)

    def sample(self) -> None:
        if self.probe:
            self.probe.sample()

    # -- cold read -------------------------------------------------------------------------

    def cold_read(self, end_offsets: list[int], result: dict[str, Any]) -> dict[str, Any]:
        w = self.workload
        assert self.data_dir  # checked in __init__
        samples, stop = self.ctx.Queue(), self.ctx.Event()
        ready = self.ctx.Event()
        tail = self.ctx.Process(target=tail_worker, name="bench-tail", daemon=True, args=(
            {"bootstrap": self.bootstrap, "topic": self.tail_topic, "rate": w.tail_rate,
             "message_size": w.tail_message_size}, ready, stop, samples))
        tail.start()
        try:
            if not ready.wait(SETUP_TIMEOUT):
                raise RunError(f"the tail consumer saw nothing after {SETUP_TIMEOUT:.0f}s")
            self.pause("tail warm-up", TAIL_WARMUP)
            idle_start = time.monotonic()
            self.pause("tail idle", w.idle_seconds)
            idle_end = time.monotonic()
            files = pagecache.partition_files(self.data_dir, self.topic)
            segments = [f for f in files if f.endswith(".log")]
            before = pagecache.resident(segments)
            pagecache.drop(files)
            after = pagecache.resident(segments)
            figures = self.read(1, end_offsets)
            after_read = pagecache.resident(segments)
            stop.set()
            try:
                kind, payload = samples.get(timeout=SETUP_TIMEOUT)
            except queue.Empty:
                raise RunError("no latency samples from the tail consumer") from None
            if kind == "error":
                raise RunError(f"tail consumer failed:\n{payload}")
        finally:
            stop.set()
            tail.join(10)
            if tail.is_alive():
                tail.terminate()
        at, latency_us = np.frombuffer(payload[0]), np.frombuffer(payload[1])
        result["resident"] = {"segment_files": len(segments), "pages": before["pages"],
                              "before_drop": before["fraction"],
                              "after_drop": after["fraction"],
                              "after_read": after_read["fraction"]}
        result["tail"] = {
            "rate": w.tail_rate, "message_size": w.tail_message_size,
            "idle": percentiles(latency_us[(at >= idle_start) & (at < idle_end)]),
            "cold": percentiles(latency_us[(at >= figures["go"]) & (at <= figures["end"])])}
        return figures

    def pause(self, stage: str, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.sample()
            self.progress.update(stage, f"{end - time.monotonic():4.1f}s left")
            time.sleep(TICK)
        self.progress.end_line()

    # -- figures ---------------------------------------------------------------------------

    def summarize(self, figures: dict[str, Any], loaded: dict[str, Any],
                  result: dict[str, Any]) -> dict[str, Any]:
        w = self.workload
        per_reader = figures["per_reader"]
        readers = len(per_reader)
        seconds = max(figures["end"] - figures["go"], 1e-9)
        records = sum(r["records"] for r in per_reader)
        value_bytes = records * w.message_size
        raw = w.consumer_backend == "raw"
        wire = sum(r["bytes"] for r in per_reader) if raw else None
        checks = [{"check": "every reader got every record",
                   "ok": all(r["records"] == loaded["records"] for r in per_reader),
                   "detail": f"{[r['records'] for r in per_reader]} of {loaded['records']}"}]
        if "resident" in result:
            dropped = result["resident"]["after_drop"]
            checks.append({"check": "the drop left under 10% of the segment pages resident",
                           "ok": dropped is not None and dropped < COLD_RESIDENT,
                           "detail": f"{dropped} resident after the drop"})
        if raw:
            checks.append({"check": "record-batch bytes = preloaded x readers",
                           "ok": wire == loaded["batch_bytes"] * readers,
                           "detail": f"{wire} vs {loaded['batch_bytes']} x {readers}"})
        broker = None
        if self.probe:
            self.sample()
            cpu = self.probe.cpu_seconds(figures["go"], figures["end"])
            gb = value_bytes / 1e9
            broker = {"pid": self.probe.pid, "phases": [{
                "phase": "read", "seconds": round(seconds, 3),
                "cpu_seconds": None if cpu is None else round(cpu, 3),
                "gb_moved": round(gb, 6),
                "cpu_s_per_gb": None if cpu is None or not gb else round(cpu / gb, 3)}],
                **self.probe.peak_kb()}
        return {
            "read": {"readers": readers, "messages": records, "bytes": value_bytes,
                     "wire_bytes": wire, "seconds": round(seconds, 3),
                     "msgs_per_s": round(records / seconds, 1),
                     "mb_per_s": round(value_bytes / seconds / 1e6, 3),
                     "per_reader": [{"records": r["records"], "bytes": r["bytes"],
                                     "seconds": round(r["finished"] - figures["go"], 3)}
                                    for r in per_reader]},
            "broker": broker,
            "counts": {"checks": checks, "consistent": all(c["ok"] for c in checks)},
        }


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    """Each run preloads a topic of its own (1 GiB in the standard files): delete it
    afterwards so that rounds do not fill the disk. Best effort: the figures are in."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the futures end
    futures = admin.delete_topics(topics, operation_timeout=30, request_timeout=30)
    for topic, future in futures.items():
        try:
            future.result(timeout=60)
        except Exception as e:
            print(f"bench: could not delete topic {topic}: {e}", file=sys.stderr)


def percentiles(latency_us: Any) -> dict[str, Any]:
    if not len(latency_us):
        return {"count": 0, "p50": None, "p99": None, "max": None}
    p50, p99 = np.percentile(latency_us, [50, 99]) / 1000.0
    return {"count": int(len(latency_us)), "p50": round(float(p50), 3),
            "p99": round(float(p99), 3), "max": round(float(latency_us.max()) / 1000.0, 3)}


# -- worker processes (spawned: top-level functions) -----------------------------------------

def raw_reader(index: int, spec: dict[str, Any], ready: Any, go: Any, results: Any) -> None:
    try:
        connection = rawclient.Connection(spec["bootstrap"])
        ready.put(index)
        go.wait()
        read = rawclient.read_topic(spec["bootstrap"], spec["topic"], spec["end_offsets"],
                                    spec["fetch_max_bytes"], spec["partition_max_bytes"],
                                    connection=connection)
        connection.close()
        results.put(("result", read.as_dict()))
    except BaseException:
        results.put(("error", f"reader {index}: {traceback.format_exc()}"))


def tail_worker(spec: dict[str, Any], ready: Any, stop: Any, samples: Any) -> None:
    """A producer thread at ``rate`` and a consumer (assigned, no group) reading the tail;
    returns (receive times, latencies in microseconds) as float64 arrays' bytes."""
    try:
        from confluent_kafka import Consumer, Producer, TopicPartition

        # The reference's W4 settings: with linger.ms=0 each message is a request, which a
        # loaded Kafka answered seconds late (latency of a request queue, not of reads).
        producer = Producer({"bootstrap.servers": spec["bootstrap"], "acks": "1",
                             "linger.ms": 5})
        consumer = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": "unused",
                             "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                             "fetch.queue.backoff.ms": 0})
        consumer.assign([TopicPartition(spec["topic"], 0, 0)])
        padding = bytes(spec["message_size"] - 8)
        interval = 1.0 / spec["rate"]

        def produce() -> None:
            next_at = time.monotonic()
            while not stop.is_set():
                producer.produce(spec["topic"], stamp(time.monotonic_ns()) + padding,
                                 partition=0)
                producer.poll(0)
                next_at += interval
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            producer.flush(10)

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        at: list[float] = []
        latency: list[float] = []
        while not stop.is_set():
            message = consumer.poll(0.1)
            value = None if message is None or message.error() else message.value()
            if value is None:
                continue
            now = time.monotonic_ns()
            at.append(now / 1e9)
            latency.append((now - read_stamp(value)[0]) / 1000.0)
            if not ready.is_set():
                ready.set()
        thread.join(15)
        consumer.close()
        samples.put(("result", (np.array(at).tobytes(), np.array(latency).tobytes())))
    except BaseException:
        samples.put(("error", traceback.format_exc()))


def markdown(result: dict[str, Any]) -> str:
    w, read, preload = result["workload"], result["read"], result["preload"]
    lines = [f"# {w['name']}", "",
             f"{result['run']['started_at']} against `{result['run']['bootstrap']}`: "
             f"{preload['value_bytes'] / 2**30:.3f} GiB of {w['message_size']} B values in "
             f"{w['partitions']} partitions, read by {read['readers']} "
             f"{w['consumer_backend']} reader(s) ({w['mode']}).", "",
             "| readers | messages | MB | seconds | messages/s | MB/s | broker CPU s/GB |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    cpu = result["broker"]["phases"][0]["cpu_s_per_gb"] if result["broker"] else None
    lines.append(f"| {read['readers']} | {read['messages']:,} | {read['bytes'] / 1e6:,.1f} | "
                 f"{read['seconds']} | {read['msgs_per_s']:,.0f} | {read['mb_per_s']:,.1f} | "
                 f"{'-' if cpu is None else cpu} |")
    if "tail" in result:
        tail, res = result["tail"], result["resident"]
        lines += ["", f"Segment pages resident: {res['before_drop']} before the drop, "
                  f"{res['after_drop']} after it, {res['after_read']} after the read "
                  f"({res['pages']:,} pages).", "",
                  f"| tail consumer ({tail['rate']} msg/s x {tail['message_size']} B) | "
                  "samples | p50 ms | p99 ms | max ms |", "|---|---:|---:|---:|---:|"]
        for label in ("idle", "cold"):
            t = tail[label]
            lines.append(f"| {label} | {t['count']} | {t['p50']} | {t['p99']} | {t['max']} |")
    lines += ["", f"Counts: {'consistent' if result['counts']['consistent'] else 'INCONSISTENT'}."]
    lines += [f"- {'ok' if c['ok'] else 'FAILED'}: {c['check']}: {c['detail']}"
              for c in result["counts"]["checks"]]
    return "\n".join(lines) + "\n"

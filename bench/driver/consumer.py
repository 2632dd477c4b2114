"""Consumer worker process: one librdkafka consumer in one consumer group.

It joins its group, reports its assignment, and on ``go`` consumes until told to stop,
measuring end-to-end latency from the send timestamp at the front of each value.
"""

from __future__ import annotations

import time
from typing import Any

from bench.driver.messages import read_stamp
from bench.driver.recorder import ASSIGNED, READY, Recorder
from bench.driver.workload import Workload

BATCH = 1000


def consumer_config(workload: Workload, bootstrap: str, group: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        # Topics are new for each run, so "earliest" loses nothing that was produced
        # before the group settled and re-reads nothing from another run.
        "auto.offset.reset": "earliest",
        "enable.auto.commit": True,
        "enable.partition.eof": False,
    }
    config.update(workload.consumer_config)
    return config


def consume(spec: dict[str, Any], counters: Any, control: Any, go: Any,
            stop: Any) -> dict[str, Any]:
    """The worker process's body (run through recorder.run_worker); returns its result."""
    from confluent_kafka import Consumer

    workload = Workload.from_dict(spec["workload"])
    consumer = Consumer(consumer_config(workload, spec["bootstrap"], spec["group"]))
    recorder = Recorder(counters, control, spec["record_bytes"])
    assigned: list[Any] = []

    def on_assign(c: Any, partitions: list[Any]) -> None:
        assigned[:] = partitions
        counters[ASSIGNED] = len(partitions)

    def on_revoke(c: Any, partitions: list[Any]) -> None:
        assigned.clear()
        counters[ASSIGNED] = 0

    consumer.subscribe(spec["topics"], on_assign=on_assign, on_revoke=on_revoke)
    counters[READY] = 1
    # Until go, hold fetched data back: a backlog consumer's figures start at go, not at
    # the moment its group happened to settle.
    while not go.is_set() and not stop.is_set():
        if spec["hold"] and assigned:
            consumer.pause(assigned)  # again after every rebalance; cheap at 20 Hz
        message = consumer.poll(0.05)
        if message is not None:
            _take([message], recorder, time.monotonic_ns())
    if spec["hold"] and assigned:
        consumer.resume(assigned)

    batch, poll, monotonic_ns = consumer.consume, consumer.poll, time.monotonic_ns
    while not stop.is_set():
        # consume(timeout=0) takes what is queued without waiting to fill a batch; when
        # nothing is, poll() blocks only until the next message, so latency is not
        # inflated by a batch-fill timeout at low rates.
        messages = batch(BATCH, 0)
        if not messages:
            message = poll(0.05)
            messages = [message] if message is not None else []
        if messages:
            _take(messages, recorder, monotonic_ns())
        recorder.maybe_flush(time.monotonic())
    recorder.flush(time.monotonic())
    result = recorder.result(group=spec["group"], assigned=len(assigned))
    consumer.close()
    return result


def _take(messages: list[Any], recorder: Recorder, now_ns: int) -> None:
    append = recorder.pending.append
    for message in messages:
        if message.error() is not None:
            recorder.error(message.error())
            continue
        append((now_ns - read_stamp(message.value())[0]) / 1000.0)

"""The canary: one well-behaved client whose round trips show what the others cost it.

Every ``INTERVAL`` seconds it produces one record (acks=1) on its own connection and
fetches it back at the offset the produce returned; one round trip is both. It runs in
its own process, so the hostile clients' Python (and its GIL) never delays it; what it
waits for is the broker (and the machine, which the broker shares).

Each round trip is one line of the samples file: ``start_ns latency_ns status``
(CLOCK_MONOTONIC, the same clock in every process of the host). ``status`` is ``ok``,
``timeout`` (no answer within ``TIMEOUT``: the canary closes its connection and opens
another for the next round), ``conn`` (refused, reset or closed by the broker; also a
new connection), ``bad-answer`` (one the codec cannot read; also a new connection) or the
Kafka error the broker answered (``error:NOT_LEADER_OR_FOLLOWER``, ``error:empty-fetch``
when the fetch did not return the record).

``window`` summarises the round trips overlapping a time window. A round trip that
stalls delays the ones the canary would have sent meanwhile; they are counted as the
canary's HdrHistogram would with an expected interval (coordinated omission): a stall of
L adds L - INTERVAL, L - 2 INTERVAL, ... down to INTERVAL. So a 7 s stall in a 15 s
window moves the p99 as a client sending every 50 ms would feel it, not as one sample.
Timeouts count in the latencies at their elapsed time; other failures are only counted.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import time
from multiprocessing.synchronize import Event
from typing import Any, NamedTuple

from bench.hostile import wire
from pybroker._native.records import encode_batch, read_batch_header

INTERVAL = 0.05
TIMEOUT = 10.0
READY_TIMEOUT = 60.0
# While the topic is being created the broker answers these; the canary retries.
NOT_READY = {"UNKNOWN_TOPIC_OR_PARTITION", "LEADER_NOT_AVAILABLE", "NOT_LEADER_OR_FOLLOWER"}


class CanaryError(Exception):
    """The broker answered a round trip with an error (the sample's status)."""


class Sample(NamedTuple):
    start_ns: int
    latency_ns: int
    status: str

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.latency_ns


def round_trip(conn: wire.Connection, topic: str, deadline: float) -> None:
    batch = encode_batch([b"canary %d" % time.monotonic_ns()],
                         timestamps=[int(time.time() * 1000)])
    answer = conn.request(wire.PRODUCE, wire.produce_body({(topic, 0): batch}),
                          deadline=deadline)
    partition = answer["responses"][0]["partition_responses"][0]
    if partition["error_code"]:
        raise CanaryError(wire.error_name(partition["error_code"]))
    offset = partition["base_offset"]
    answer = conn.request(wire.FETCH, wire.fetch_body(topic, 0, offset), deadline=deadline)
    fetched = answer["responses"][0]["partitions"][0]
    if fetched["error_code"]:
        raise CanaryError(wire.error_name(fetched["error_code"]))
    records = fetched["records"]
    if not records or read_batch_header(records, 0).base_offset != offset:
        raise CanaryError("empty-fetch")


def _create_topic(bootstrap: str, topic: str) -> None:
    with wire.Connection(bootstrap, TIMEOUT) as conn:
        errors = wire.topic_errors(conn.request(wire.CREATE_TOPICS,
                                                wire.create_topics_body([topic])))
    if errors[topic] not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS
        raise RuntimeError(f"canary topic {topic}: {wire.error_name(errors[topic])}")


def _wait_until_served(bootstrap: str, topic: str) -> wire.Connection:
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        conn = wire.Connection(bootstrap, TIMEOUT)
        try:
            round_trip(conn, topic, time.monotonic() + TIMEOUT)
            return conn
        except CanaryError as e:
            conn.close()
            if str(e) not in NOT_READY or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def run(bootstrap: str, topic: str, samples_path: str, ready: Event, stop: Event) -> None:
    """The canary process: round trips every INTERVAL until ``stop``."""
    _create_topic(bootstrap, topic)
    conn: wire.Connection | None = _wait_until_served(bootstrap, topic)
    ready.set()
    with open(samples_path, "w", buffering=1) as out:
        next_start = time.monotonic()
        while not stop.wait(max(0.0, next_start - time.monotonic())):
            start = time.monotonic_ns()
            try:
                if conn is None:
                    conn = wire.Connection(bootstrap, TIMEOUT)
                round_trip(conn, topic, start / 1e9 + TIMEOUT)
                status = "ok"
            except CanaryError as e:
                status = f"error:{e}"
            except TimeoutError:
                status = "timeout"
            except OSError:  # ConnectionError, refused, reset
                status = "conn"
            except Exception:  # an answer the codec cannot read: start afresh
                status = "bad-answer"
            if status in ("timeout", "conn", "bad-answer") and conn is not None:
                conn.close()
                conn = None
            out.write(f"{start} {time.monotonic_ns() - start} {status}\n")
            # After a stall the next round trip starts at once, and the schedule restarts
            # from there (no burst to catch up): window() accounts for the ones skipped.
            next_start = max(next_start + INTERVAL, time.monotonic())


class Canary:
    """The canary process, started and stopped from the session that measures."""

    def __init__(self, bootstrap: str, samples_path: str) -> None:
        self.samples_path = samples_path
        self.topic = f"hostile-canary-{os.getpid()}-{time.monotonic_ns() % 10**9}"
        context = mp.get_context("spawn")
        self._ready, self._stop = context.Event(), context.Event()
        self.process = context.Process(
            target=run, args=(bootstrap, self.topic, samples_path, self._ready, self._stop),
            name="hostile-canary", daemon=True)

    def start(self) -> Canary:
        self.process.start()
        deadline = time.monotonic() + READY_TIMEOUT + 2 * TIMEOUT
        while not self._ready.wait(0.2):
            if not self.process.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the canary could not make a first round trip "
                                   "(is a Kafka-protocol broker at the bootstrap address?)")
        return self

    def stop(self) -> None:
        self._stop.set()
        self.process.join(TIMEOUT + 5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()

    def samples(self) -> list[Sample]:
        out = []
        with open(self.samples_path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3:  # the last line may be half written
                    out.append(Sample(int(parts[0]), int(parts[1]), parts[2]))
        return out

    def served_since(self, t_ns: int) -> bool:
        """Whether a round trip that started at or after ``t_ns`` succeeded."""
        return any(s.start_ns >= t_ns and s.status == "ok" for s in self.samples())


def percentile(ordered: list[float], p: float) -> float:
    """Nearest rank: the smallest value with at least p% of the values at or below it."""
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def window(samples: list[Sample], t0_ns: int, t1_ns: int) -> dict[str, Any]:
    """The round trips overlapping [t0, t1]: p50/p99/max in ms (see the module docstring)."""
    inside = [s for s in samples if s.start_ns <= t1_ns and s.end_ns >= t0_ns]
    timed = [s.latency_ns for s in inside if s.status in ("ok", "timeout")]
    interval_ns = int(INTERVAL * 1e9)
    latencies: list[float] = []
    for latency in timed:
        latencies.extend(range(latency, interval_ns, -interval_ns) if latency > interval_ns
                         else (latency,))
    latencies.sort()
    errors: dict[str, int] = {}
    for s in inside:
        if s.status != "ok":
            errors[s.status] = errors.get(s.status, 0) + 1
    figures: dict[str, Any] = {"round_trips": len(inside), "ok": len(inside) - sum(errors.values()),
                               "errors": errors}
    for name, p in (("p50_ms", 50.0), ("p99_ms", 99.0), ("max_ms", 100.0)):
        figures[name] = round(percentile(latencies, p) / 1e6, 3) if latencies else None
    return figures

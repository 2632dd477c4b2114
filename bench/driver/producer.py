"""Producer worker process: paces one backend from go until the end of the run.

At a target rate the worker keeps the number sent on the line ``rate * elapsed`` (it
catches up after a stall rather than silently lowering the rate); at max it sends in
chunks and lets the backend's back-pressure (a full local queue) set the pace.
"""

from __future__ import annotations

import time
from typing import Any

from bench.driver.backends import BACKENDS
from bench.driver.messages import key_sequence
from bench.driver.recorder import READY, SENT, T_END, T_START, Recorder
from bench.driver.workload import Workload

CHUNK = 1000  # messages per send() at max: amortises the pacing check and counter update
CONNECT_TIMEOUT = 30.0
MIN_WAIT = 0.001


def produce(spec: dict[str, Any], counters: Any, control: Any, go: Any,
            stop: Any) -> dict[str, Any]:
    """The worker process's body (run through recorder.run_worker); returns its result."""
    workload = Workload.from_dict(spec["workload"])
    recorder = Recorder(counters, control, spec["record_bytes"])
    seed = 1000 + spec["index"]
    backend = BACKENDS[workload.producer](workload, spec["bootstrap"], spec["topics"],
                                          key_sequence(workload, seed), seed, recorder)
    backend.connect(CONNECT_TIMEOUT)
    counters[READY] = 1
    while not go.wait(0.1):
        if stop.is_set():
            return recorder.result(sent=0, in_flight=0)

    rate = spec["rate"]  # this worker's share, or None for max
    chunk = getattr(backend, "chunk", CHUNK)
    t_start = control[T_START]
    sent = 0
    monotonic = time.monotonic
    while True:
        now = monotonic()
        if now >= control[T_END] or stop.is_set():
            break
        want = chunk
        if rate is not None:
            want = min(int((now - t_start) * rate) - sent, chunk)
            if want <= 0:
                # Sleep at least MIN_WAIT: waking per message at high rates would burn a
                # core that the broker on the same host needs; sends go out in small
                # bursts instead, well inside any linger.
                next_due = t_start + (sent + 1) / rate
                backend.service(min(max(next_due - now, MIN_WAIT), 0.005))
                recorder.maybe_flush(monotonic())
                continue
        got = backend.send(want)
        sent += got
        counters[SENT] = sent
        # A short send means the local queue is full: wait a little for acks.
        backend.service(0 if got == want else 0.001)
        recorder.maybe_flush(monotonic())
    in_flight = backend.flush(spec["flush_timeout"])
    result = recorder.result(sent=sent, in_flight=in_flight)
    backend.close()
    return result

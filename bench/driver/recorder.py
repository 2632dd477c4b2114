"""What each worker process counts and measures, and how it reports to the driver.

Thread-safety: a Recorder belongs to one worker process and one thread (librdkafka calls
delivery callbacks from ``poll``/``flush`` in the calling thread). The driver reads the
shared counter array without locks: each slot has one writer, and progress figures may be
a flush (50 ms) stale.
"""

from __future__ import annotations

import os
import resource
import time
import traceback
from typing import Any

import numpy as np

from bench.driver import histogram

# Slots of a worker's shared counter array (multiprocessing.Array('d')).
SENT, DONE_COUNT, ERRORS, ASSIGNED, READY, FINISHED = range(6)
COUNTER_SLOTS = 6

# Slots of the run's shared control array, all CLOCK_MONOTONIC seconds.
T_START, T_MEASURE, T_END = range(3)
CONTROL_SLOTS = 3

FLUSH_INTERVAL = 0.05


class Recorder:
    """Counts completed messages (acked or consumed) with their latencies.

    Latencies arrive in microseconds and wait in a list until ``flush``, which files them
    into the HdrHistogram in bulk and books the count into the per-second series and the
    measured window. Messages completed before ``t_measure`` (warm-up) are counted in the
    totals but not in the latency histogram or the window.
    """

    def __init__(self, counters: Any, control: Any, record_bytes: int):
        self.counters = counters
        self.control = control
        self.record_bytes = record_bytes
        self.pending: list[float] = []
        self.histogram = histogram.new()
        self.total = 0
        self.errors = 0
        self.error_samples: list[str] = []
        self.window = 0
        self.series: dict[int, int] = {}
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.next_flush = 0.0

    def error(self, reason: object) -> None:
        self.errors += 1
        if len(self.error_samples) < 5:
            self.error_samples.append(str(reason))
        self.counters[ERRORS] = self.errors

    def maybe_flush(self, now: float) -> None:
        if now >= self.next_flush:
            self.flush(now)

    def flush(self, now: float) -> None:
        self.next_flush = now + FLUSH_INTERVAL
        n = len(self.pending)
        if n == 0:
            return
        t_start, t_measure, t_end = (self.control[T_START], self.control[T_MEASURE],
                                     self.control[T_END])
        if now >= t_measure:
            histogram.record_many(self.histogram, np.asarray(self.pending))
            if now < t_end:
                self.window += n
        self.pending.clear()
        self.total += n
        second = int(now - t_start)
        self.series[second] = self.series.get(second, 0) + n
        if self.first_at is None:
            self.first_at = now
        self.last_at = now
        self.counters[DONE_COUNT] = self.total

    def result(self, **extra: Any) -> dict[str, Any]:
        self.flush(time.monotonic())
        usage = resource.getrusage(resource.RUSAGE_SELF)
        out = {
            "pid": os.getpid(),
            "total": self.total,
            "errors": self.errors,
            "error_samples": self.error_samples,
            "window": self.window,
            "series": self.series,
            "first_at": self.first_at,
            "last_at": self.last_at,
            "histogram": histogram.encode(self.histogram),
            "cpu_seconds": usage.ru_utime + usage.ru_stime,
        }
        out.update(extra)
        return out


def run_worker(role: str, body: Any, spec: dict[str, Any], counters: Any, control: Any,
               go: Any, stop: Any, results: Any) -> None:
    """A worker process's whole life: ``body``'s result or its traceback to the driver."""
    index = spec["index"]
    try:
        results.put((role, index, body(spec, counters, control, go, stop)))
    except BaseException:
        results.put(("error", f"{role} {index}", traceback.format_exc()))
    finally:
        counters[FINISHED] = 1

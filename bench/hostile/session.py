"""One session: the canary's idle baseline, then each pattern in turn, against one broker.

    start the canary; idle window (no pattern)          -> idle p99
    per pattern: setup; settle; snapshot "before"
                 run                                     -> canary window, CPU seconds
                 cleanup                                 -> peak RSS over run + cleanup
                 settle; snapshot "after", alive?

Settling is ``settle`` seconds and then until the canary has been served again, so one
pattern's aftermath (a broker still deleting 2,000 topics) is not charged to the next.
A pattern that fails (an exception, the broker gone) is reported with its error and the
session goes on; once the broker is gone the remaining patterns are reported as not run.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench.hostile import canary as canary_mod
from bench.hostile.canary import Canary
from bench.hostile.patterns import PATTERNS, Context, Pattern, raise_fd_limit
from bench.hostile.watch import BrokerWatch

SCHEMA = "pybroker-bench-hostile/1"
SETTLE_TIMEOUT = 120.0
NOT_RUN = "not run: the broker was gone"


class Settings:
    def __init__(self, idle: float = 20.0, duration: float = 15.0, settle: float = 3.0,
                 counts: dict[str, int] | None = None) -> None:
        self.idle = idle
        self.duration = duration
        self.settle = settle
        self.counts = counts or {}

    def count(self, name: str) -> int:
        return self.counts.get(name, PATTERNS[name].default_count)

    def as_dict(self) -> dict[str, Any]:
        return {"idle_s": self.idle, "duration_s": self.duration, "settle_s": self.settle}


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Session:
    def __init__(self, bootstrap: str, pid: int, settings: Settings,
                 log_path: str | None = None, out_dir: str | None = None,
                 label: str = "", say: Callable[[str], None] = _log) -> None:
        self.bootstrap = bootstrap
        self.settings = settings
        self.out_dir = out_dir or tempfile.mkdtemp(prefix="bench-hostile-")
        os.makedirs(self.out_dir, exist_ok=True)
        self.watch = BrokerWatch(pid, int(bootstrap.rsplit(":", 1)[1]), log_path)
        self.canary = Canary(bootstrap, os.path.join(self.out_dir, "canary-samples.txt"))
        self.label = label
        self.say = say
        self.run_id = f"{os.getpid()}-{int(time.time()) % 100000}"

    def run(self, names: list[str]) -> dict[str, Any]:
        started = time.time()
        raise_fd_limit()
        self.watch.start()
        self.canary.start()
        ctx = Context(self.bootstrap, self.watch, self.canary, self.settings.duration,
                      self.run_id)
        try:
            t0 = time.monotonic_ns()
            time.sleep(self.settings.idle)
            idle = canary_mod.window(self.canary.samples(), t0, time.monotonic_ns())
            self.say(f"{self.label}idle: canary p50 {idle['p50_ms']} ms, p99 {idle['p99_ms']} ms"
                     f" over {idle['round_trips']} round trips")
            results = []
            for name in names:
                pattern = PATTERNS[name](ctx, self.settings.count(name))
                result = self.measure(pattern, idle) if self.watch.alive() \
                    else {"pattern": name, "count": pattern.count, "error": NOT_RUN}
                results.append(result)
                self.say(self.label + progress_line(result))
        finally:
            self.canary.stop()
            self.watch.stop()
        report = {"schema": SCHEMA,
                  "run": {"bootstrap": self.bootstrap, "pid": self.watch.pid,
                          "log": self.watch.log_path, "started": started,
                          "host": platform.node(), "patterns": names,
                          **self.settings.as_dict(),
                          "canary": {"interval_s": canary_mod.INTERVAL,
                                     "timeout_s": canary_mod.TIMEOUT}},
                  "idle": idle, "patterns": results, "alive_at_end": self.watch.alive()}
        with open(os.path.join(self.out_dir, "result.json"), "w") as f:
            json.dump(report, f, indent=1)
        return report

    def settle(self) -> None:
        time.sleep(self.settings.settle)
        since, deadline = time.monotonic_ns(), time.monotonic() + SETTLE_TIMEOUT
        while (self.watch.alive() and self.canary.process.is_alive()
               and not self.canary.served_since(since) and time.monotonic() < deadline):
            time.sleep(0.1)

    def measure(self, pattern: Pattern, idle: dict[str, Any]) -> dict[str, Any]:
        watch = self.watch
        result: dict[str, Any] = {"pattern": pattern.name, "count": pattern.count,
                                  "error": None}
        t_run = None
        before: dict[str, Any] = {}
        try:
            pattern.setup()
            self.settle()
            before = watch.snapshot()
            t_run = time.monotonic_ns()
            pattern.run()
        except Exception as e:  # the broker misbehaving is a result, not a crash
            result["error"] = f"{type(e).__name__}: {e}"
        finally:
            t_ran = time.monotonic_ns()
            ran = watch.snapshot()
            try:
                pattern.cleanup()
            except Exception as e:
                result["error"] = result["error"] or f"cleanup: {type(e).__name__}: {e}"
            t_cleaned = time.monotonic_ns()
        self.settle()
        after = watch.snapshot()
        result.update(connections=pattern.connections, seconds=None, canary=None,
                      p99_ratio=None, cpu_seconds=None, log_bytes=None,
                      rss_growth_per_connection_kib=None, details=pattern.details,
                      alive=watch.alive())
        result["fds"] = {"before": before.get("fds"), "peak": None, "after": after["fds"]}
        result["rss_kb"] = {"before": before.get("rss_kb"), "peak": None,
                            "after": after["rss_kb"]}
        if t_run is None:  # setup failed: nothing was measured
            return result
        window = canary_mod.window(self.canary.samples(), t_run, t_ran)
        result.update(seconds=round((t_ran - t_run) / 1e9, 2), canary=window)
        if window["p99_ms"] is not None and idle["p99_ms"]:
            result["p99_ratio"] = round(window["p99_ms"] / idle["p99_ms"], 2)
        if None not in (ran["cpu_s"], before["cpu_s"]):
            result["cpu_seconds"] = round(ran["cpu_s"] - before["cpu_s"], 2)
        if None not in (ran["log_bytes"], before["log_bytes"]):
            result["log_bytes"] = ran["log_bytes"] - before["log_bytes"]
        # A run shorter than the sampling period may hold no sample: the snapshots count.
        sampled = watch.peak(t_run, t_cleaned)
        for key in ("rss_kb", "fds"):
            result[key]["peak"] = max(filter(None, (sampled[key], before[key], ran[key])),
                                      default=None)
        peak = result["rss_kb"]["peak"]
        if pattern.per_connection and pattern.connections and peak and before["rss_kb"]:
            result["rss_growth_per_connection_kib"] = round(
                (peak - before["rss_kb"]) / pattern.connections, 1)
        return result


def progress_line(result: dict[str, Any]) -> str:
    if result.get("canary") is None:
        return f"{result['pattern']}: {result['error']}"
    c, rss = result["canary"], result["rss_kb"]
    line = (f"{result['pattern']}: canary p99 {c['p99_ms']} ms (x{result['p99_ratio']} idle), "
            f"max {c['max_ms']} ms, errors {sum(c['errors'].values())}; RSS "
            f"{mb(rss['before'])} -> {mb(rss['peak'])} -> {mb(rss['after'])} MB; "
            f"{'alive' if result['alive'] else 'BROKER GONE'}")
    return line + (f"; error {result['error']}" if result["error"] else "")


def mb(kb: int | None) -> str:
    return "-" if kb is None else f"{kb / 1024:.0f}"

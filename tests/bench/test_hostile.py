"""bench.hostile end to end against a real pybroker: a few cheap patterns, checked for a
complete report and a canary that made round trips (never for speed); and the canary's
percentiles, which count a stall as the round trips it held up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from bench.hostile.canary import INTERVAL, Sample, window
from tests.bench import run_from_root

PATTERNS = {"idle": 20, "declared-size": 2, "log-injection": 1}
RESULT_KEYS = {"pattern", "count", "error", "connections", "seconds", "canary", "p99_ratio",
               "cpu_seconds", "log_bytes", "rss_growth_per_connection_kib", "details",
               "alive", "fds", "rss_kb"}


def hostile(*args: str) -> subprocess.CompletedProcess[str]:
    return run_from_root([sys.executable, "-m", "bench.hostile", *args], timeout=300)


def check_canary(canary: dict[str, Any]) -> None:
    assert canary["round_trips"] > 0 and canary["ok"] > 0
    assert 0 < canary["p50_ms"] <= canary["p99_ms"] <= canary["max_ms"]


def test_patterns_against_pybroker(broker: Any, tmp_path: Any) -> None:
    out = str(tmp_path / "out")
    counts = [arg for name, n in PATTERNS.items() for arg in ("--count", f"{name}={n}")]
    done = hostile("--bootstrap", broker.bootstrap, "--pid", str(broker.pid),
                   "--log", broker.log_path, "--patterns", ",".join(PATTERNS), *counts,
                   "--duration", "1", "--idle", "2", "--settle", "0.5", "--out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(os.path.join(out, "result.json")) as f:
        result = json.load(f)
    assert open(os.path.join(out, "result.md")).read() == done.stdout
    assert result["schema"] == "pybroker-bench-hostile/1" and result["alive_at_end"]
    check_canary(result["idle"])
    assert [p["pattern"] for p in result["patterns"]] == list(PATTERNS)
    for pattern in result["patterns"]:
        assert RESULT_KEYS <= set(pattern), pattern
        assert pattern["error"] is None and pattern["alive"], pattern
        assert pattern["count"] == PATTERNS[pattern["pattern"]]
        check_canary(pattern["canary"])
        for figure in ("rss_kb", "fds"):
            values = pattern[figure]
            assert 0 < values["before"] <= values["peak"] and values["after"] > 0, figure
        assert pattern["cpu_seconds"] >= 0 and pattern["log_bytes"] >= 0
        assert f"| {pattern['pattern']} | broker |" in done.stdout
    by_name = {p["pattern"]: p for p in result["patterns"]}
    for name in ("idle", "declared-size"):  # every connection was opened and counted
        assert by_name[name]["connections"] == by_name[name]["details"]["opened"] == PATTERNS[name]
        assert by_name[name]["rss_growth_per_connection_kib"] is not None
    assert isinstance(by_name["log-injection"]["details"]["marker_mentions"], int)  # log read
    samples = open(os.path.join(out, "canary-samples.txt")).read().split("\n")
    assert len(samples) > 20 and samples[0].split()[2] == "ok"


def test_unknown_pattern_is_refused() -> None:
    done = hostile("--bootstrap", "127.0.0.1:1", "--pid", "1", "--patterns", "idle,nope")
    assert done.returncode == 2 and "unknown pattern(s) nope" in done.stderr


def test_a_stall_counts_the_round_trips_it_held_up() -> None:
    step = int(INTERVAL * 1e9)
    quick = [Sample(i * step, 2_000_000, "ok") for i in range(100)]
    stall = Sample(100 * step, 1_000_000_000, "ok")  # 1 s: 19 round trips not sent
    after = [Sample(100 * step + 1_000_000_000 + i * step, 2_000_000, "ok") for i in range(100)]
    figures = window([*quick, stall, *after, Sample(0, 10, "conn")], 0, 10**12)
    assert figures["round_trips"] == 202 and figures["ok"] == 201
    assert figures["errors"] == {"conn": 1}
    assert figures["max_ms"] == 1000.0 and figures["p50_ms"] == 2.0
    # 200 quick ones and 19 from the stall (1 s, 0.95 s, ... 0.1 s): the p99 lands in it.
    assert figures["p99_ms"] == 900.0

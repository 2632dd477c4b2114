"""bench/transactions.py end to end against pybroker alone, in its smallest form (one
round, about a second per mode): the load generator compiles, both modes produce and the
transactional one commits, the broker's CPU is read over the window, and the report is
complete (never the speed)."""

from __future__ import annotations

import json
import sys

from tests.bench import run_from_root


def test_one_small_round_against_pybroker(tmp_path):
    done = run_from_root(
        [sys.executable, "-m", "bench.transactions", "--rounds", "1", "--brokers", "pybroker",
         "--seconds", "1", "--warmup", "0.5", "--out", str(tmp_path)], timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    result = json.loads((tmp_path / "result.json").read_text())
    (figures,) = [r["pybroker"] for r in result["rounds"]]
    assert set(figures) == {"plain", "transactional"}
    for mode, run in figures.items():
        assert run["mode"] == mode
        assert run["records"] > 0 and run["mb_per_s"] > 0 and run["seconds"] >= 1, mode
        assert run["bytes"] == run["records"] * 1024, mode
        # everything produced was acknowledged, nothing failed or was left behind
        assert run["produced"] == run["acked"] >= run["records"], mode
        assert run["failed"] == run["in_flight"] == 0, mode
        assert run["broker_cpu_s"] is not None and run["broker_cpu_s_per_gb"] > 0, mode
    transactional = figures["transactional"]
    assert transactional["transactions"] >= 1
    assert 0 < transactional["commit_ms_p50"] <= transactional["commit_ms_max"]
    assert figures["plain"]["transactions"] == 0
    table = (tmp_path / "result.md").read_text()
    assert table == result["table"] + "\n"
    assert "| transactional / plain | " in table and "| pybroker >= 0.97 |" in table

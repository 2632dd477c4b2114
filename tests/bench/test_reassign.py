"""bench/reassign.py end to end at a small size: a four-broker cluster (its own
ZooKeeper) the script starts itself, a 20 MB partition moved to the fourth broker under a
producer; checks the report is complete and every record was read back (never the speed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WINDOWS = ("calibration", "baseline", "during_move")
THROTTLE = 100_000_000


def test_small_move_reports_every_figure_and_loses_nothing(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "-m", "bench.reassign", "--size", "20MB", "--calibrate", "1",
         "--window", "1", "--throttle", str(THROTTLE), "--out", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["size_bytes"] == 20_000_000
    assert result["cluster_settings"]["follower.replication.throttled.rate"] == str(THROTTLE)
    assert result["fill"]["records"] > 0 and result["fill"]["log_bytes"] >= 20_000_000
    for name in WINDOWS:
        window = result[name]
        assert window["acked"] > 0 and window["msgs_per_s"] > 0, name
        assert window["produce_errors"] == 0 and window["consistent"], name
        assert window["latency_ms"]["p99"] >= window["latency_ms"]["p50"] > 0, name
    assert result["rate_msgs_per_s"] == max(1, int(result["calibration"]["msgs_per_s"] / 2))
    move = result["move"]
    assert move["replicas_added"] == [4]
    assert move["after"]["replicas"] == [1, 4] and sorted(move["after"]["isr"]) == [1, 4]
    assert move["seconds"] > 0 and move["bytes_on_new_replicas"] >= move["bytes_at_request"]
    data = result["data"]
    assert data["ok"], data
    assert data["moving"]["records_read"] == result["fill"]["records"]
    acked = sum(result[name]["acked"] for name in WINDOWS)
    assert data["produced"]["records_read"] == acked
    table = (tmp_path / "result.md").read_text()
    assert table == result["table"] + "\n"
    assert "| during the move |" in table and "Data, produced:" in table
    assert "DATA LOST" not in table

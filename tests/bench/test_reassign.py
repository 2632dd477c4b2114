"""bench/reassign.py end to end at a small size: a four-broker cluster (its own
ZooKeeper) the script starts itself, a 20 MB partition moved to the fourth broker and back
under a producer; checks the report is complete and every record was read back (never
the speed)."""

from __future__ import annotations

import json
import sys

from tests.bench import run_from_root

WINDOWS = ("baseline", "during_move")
THROTTLE = 100_000_000


def test_small_move_reports_every_figure_and_loses_nothing(tmp_path):
    done = run_from_root(
        [sys.executable, "-m", "bench.reassign", "--size", "20MB", "--calibrate", "1",
         "--window", "1", "--rounds", "2", "--warmup", "0.5", "--throttle", str(THROTTLE),
         "--out", str(tmp_path)], timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["size_bytes"] == 20_000_000
    assert result["cluster_settings"]["follower.replication.throttled.rate"] == str(THROTTLE)
    assert result["fill"]["records"] > 0 and result["fill"]["log_bytes"] >= 20_000_000
    windows = [result["calibration"]] + [r[name] for r in result["rounds"] for name in WINDOWS]
    for window in windows:
        assert window["acked"] > 0 and window["msgs_per_s"] > 0, window
        assert window["produce_errors"] == 0 and window["consistent"], window
        assert window["latency_ms"]["p99"] >= window["latency_ms"]["p50"] > 0, window
    assert result["rate_msgs_per_s"] == max(1, int(result["calibration"]["msgs_per_s"] / 2))
    there, back = (r["move"] for r in result["rounds"])
    assert (there["from"], there["to"], there["replicas_added"]) == ([1, 2], [1, 4], [4])
    assert (back["from"], back["to"], back["replicas_added"]) == ([1, 4], [1, 2], [2])
    for move in (there, back):
        assert sorted(move["after"]["isr"]) == sorted(move["to"]) == sorted(
            move["after"]["replicas"])
        assert move["seconds"] > 0
        assert move["bytes_on_new_replicas"] >= move["bytes_at_request"] > 0
    data = result["data"]
    assert data["ok"], data
    assert data["moving"]["records_read"] == result["fill"]["records"]
    assert data["produced"]["records_read"] == sum(window["acked"] for window in windows)
    table = (tmp_path / "result.md").read_text()
    assert table == result["table"] + "\n"
    assert "| during the move |" in table and "Data, produced:" in table
    assert "medians of 2 rounds" in table
    assert "DATA LOST" not in table

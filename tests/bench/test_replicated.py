"""bench/replicated.py end to end, one short round: a single node and a three-broker
cluster (its own ZooKeeper) the script starts itself; checks the report is complete and
every batch sent was stored (never the speed)."""

from __future__ import annotations

import json
import sys

from tests.bench import run_from_root

FIGURES = ("single_acks1", "rf3_acks1", "rf3_acksall")


def test_one_round_reports_every_figure(tmp_path):
    done = run_from_root(
        [sys.executable, "-m", "bench.replicated", "--seconds", "0.5", "--rounds", "1",
         "--out", str(tmp_path), "--set", "replica.fetch.wait.max.ms=100"], timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["cluster_settings"]["replica.fetch.wait.max.ms"] == "100"
    (figures,) = result["rounds"]
    assert set(figures) == set(FIGURES)
    for name in FIGURES:
        assert figures[name]["mb_s"] > 0 and figures[name]["batches"] > 0, name
        assert figures[name]["missing_batches"] == 0, name
        roles = {"leader", "generator"} | ({"followers"} if name.startswith("rf3") else set())
        assert set(figures[name]["cpu_s_per_gb"]) == roles, name
        assert figures[name]["cpu_s_per_gb"]["leader"] > 0, name
    table = (tmp_path / "result.md").read_text()
    assert table == result["table"] + "\n"
    assert len(table.splitlines()) == 2 + len(FIGURES)
    assert "| RF 3, acks=all (min.insync.replicas 2) |" in table

"""bench/spark_read.py end to end with tiny row counts: a real local[2] Spark, a broker the
script starts itself, the readers; checks the report is complete (never the speed)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.bench import run_from_root

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROWS, ROUNDS = 3000, 2


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("spark-read"))
    done = run_from_root(
        [sys.executable, "bench/spark_read.py", "--rows", str(ROWS), "--rounds", str(ROUNDS),
         "--partitions", "3", "--readers", "S,P,K", "--out", out], timeout=840)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    with open(os.path.join(out, "spark_read.json")) as f:
        result = json.load(f)
    with open(os.path.join(out, "spark_read.md")) as f:
        text = f.read()
    return done, result, text


def test_every_reader_read_every_row_each_round(run):
    _, result, _ = run
    assert result["schema"] == "pybroker-spark-read/1"
    assert [(r["round"], r["reader"]) for r in result["rounds"]] == \
        [(n, k) for n in range(1, ROUNDS + 1) for k in "SPK"]
    for r in result["rounds"]:
        assert r["seconds"] > 0
        # (seconds are rounded to 0.1 ms; the rate is of the unrounded time)
        assert r["rows_per_s"] == pytest.approx(ROWS / r["seconds"], rel=2e-2)


def test_verdict_is_the_median_of_s_over_the_best_client_per_round(run):
    _, result, _ = run
    rate = {(r["round"], r["reader"]): r["rows_per_s"] for r in result["rounds"]}
    per_round = result["ratios"]["per_round"]
    assert [p["round"] for p in per_round] == list(range(1, ROUNDS + 1))
    for p in per_round:
        best = max("PK", key=lambda k: rate[p["round"], k])
        assert p["best_client"] == best
        assert p["s_over_best"] == pytest.approx(
            rate[p["round"], "S"] / rate[p["round"], best], abs=1e-3)
    paired = sum(p["s_over_best"] for p in per_round) / ROUNDS  # median of two
    assert result["ratios"]["s_over_best_paired"] == pytest.approx(paired)
    assert result["ratios"]["met"] == (paired >= 1.0)


def test_report_names_the_command_date_and_machine(run):
    done, result, text = run
    assert result["machine"]["nproc"] == os.cpu_count()
    assert result["config"]["rows"] == ROWS and result["config"]["readers"] == "SPK"
    for needle in (result["command"], result["started_at"], result["machine"]["cpu_model"],
                   '| S spark format("pybroker") |', "| P pybroker Fetcher.read_range |",
                   "| K confluent-kafka consume() |", "S over the fastest client"):
        assert needle in text, needle
    assert done.stdout == text  # the Markdown is what the run printed

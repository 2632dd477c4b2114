"""bench/spark_ingest.py end to end with tiny row counts: a real local[2] Spark, a broker the
script starts itself, every writer; checks the report is complete (never the speed)."""

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
    out = str(tmp_path_factory.mktemp("spark-ingest"))
    done = run_from_root(
        [sys.executable, "bench/spark_ingest.py", "--rows", str(ROWS), "--rounds", str(ROUNDS),
         "--partitions", "3", "--arrow-batch-rows", "500", "--out", out, "--profile"],
        timeout=840)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    with open(os.path.join(out, "spark_ingest.json")) as f:
        result = json.load(f)
    with open(os.path.join(out, "spark_ingest.md")) as f:
        text = f.read()
    return done, result, text


def test_every_round_alternates_and_delivered_every_row(run):
    _, result, _ = run
    assert result["schema"] == "pybroker-spark-ingest/1"
    rounds = result["rounds"]
    assert [(r["round"], r["writer"]) for r in rounds] == \
        [(n, w) for n in range(1, ROUNDS + 1) for w in "ABC"]
    for r in rounds:
        assert r["rows"] == ROWS  # what the sink saw (B) or the topic holds (A, C)
        assert r["seconds"] > 0 and r["rows_per_s"] > 0
        assert 0 <= r["host_busy"] <= 1
        assert set(r["cpu_s"]) == {"spark_jvm", "spark_python", "broker"}
        assert r["cpu_s"]["spark_jvm"] > 0 and min(r["cpu_s"].values()) >= 0


def test_medians_and_ratios_follow_from_the_rounds(run):
    _, result, _ = run
    writers = result["writers"]
    assert set(writers) == {"A", "B", "C"}
    for key, w in writers.items():
        rates = sorted(r["rows_per_s"] for r in result["rounds"] if r["writer"] == key)
        assert w["rows_per_s"] == [r["rows_per_s"] for r in result["rounds"]
                                   if r["writer"] == key]
        assert w["median_rows_per_s"] == pytest.approx((rates[0] + rates[1]) / 2, abs=0.1)
    ratios = result["ratios"]
    a, b, c = (writers[k]["median_rows_per_s"] for k in "ABC")
    assert ratios["a_of_b"] == pytest.approx(a / b, abs=1e-3)
    assert ratios["a_over_c"] == pytest.approx(a / c, abs=1e-2)
    assert [p["round"] for p in ratios["per_round"]] == list(range(1, ROUNDS + 1))
    rates = {(r["round"], r["writer"]): r["rows_per_s"] for r in result["rounds"]}
    for p in ratios["per_round"]:
        n = p["round"]
        assert p["a_of_b"] == pytest.approx(rates[n, "A"] / rates[n, "B"], abs=1e-3)
        assert p["a_over_c"] == pytest.approx(rates[n, "A"] / rates[n, "C"], abs=1e-2)
    paired_b = sum(p["a_of_b"] for p in ratios["per_round"]) / ROUNDS  # median of two
    paired_c = sum(p["a_over_c"] for p in ratios["per_round"]) / ROUNDS
    assert ratios["a_of_b_paired"] == pytest.approx(paired_b)
    assert ratios["a_over_c_paired"] == pytest.approx(paired_c)
    assert ratios["met_a_of_b"] == (paired_b >= ratios["target_a_of_b"] == 0.7)
    assert ratios["met_a_over_c"] == (paired_c >= ratios["target_a_over_c"] == 5.0)


def test_report_names_the_command_date_and_machine(run):
    done, result, text = run
    machine = result["machine"]
    assert machine["nproc"] == os.cpu_count()
    assert machine["cpu_model"] and machine["kernel"] == os.uname().release
    assert result["command"].startswith(sys.executable)
    assert result["command"].split()[1:8] == [
        "bench/spark_ingest.py", "--rows", str(ROWS), "--rounds", str(ROUNDS),
        "--partitions", "3"]
    assert result["config"]["rows"] == ROWS and result["config"]["master"] == "local[2]"
    assert result["started_at"][:4].isdigit()
    for needle in (result["command"], result["started_at"], machine["cpu_model"],
                   machine["kernel"], "| A pybroker |", "| B arrow-count (ceiling) |",
                   "| C confluent foreachPartition |", "| A / B |", "| A / C |"):
        assert needle in text, needle
    assert done.stdout == text  # the Markdown is what the run printed


def test_profile_of_an_untimed_pybroker_write(run):
    _, result, text = run
    out = os.path.dirname(result["command"].split("--out ")[1].split()[0] + "/")
    assert result["files"] == ["spark_ingest.json", "spark_ingest.md", "profile-A.md",
                               "pyspy-A.folded"]
    assert "[profile-A.md](profile-A.md)" in text
    with open(os.path.join(out, "profile-A.md")) as f:
        profile = f.read()
    assert "| BulkProducer.send_arrow |" in profile and "# self %" in profile
    with open(os.path.join(out, "pyspy-A.folded")) as f:
        samples = [line.rpartition(" ")[2] for line in f]
    assert samples and all(s.strip().isdigit() for s in samples)

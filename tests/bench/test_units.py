"""Unit checks of the benchmark driver's own logic: workloads, histograms, aggregation,
reports and compare ratios. No broker needed; the end-to-end runs are in test_runs.py."""

from __future__ import annotations

import glob
import os
import sys

import numpy as np
import pytest

from bench.__main__ import main as bench_main
from bench.driver import compare, histogram, report
from bench.driver.backends import BackendUnavailable, native_client
from bench.driver.procstat import BrokerProbe
from bench.driver.workload import Workload, WorkloadError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STANDARD = sorted(glob.glob(os.path.join(ROOT, "bench", "workloads", "*.yaml")))


def test_standard_workloads_load_and_cover_the_set():
    workloads = {os.path.basename(p): Workload.load(p) for p in STANDARD}
    assert {"max-produce-100b.yaml", "max-produce-1kb.yaml", "consume-backlog.yaml",
            "e2e-latency.yaml", "many-partitions.yaml", "compressed-lz4.yaml",
            "compressed-zstd.yaml"} <= set(workloads)
    for w in workloads.values():
        assert w.duration <= 30  # standard runs stay modest; --duration overrides
    assert workloads["consume-backlog.yaml"].mode == "backlog"
    assert workloads["many-partitions.yaml"].partitions == 100
    assert {workloads[f"compressed-{c}.yaml"].compression for c in ("lz4", "zstd")} == \
        {"lz4", "zstd"}
    assert workloads["e2e-latency.yaml"].rate == 20000


def test_workload_rejects_typos_and_bad_values():
    with pytest.raises(WorkloadError, match="unknown workload keys"):
        Workload.from_dict({"name": "x", "partitons": 3})
    with pytest.raises(WorkloadError, match="keys"):
        Workload.from_dict({"name": "x", "keys": "gaussian"})
    with pytest.raises(WorkloadError, match="message_size"):
        Workload.from_dict({"name": "x", "message_size": 4})
    with pytest.raises(WorkloadError, match="backlog"):
        Workload.from_dict({"name": "x", "mode": "backlog", "consumers": 0})


def test_overrides_and_round_trip_through_the_worker_dict():
    w = Workload.from_dict({"name": "x", "rate": "max", "consumers": {"groups": 2,
                                                                       "per_group": 3}})
    assert w.rate is None and w.consumers.total == 6
    short = w.with_overrides(duration=3, warmup=0, rate=500)
    assert (short.duration, short.warmup, short.rate) == (3, 0, 500)
    assert Workload.from_dict(short.as_dict()) == short


def test_bulk_recording_lands_in_the_same_slots_as_single_recording():
    values = np.random.default_rng(7).integers(1, 50_000_000, 20_000)
    one_by_one = histogram.new()
    for v in values.tolist():
        one_by_one.record_value(v)
    bulk = histogram.new()
    histogram.record_many(bulk, values)
    for p in (0, 50, 90, 99, 99.9, 100):
        assert bulk.get_value_at_percentile(p) == one_by_one.get_value_at_percentile(p)
    assert bulk.get_total_count() == one_by_one.get_total_count()


def test_merge_of_encoded_histograms_is_the_union():
    a, b = histogram.new(), histogram.new()
    histogram.record_many(a, np.full(100, 1000))
    histogram.record_many(b, np.full(100, 9000))
    merged = histogram.merge([histogram.encode(a), histogram.encode(b)])
    s = histogram.summary(merged)
    assert s["count"] == 200
    assert s["p50"] == pytest.approx(1.0, rel=1e-3)
    assert s["p99"] == pytest.approx(9.0, rel=1e-3)
    assert s["p50"] <= s["p99"] <= s["p99.9"] <= s["max"]


def _worker(total, window, values_us, **extra):
    h = histogram.new()
    histogram.record_many(h, np.asarray(values_us))
    out = {"pid": 1, "total": total, "errors": 0, "error_samples": [], "window": window,
           "series": {0: total // 2, 1: total - total // 2}, "first_at": 1.0,
           "last_at": 2.0, "histogram": histogram.encode(h), "cpu_seconds": 0.5}
    out.update(extra)
    return out


def _raw(consumed_by_group):
    w = Workload.from_dict({"name": "unit", "duration": 2, "warmup": 0})
    producers = [_worker(600, 500, [100, 200, 300], sent=600, in_flight=0),
                 _worker(400, 300, [150, 5000], sent=400, in_flight=0)]
    consumers = [_worker(n, n, [900, 1200], group=g, assigned=4)
                 for g, n in consumed_by_group]
    return {"workload": w, "bootstrap": "127.0.0.1:1", "run_id": "r", "topics": ["t"],
            "started_wall": 0.0, "record_bytes": 100,
            "times": {"produce_start": 0.0, "produce_measure": 0.0, "produce_end": 2.0},
            "producers": producers, "consumers": consumers, "probe": None}


def test_report_aggregates_workers_and_checks_counts(tmp_path):
    result = report.build_result(_raw([("g0", 700), ("g0", 300)]))
    assert result["publish"]["messages"] == 800
    assert result["publish"]["msgs_per_s"] == 400
    assert result["publish"]["mb_per_s"] == pytest.approx(0.04)
    assert result["publish"]["latency_ms"]["count"] == 5
    assert result["consume"]["latency_kind"] == "end-to-end"
    assert result["counts"]["consumed_per_group"] == {"g0": 1000}
    assert result["counts"]["consistent"]
    assert result["series"]["publish"] == [500, 500]
    report.write(result, str(tmp_path))
    text = (tmp_path / "result.md").read_text()
    assert "| publish (ack latency) |" in text and "Counts: consistent." in text


def test_report_flags_a_group_that_missed_messages():
    result = report.build_result(_raw([("g0", 1000), ("g1", 999)]))
    assert not result["counts"]["consistent"]
    failed = [c for c in result["counts"]["checks"] if not c["ok"]]
    assert [c["check"] for c in failed] == ["consumed == produced (g1)"]
    assert "INCONSISTENT" in report.markdown(result)


def test_compare_ratios_and_median():
    pairs = []
    for r, (a, b) in enumerate([(100.0, 150.0), (100.0, 300.0), (200.0, 200.0)], 1):
        fa = {name: None for name, _ in compare.METRICS}
        fb = dict(fa)
        fa["publish msgs/s"], fb["publish msgs/s"] = a, b
        pairs.append({"round": r, "a": fa, "b": fb, "ratio": compare.ratios(fa, fb)})
    assert [p["ratio"]["publish msgs/s"] for p in pairs] == [1.5, 3.0, 1.0]
    median = compare.summarize(pairs)
    assert median["publish msgs/s"] == 1.5 and median["consume msgs/s"] is None
    text = compare.markdown({"a": {"name": "kafka", "bootstrap": "a:1"},
                             "b": {"name": "pybroker", "bootstrap": "b:2"}, "rounds": 3,
                             "condition_gib": 3,
                             "workloads": {"w": {"pairs": pairs, "median_ratio": median,
                                                 "consistent": True}}})
    assert "| publish msgs/s | 1.500 | 3.000 | 1.000 | **1.500** |" in text
    assert "consume msgs/s" not in text
    assert "3 GiB were written and deleted" in text


def test_broker_probe_reads_this_process():
    probe = BrokerProbe(os.getpid())
    first = probe.sample()
    sum(i * i for i in range(2_000_000))  # burn some CPU so the ticks move
    second = probe.sample()
    assert first is not None and second is not None and second >= first
    peak = probe.peak_kb()
    assert peak["vm_hwm_kb"] >= peak["max_sampled_rss_kb"] > 0
    with pytest.raises(ProcessLookupError):
        BrokerProbe(2**22 + 12345)


def test_native_backend_says_what_is_missing(monkeypatch, tmp_path, capsys):
    import pybroker

    # As if issue 5 were not built: the import fails even if another test imported it.
    monkeypatch.setitem(sys.modules, "pybroker.client", None)
    monkeypatch.delattr(pybroker, "client", raising=False)
    with pytest.raises(BackendUnavailable, match=r"pybroker\.client.*issue 5"):
        native_client()
    workload = tmp_path / "native.yaml"
    workload.write_text("producer: pybroker-native\nconsumers: 0\n")
    code = bench_main(["run", str(workload), "--bootstrap", "127.0.0.1:1",
                       "--out", str(tmp_path / "out")])
    assert code == 2
    assert "producer: librdkafka" in capsys.readouterr().err

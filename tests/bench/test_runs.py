"""The benchmark driver end to end: short runs of the standard workloads against a real
pybroker, checked for complete and consistent reports (never for speed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from tests.bench import ROOT, run_from_root

WORKLOADS = os.path.join(ROOT, "bench", "workloads")
RESULT_KEYS = {"schema", "workload", "run", "publish", "consume", "counts", "series",
               "broker", "clients", "files"}
FIGURE_KEYS = {"messages", "bytes", "seconds", "msgs_per_s", "mb_per_s", "latency_ms"}
LATENCY_KEYS = {"count", "p50", "p99", "p99.9", "max", "mean", "curve"}


def bench(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return run_from_root([sys.executable, "-m", "bench", *args], timeout=timeout)


def run_workload(broker: Any, out: str, workload: str, *overrides: str) -> dict[str, Any]:
    done = bench("run", os.path.join(WORKLOADS, workload), "--bootstrap", broker.bootstrap,
                 "--out", out, "--broker-pid", str(broker.pid), *overrides)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[produce]" in done.stderr or "[warm-up]" in done.stderr  # progress was shown
    for name in ("result.json", "result.md", "throughput.png", "latency.png"):
        assert os.path.getsize(os.path.join(out, name)) > 0, name
    with open(os.path.join(out, "result.json")) as f:
        result = json.load(f)
    check_result(result)
    assert open(os.path.join(out, "result.md")).read() == done.stdout
    return result


def check_latency(latency: dict[str, Any]) -> None:
    assert LATENCY_KEYS <= set(latency)
    assert latency["count"] > 0
    assert 0 <= latency["p50"] <= latency["p99"] <= latency["p99.9"] <= latency["max"]
    values = [v for _, v in latency["curve"]]
    assert values == sorted(values)


def check_result(result: dict[str, Any]) -> None:
    assert RESULT_KEYS <= set(result)
    assert result["schema"] == "pybroker-bench/1"
    counts = result["counts"]
    assert counts["consistent"], counts["checks"]
    assert counts["produced"] == counts["acked"] > 0
    assert counts["produce_errors"] == 0 and counts["in_flight"] == 0
    for figures in filter(None, (result["publish"], result["consume"])):
        assert FIGURE_KEYS <= set(figures)
        assert figures["messages"] > 0 and figures["msgs_per_s"] > 0
        assert figures["bytes"] == figures["messages"] * result["run"]["record_bytes"]
        check_latency(figures["latency_ms"])
    if result["consume"]:
        for consumed in counts["consumed_per_group"].values():
            assert consumed == counts["acked"]
    assert sum(result["series"]["publish"]) == counts["acked"]
    broker = result["broker"]
    assert broker["vm_hwm_kb"] >= broker["max_sampled_rss_kb"] > 0
    for phase in broker["phases"]:
        assert phase["cpu_seconds"] >= 0 and phase["gb_moved"] > 0
    assert set(result["files"]["charts"]) == {"throughput.png", "latency.png"}


def test_e2e_latency_workload(module_broker, tmp_path):
    result = run_workload(module_broker, str(tmp_path), "e2e-latency.yaml",
                          "--duration", "3", "--warmup", "1", "--rate", "2000")
    assert result["workload"]["rate"] == 2000 and result["workload"]["duration"] == 3
    assert result["consume"]["latency_kind"] == "end-to-end"
    assert sum(result["series"]["consume"]) == result["counts"]["acked"]
    assert [p["phase"] for p in result["broker"]["phases"]] == ["produce+consume"]


def test_consume_backlog_workload(module_broker, tmp_path):
    result = run_workload(module_broker, str(tmp_path), "consume-backlog.yaml",
                          "--duration", "2", "--rate", "10000")
    assert result["consume"]["latency_kind"] == "backlog age"
    assert result["counts"]["consumed_per_group"]  # one group, two members
    assert [p["phase"] for p in result["broker"]["phases"]] == ["produce", "consume"]


def test_compressed_keyed_workload(module_broker, tmp_path):
    result = run_workload(module_broker, str(tmp_path), "compressed-zstd.yaml",
                          "--duration", "2", "--warmup", "0", "--rate", "3000")
    assert result["workload"]["compression"] == "zstd"


def test_native_producer_backend(module_broker, tmp_path):
    workload = tmp_path / "native.yaml"
    workload.write_text("producer: pybroker-native\nmessage_size: 200\nkeys: zipf\n"
                        "partitions: 3\nrate: 20000\nacks: all\n"
                        "consumers: {groups: 2, per_group: 1}\nwarmup: 0\nduration: 2\n")
    out = str(tmp_path / "out")
    done = bench("run", str(workload), "--bootstrap", module_broker.bootstrap, "--out", out,
                 "--broker-pid", str(module_broker.pid))
    assert done.returncode == 0, done.stdout + done.stderr
    with open(os.path.join(out, "result.json")) as f:
        result = json.load(f)
    check_result(result)
    assert len(result["counts"]["consumed_per_group"]) == 2


def test_compare_one_round_against_the_same_broker_twice(module_broker, tmp_path):
    done = run_from_root(
        [os.path.join(ROOT, "bench", "compare"), "--a", module_broker.bootstrap,
         "--b", module_broker.bootstrap, "--a-pid", str(module_broker.pid),
         "--b-pid", str(module_broker.pid), "--a-name", "first", "--b-name", "second",
         "--rounds", "1", "--duration", "2", "--warmup", "0", "--rate", "2000",
         "--condition-gib", "0.01",
         "--out", str(tmp_path), os.path.join(WORKLOADS, "e2e-latency.yaml")], timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(tmp_path / "compare.json") as f:
        report = json.load(f)
    assert report["schema"] == "pybroker-bench-compare/1" and report["rounds"] == 1
    entry = report["workloads"]["e2e-latency"]
    assert entry["consistent"] and len(entry["pairs"]) == 1
    pair = entry["pairs"][0]
    for side in ("a", "b"):
        with open(tmp_path / pair[f"{side}_dir"] / "result.json") as f:
            check_result(json.load(f))
    for name in ("publish msgs/s", "consume msgs/s", "consume p99 ms"):
        assert pair["ratio"][name] > 0
        assert entry["median_ratio"][name] == pair["ratio"][name]
    assert "# second / first" in (tmp_path / "compare.md").read_text()

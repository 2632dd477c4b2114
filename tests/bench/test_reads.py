"""Read workloads (fan-out, cold read), the raw reader and page-cache conditioning, against
a real pybroker at tiny sizes; the figures are checked for sense, never for speed."""

from __future__ import annotations

import json
import os

from bench.driver import pagecache, rawclient
from bench.side_by_side import ratio_table
from pybroker._native.records import encode_batch, stamp_batch
from tests.bench.test_runs import WORKLOADS, bench

PRELOAD = 4 << 20


def run_read(broker, out, workload: str, *extra: str) -> dict:
    done = bench("run", os.path.join(WORKLOADS, workload), "--bootstrap", broker.bootstrap,
                 "--out", out, "--broker-pid", str(broker.pid), "--data-dir", broker.data_dir,
                 "--preload-bytes", str(PRELOAD), *extra)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(os.path.join(out, "result.json")) as f:
        result = json.load(f)
    assert result["schema"] == "pybroker-bench-read/1"
    assert result["counts"]["consistent"], result["counts"]["checks"]
    assert open(os.path.join(out, "result.md")).read() == done.stdout
    return result


def test_fanout_delivers_the_topic_to_every_reader(broker, tmp_path):
    result = run_read(broker, str(tmp_path), "fanout-8.yaml", "--condition-gib", "0.01")
    preload, read = result["preload"], result["read"]
    assert preload["records"] * 1024 >= PRELOAD
    assert read["readers"] == 8
    assert read["messages"] == preload["records"] * 8
    assert read["bytes"] == read["messages"] * 1024 == preload["value_bytes"] * 8
    assert read["wire_bytes"] == preload["batch_bytes"] * 8
    assert [r["records"] for r in read["per_reader"]] == [preload["records"]] * 8
    assert read["msgs_per_s"] > 0 and read["mb_per_s"] > 0
    phase = result["broker"]["phases"][0]
    assert phase["phase"] == "read" and phase["cpu_seconds"] >= 0
    assert phase["gb_moved"] == round(read["bytes"] / 1e9, 6)
    assert result["conditioning"]["written_gib"] > 0


def test_cold_read_drops_the_pages_and_measures_the_tail(broker, tmp_path):
    result = run_read(broker, str(tmp_path), "cold-read.yaml", "--idle-seconds", "1")
    read, resident, tail = result["read"], result["resident"], result["tail"]
    assert read["readers"] == 1 and read["messages"] == result["preload"]["records"]
    assert resident["segment_files"] >= 4 and resident["pages"] > 0
    assert resident["after_drop"] < resident["before_drop"]
    assert tail["rate"] == 1000
    idle = tail["idle"]
    assert idle["count"] > 0 and 0 < idle["p50"] <= idle["p99"] <= idle["max"]
    assert result["conditioning"] is None


def test_cold_read_without_the_data_dir_stops_before_running(module_broker, tmp_path):
    done = bench("run", os.path.join(WORKLOADS, "cold-read.yaml"), "--bootstrap",
                 module_broker.bootstrap, "--out", str(tmp_path))
    assert done.returncode == 2 and "--data-dir" in done.stderr


def test_walk_batches_leaves_a_partial_trailing_batch_for_the_next_fetch():
    batch = encode_batch([b"x" * 100] * 5)
    data = bytearray(batch * 3)
    for i in range(3):
        stamp_batch(data, i * len(batch), 10 + 5 * i, 0)
    whole = rawclient.walk_batches(data, 10)
    assert whole == (15, len(data), 25)
    cut = rawclient.walk_batches(memoryview(data)[:len(data) - 7], 10)
    assert cut == (10, 2 * len(batch), 20)
    # A broker may start at the batch holding the offset asked for: only the rest counts.
    assert rawclient.walk_batches(data, 17) == (8, 2 * len(batch), 25)


def test_conditioning_writes_and_deletes_within_half_of_available_memory(tmp_path):
    done = pagecache.condition(0.01, str(tmp_path))
    assert 0 < done["written_gib"] <= 0.01 and done["seconds"] >= 0
    assert os.listdir(tmp_path) == []
    capped = pagecache.conditioning_bytes(1 << 20, str(tmp_path))  # a PiB
    assert 0 < capped <= pagecache.mem_available_bytes() // 2


def test_side_by_side_ratios_per_round():
    def row(name: str, workload: str, r: int, mps: str, cpu: str) -> dict[str, str]:
        return {"label": f"{name}-120000-r{r}", "workload": workload, "msgs_per_s": mps,
                "broker_cpu_s_per_GB": cpu, "client_cpu_s": "1"}
    rows = [row("kafka", "W2", 1, "100", "2"), row("other", "W2", 1, "150", "1"),
            row("kafka", "W2", 2, "100", "2"), row("other", "W2", 2, "130", ""),
            row("kafka", "W2", 1, "1", "1").copy() | {"label": "kafka-999999-r1"}]
    table = ratio_table(rows, "120000")
    assert "| msgs/s | 1.50 | 1.30 | 1.40 | 1.30 | 1.50 |" in table
    assert "| broker CPU s/GB | 0.50 | - | 0.50 | 0.50 | 0.50 |" in table

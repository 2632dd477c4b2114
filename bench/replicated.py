"""Produce throughput with replication factor 3 on this machine, as a fraction of the
single-node figure measured in the same run.

    python3 -m bench.replicated [--seconds 5] [--rounds 3] [--out DIR] [--set KEY=VALUE ...]

(``--set`` passes a setting to the cluster's brokers, e.g. ``replica.fetch.wait.max.ms``.)

Three figures per round, in this order, each on a fresh topic:

- single node: one broker with no ZooKeeper, acks=1 (bench.single_node's produce figure);
- RF 3, acks=1: a three-broker cluster (a local ZooKeeper, ``pybroker serve
  --zookeeper``), the leader answers once its own log has the batch;
- RF 3, acks=all: the same cluster, min.insync.replicas 2, the leader answers once
  every in-sync follower has fetched the batch (the high watermark passed it).

The load is bench.single_node's: 1 MiB batches of 1 KiB records over 4 connections, 4
requests in flight on each, one partition per connection, the same frames. In the
cluster every partition is led by broker 1 (replicas [1, 2, 3]), so the generator talks
to one broker exactly as in the single-node figure, and that broker also serves its two
followers' fetches (zero-copy, like a consumer's). The broker settings are the
defaults but for short ZooKeeper timeouts; replica.fetch.max.bytes is Kafka's 1 MiB.

Where the CPU goes: each figure also reports the CPU seconds per GB produced of the
leader, of the two followers together and of the load generator (this process), from
/proc, over the figure and its wait for the high watermarks.

The load generator counts what it sent, not what was accepted: a produce refused
(NOT_ENOUGH_REPLICAS, a timeout) would look like throughput. So after each figure the
high watermarks are read back (ListOffsets) and every batch sent must be there
(``missing_batches`` 0), else the row says so.

Everything runs on the same machine: the followers' fetches and appends, the three
brokers and ZooKeeper share its CPUs and its page cache with the leader and the load
generator, which is what the ratio measures (on separate hosts the followers' work
would not slow the leader down). The result says how busy the machine was.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench import single_node
from bench.single_node import (
    CONNECTIONS,
    Broker,
    _run_connections,
    free_port,
    machine,
    one_mib_batch,
    process_cpu_seconds,
    produce_frame,
    produce_work,
    wait_port,
)
from pybroker.client.connection import BrokerConnection
from pybroker.net.protocol import codec

CREATE_TOPICS, DELETE_TOPICS, LIST_OFFSETS = 19, 20, 2
BROKERS = 3
# Short enough that a broker lost during a run is noticed; not part of what is measured.
CLUSTER_SETTINGS = {"zookeeper.session.timeout.ms": 6000, "offsets.topic.num.partitions": 3,
                    "offsets.topic.replication.factor": BROKERS,
                    "default.replication.factor": BROKERS}


class Cluster:
    """A local ZooKeeper and ``brokers`` brokers (three by default), each with a data dir
    of its own."""

    def __init__(self, root: str, settings: dict[str, str], brokers: int = BROKERS) -> None:
        from pybroker.cluster.zookeeper_server import start_zookeeper

        self.root = root
        self.zookeeper = start_zookeeper(os.path.join(root, "zookeeper"))
        self.ports = [free_port() for _ in range(brokers)]
        self.procs: list[subprocess.Popen[bytes]] = []
        for broker_id, port in enumerate(self.ports, 1):
            data = os.path.join(root, f"broker-{broker_id}")
            log = open(os.path.join(root, f"broker-{broker_id}.log"), "wb")
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "pybroker", "serve", "--zookeeper",
                 self.zookeeper.connect, "--broker-id", str(broker_id), "--listen",
                 f"127.0.0.1:{port}", "--data-dir", data,
                 *(arg for k, v in {**CLUSTER_SETTINGS, **settings}.items()
                   for arg in ("--set", f"{k}={v}"))],
                stdout=subprocess.DEVNULL, stderr=log))
            log.close()
        for port in self.ports:
            wait_port(port, timeout=60)
        self.wait_for(lambda: len(self._metadata([])["brokers"]) == brokers, "brokers registered")

    @property
    def leader_port(self) -> int:
        return self.ports[0]

    def _metadata(self, topics: list[str]) -> dict:
        return request(self.leader_port, 3, 12, {"topics": [{"name": t} for t in topics],
                                     "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False})

    def wait_for(self, predicate, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster: no {what} in {timeout:.0f} s (logs in "
                                   f"{self.root})")
            time.sleep(0.1)

    def create_topic(self, topic: str, partitions: int) -> None:
        """Every partition led by broker 1, followed by 2 and 3; whole ISRs awaited."""
        create_topic(self.leader_port, topic, partitions, [1, 2, 3])

        def ready() -> bool:
            found = self._metadata([topic])["topics"][0]
            return found["error_code"] == 0 and all(
                p["leader_id"] == 1 and len(p["isr_nodes"]) == BROKERS
                for p in found["partitions"])
        self.wait_for(ready, f"leaders and whole ISRs for {topic}")

    @property
    def roles(self) -> dict[str, list[int]]:
        """Broker processes by role: broker 1 leads every measured partition."""
        return {"leader": [self.procs[0].pid], "followers": [p.pid for p in self.procs[1:]]}

    @property
    def data_dirs(self) -> list[str]:
        return [os.path.join(self.root, f"broker-{i}") for i in range(1, len(self.ports) + 1)]

    def stop(self) -> None:
        """Kills every broker, then stops ZooKeeper: the run is over and the data dirs go
        next. SIGTERM would start a controlled shutdown in every broker at once, each
        asking the others to take leaderships none of them keeps, and retrying for up to
        40 s."""
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait()
        self.zookeeper.stop()


def request(port: int, api_key: int, version: int, body: dict) -> dict:
    with BrokerConnection("127.0.0.1", port, "bench") as conn:
        return conn.request(api_key, version, codec.with_defaults(api_key, version, body))


def create_topic(port: int, topic: str, partitions: int, replicas: list[int] | None) -> None:
    """``replicas``: every partition's assignment (cluster), None: replication factor 1.
    Deleted files go at once (file.delete.delay.ms 0), see delete_topic."""
    configs = {"max.message.bytes": str(2 * single_node.BATCH_BYTES),
               "file.delete.delay.ms": "0"}
    if replicas:
        configs["min.insync.replicas"] = "2"
    body = {"topics": [{
        "name": topic, "num_partitions": -1 if replicas else partitions,
        "replication_factor": -1 if replicas else 1,
        "assignments": [{"partition_index": p, "broker_ids": replicas}
                        for p in range(partitions)] if replicas else [],
        "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
        "timeout_ms": 30000, "validate_only": False}
    error = request(port, CREATE_TOPICS, 5, body)["topics"][0]["error_code"]
    if error:
        raise RuntimeError(f"CreateTopics {topic}: error {error}")


def delete_topic(port: int, topic: str, data_dirs: list[str], timeout: float = 60.0) -> None:
    """Deletes a measured topic and waits until its files are gone from every data dir:
    on this VM the next figure's appends then land on page-cache memory just freed, as
    the previous one's did, instead of memory the guest has not touched for a while
    (first-touch host faults made later figures of a run 2-4x slower than the first)."""
    request(port, DELETE_TOPICS, 4, {"topic_names": [topic], "timeout_ms": 30000})
    deadline = time.monotonic() + timeout
    while any(name.startswith(f"{topic}-") for d in data_dirs
              for name in (os.listdir(d) if os.path.isdir(d) else [])):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic}: files still there after {timeout:.0f} s")
        time.sleep(0.05)


def high_watermarks(port: int, topic: str, partitions: int) -> list[int]:
    body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
        {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
        for p in range(partitions)]}]}
    answer = request(port, LIST_OFFSETS, 7, body)
    return [p["offset"] for p in sorted(answer["topics"][0]["partitions"],
                                        key=lambda p: p["partition_index"])]


def measure(port: int, topic: str, seconds: float, acks: int,
            roles: dict[str, list[int]]) -> dict:
    """The single-node produce load against one port; checks every batch got in.
    ``roles``: the broker processes whose CPU is reported, by role ("leader", ...)."""
    before = {role: sum(process_cpu_seconds(pid) for pid in pids)
              for role, pids in roles.items()}
    generator = time.process_time()
    batch = one_mib_batch()
    frames = [produce_frame(topic, p, batch, acks) for p in range(CONNECTIONS)]
    records_per_batch = single_node.BATCH_BYTES // (single_node.RECORD_BYTES + 16)
    moved, elapsed = _run_connections(port, seconds, produce_work(frames, True))
    batches = moved // len(frames[0])
    # acks=1: the followers may still be fetching the tail; the high watermark gets there.
    deadline = time.monotonic() + 60
    while True:
        stored = sum(high_watermarks(port, topic, CONNECTIONS)) // records_per_batch
        if stored >= batches or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    gigabytes = moved / 1e9
    cpu = {role: sum(process_cpu_seconds(pid) for pid in pids) - before[role]
           for role, pids in roles.items()}
    cpu["generator"] = time.process_time() - generator
    return {"mb_s": moved / elapsed / 1e6, "batches": batches,
            "missing_batches": batches - stored,
            "cpu_s_per_gb": {role: round(s / gigabytes, 3) for role, s in cpu.items()}}


def run_round(single: Broker, cluster: Cluster, seconds: float, round_no: int) -> dict:
    figures = {}
    topic = f"single-{round_no}"
    create_topic(single.port, topic, CONNECTIONS, None)
    figures["single_acks1"] = measure(single.port, topic, seconds, 1,
                                      {"leader": [single.proc.pid]})
    finish(single.port, topic, [single.data_dir])
    for acks, name in ((1, "rf3_acks1"), (-1, "rf3_acksall")):
        topic = f"{name.replace('_', '-')}-{round_no}"
        cluster.create_topic(topic, CONNECTIONS)
        figures[name] = measure(cluster.leader_port, topic, seconds, acks, cluster.roles)
        finish(cluster.leader_port, topic, cluster.data_dirs)
    return figures


def finish(port: int, topic: str, data_dirs: list[str]) -> None:
    """The figure's log written back and deleted: the next figure is charged with
    neither (writers over vm.dirty_ratio are throttled; see delete_topic for memory)."""
    os.sync()
    delete_topic(port, topic, data_dirs)


ROWS = [("single node, acks=1", "single_acks1"), ("RF 3, acks=1", "rf3_acks1"),
        ("RF 3, acks=all (min.insync.replicas 2)", "rf3_acksall")]


def table(rounds: list[dict]) -> str:
    lines = ["| figure | MB/s (median) | fraction of single node | per round | missing batches "
             "| CPU s per GB: leader / followers / generator (median) |",
             "|---|---|---|---|---|---|"]
    base = [r["single_acks1"]["mb_s"] for r in rounds]
    for label, key in ROWS:
        values = [r[key]["mb_s"] for r in rounds]
        ratios = [v / b for v, b in zip(values, base, strict=True)]
        missing = sum(r[key]["missing_batches"] for r in rounds)
        cpu = " / ".join(
            f"{statistics.median(r[key]['cpu_s_per_gb'][role] for r in rounds):.2f}"
            if role in rounds[0][key]["cpu_s_per_gb"] else "-"
            for role in ("leader", "followers", "generator"))
        lines.append(f"| {label} | {statistics.median(values):.0f} | "
                     f"{statistics.median(ratios):.2f} | "
                     f"{', '.join(f'{x:.2f}' for x in ratios)} | {missing} | {cpu} |")
    return "\n".join(lines)


def write_report(result: dict, out: str | None) -> None:
    """Prints ``result`` (JSON, then its ``table``); with ``out``, writes them there as
    result.json and result.md."""
    print(json.dumps({k: v for k, v in result.items() if k != "table"}, indent=2))
    print(result["table"])
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "result.json"), "w") as fh:
            json.dump(result, fh, indent=2)
        with open(os.path.join(out, "result.md"), "w") as fh:
            fh.write(result["table"] + "\n")


def add_cluster_args(parser: argparse.ArgumentParser) -> None:
    """``--out`` and ``--set KEY=VALUE`` (``args.set``: the settings as given)."""
    parser.add_argument("--out", default=None, help="directory for result.json/result.md")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                        help="a setting of the cluster's brokers (repeatable)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per figure")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of the three figures; ratios are per round")
    add_cluster_args(parser)
    args = parser.parse_args(argv)
    settings = dict(item.split("=", 1) for item in args.set)
    result: dict = {
        "command": " ".join(["python3 -m bench.replicated", *(argv or sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(),
        "batch_bytes": single_node.BATCH_BYTES, "connections": CONNECTIONS,
        "cluster_settings": {**CLUSTER_SETTINGS, **settings}}
    root = tempfile.mkdtemp(prefix="pybroker-bench-replicated-")
    single = Broker()
    cluster = None
    try:
        cluster = Cluster(root, settings)
        result["rounds"] = [run_round(single, cluster, args.seconds, i)
                            for i in range(args.rounds)]
    finally:
        single.stop()
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    result["loadavg_1m_end"] = os.getloadavg()[0]
    result["table"] = table(result["rounds"])
    write_report(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

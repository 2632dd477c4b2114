"""A broker with several log directories (``log.dirs`` with a list), as real processes and
clients see it: partitions spread over the directories, DescribeLogDirs listing each with
its partitions and sizes (kafka-python's admin and exact requests), everything kept over a
restart, ``meta.properties`` in every directory."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator

import pytest

from pybroker._native.records import encode_batch
from pybroker.errors import ErrorCode
from tests.admin.clients import unique
from tests.broker.wire_client import WireClient, decode_all, fetch_body, produce_body
from tests.conftest import BrokerProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.admin import KafkaAdminClient

PRODUCE, FETCH, CREATE_TOPICS, DESCRIBE_LOG_DIRS = 0, 1, 19, 35


@pytest.fixture
def jbod(tmp_path) -> Iterator[Callable[[int], BrokerProcess]]:
    """Starts a broker whose ``log.dirs`` are ``count`` directories (disk0, disk1, ...)."""
    started: list[BrokerProcess] = []

    def start(count: int) -> BrokerProcess:
        dirs = [str(tmp_path / f"disk{i}") for i in range(count)]
        broker = BrokerProcess(dirs[0], log_path=str(tmp_path / "broker.log"),
                               extra_args=["--data-dir", ",".join(dirs)])
        broker.log_dirs = dirs  # type: ignore[attr-defined]
        started.append(broker)
        return broker.start()

    yield start
    for broker in started:
        if broker.alive():
            assert broker.stop() == 0, broker.log_text()[-3000:]


def create(client: WireClient, name: str, partitions: int) -> None:
    answer = client.request(CREATE_TOPICS, 7, {"topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": -1,
         "assignments": [], "configs": []}], "timeout_ms": 60000, "validate_only": False})
    assert answer["topics"][0]["error_code"] == ErrorCode.NONE


def produce(client: WireClient, topic: str, partition: int, value: bytes) -> int:
    answer = client.request(PRODUCE, 9, produce_body(topic, partition, encode_batch([value])))
    return answer["responses"][0]["partition_responses"][0]["error_code"]


def fetch_values(client: WireClient, topic: str, partition: int) -> list[bytes]:
    answer = client.request(FETCH, 12, fetch_body(topic, partition, 0))
    data = answer["responses"][0]["partitions"][0]
    assert data["error_code"] == ErrorCode.NONE
    return [record.value for record in decode_all(data["records"])]


def placement(log_dirs: list[str], topic: str) -> dict[int, str]:
    """Partition -> the log directory holding it, from the files."""
    return {int(name.rpartition("-")[2]): log_dir for log_dir in log_dirs
            for name in os.listdir(log_dir) if name.rpartition("-")[0] == topic}


def test_partitions_spread_over_the_dirs_and_described_and_kept_over_a_restart(jbod):
    broker = jbod(3)
    dirs = broker.log_dirs
    name = unique("jbod")
    with WireClient(broker.bootstrap) as client:
        create(client, name, 6)
        for partition in range(6):
            for i in range(partition + 1):
                assert produce(client, name, partition, b"%d-%d" % (partition, i)) == 0
    placed = placement(dirs, name)
    assert sorted(placed) == list(range(6))
    assert sorted(list(placed.values()).count(d) for d in dirs) == [2, 2, 2]

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        (answer,) = admin.describe_log_dirs()
    finally:
        admin.close()
    described = {entry["log_dir"]: entry for entry in answer["log_dirs"]}
    assert list(described) == [os.path.abspath(d) for d in dirs]
    for log_dir, entry in described.items():
        assert entry["error_code"] == ErrorCode.NONE
        assert 0 < entry["usable_bytes"] <= entry["total_bytes"]
        (topic,) = [t for t in entry["topics"] if t["name"] == name]
        sizes = {p["partition_index"]: p["partition_size"] for p in topic["partitions"]}
        assert {p for p, d in placed.items() if os.path.abspath(d) == log_dir} == set(sizes)
        for partition, size in sizes.items():
            assert size == os.path.getsize(os.path.join(
                log_dir, f"{name}-{partition}", f"{0:020d}.log")) > 0

    broker.restart()
    assert placement(dirs, name) == placed
    with WireClient(broker.bootstrap) as client:
        for partition in range(6):
            assert fetch_values(client, name, partition) == [
                b"%d-%d" % (partition, i) for i in range(partition + 1)]
        # every version Kafka 4.1 serves; a request naming one partition gets every dir
        for version in range(1, 5):
            answer = client.request(DESCRIBE_LOG_DIRS, version, {
                "topics": [{"topic": name, "partitions": [4]}]})
            results = answer["results"]
            assert [r["log_dir"] for r in results] == [os.path.abspath(d) for d in dirs]
            named = [(r["log_dir"], p["partition_index"]) for r in results
                     for t in r["topics"] for p in t["partitions"]]
            assert named == [(os.path.abspath(placed[4]), 4)]
    ids = {open(os.path.join(d, "meta.properties")).read() for d in dirs}
    assert len(ids) == 1 and "cluster.id=" in ids.pop()


def test_a_directory_named_twice_stops_the_start(tmp_path):
    disk = str(tmp_path / "disk")
    broker = BrokerProcess(disk, log_path=str(tmp_path / "broker.log"),
                           extra_args=["--data-dir", f"{disk},{disk}/"])
    with pytest.raises(RuntimeError, match="named twice"):
        broker.start()

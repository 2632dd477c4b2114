"""Configuration sources, clean shutdown with requests in flight, retention, slow readers."""

from __future__ import annotations

import os
import signal
import time

import pytest

from pybroker._native.records import encode_batch
from pybroker.config import BrokerConfig, parse_address
from pybroker.errors import ErrorCode
from tests.admin.clients import unique
from tests.broker.wire_client import WireClient, decode_all, fetch_body, produce_body
from tests.conftest import BrokerProcess

PRODUCE, FETCH, LIST_OFFSETS, METADATA, CREATE_TOPICS = 0, 1, 2, 3, 19


def create(client: WireClient, name: str, partitions: int = 1,
           configs: dict[str, str] | None = None) -> dict:
    body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": -1,
                        "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            "timeout_ms": 10000, "validate_only": False}
    return client.request(CREATE_TOPICS, 7, body)["topics"][0]


# configuration ----------------------------------------------------------------------------


def test_config_precedence_file_then_environment_then_flags(tmp_path):
    path = tmp_path / "broker.properties"
    path.write_text("# comment\nnum.partitions=2\nlog.dirs = /from/file\nbroker.id: 5\n"
                    "log.retention.hours=1\nsome.unknown.key=1\n")
    config = BrokerConfig.load(str(path), environ={"PYBROKER_NUM_PARTITIONS": "3",
                                                   "PYBROKER_BUILD_ONLY": "records"},
                               overrides={"broker.id": 7, "log.dirs": None})
    assert config["num.partitions"] == 3  # environment beats the file
    assert config.broker_id == 7  # a flag beats both
    assert config.data_dir == "/from/file"  # an unset flag keeps the file's value
    assert config.retention_ms == 3_600_000
    assert config.extra == {"some.unknown.key": "1"}
    assert config.topic_defaults()["retention.ms"] == 3_600_000
    assert parse_address("PLAINTEXT://[::1]:9092") == ("::1", 9092)
    with pytest.raises(ValueError):
        BrokerConfig({"num.partitions": "many"})


def test_serve_reads_a_config_file_and_the_environment(tmp_path):
    path = tmp_path / "broker.properties"
    path.write_text("listeners=PLAINTEXT://127.0.0.1:1\nbroker.id=5\nnum.partitions=2\n"
                    "message.max.bytes=5000\nauto.create.topics.enable=true\n")
    broker = BrokerProcess(str(tmp_path / "data"), log_path=str(tmp_path / "broker.log"),
                           extra_args=["--config", str(path), "--broker-id", "7"],
                           env={"PYBROKER_AUTO_CREATE_TOPICS_ENABLE": "false",
                                "PYBROKER_NUM_PARTITIONS": "3"})
    broker.start()  # --listen 127.0.0.1:0 from the fixture beats listeners= of the file
    try:
        with WireClient(broker.bootstrap) as client:
            meta = client.request(METADATA, 12, {"topics": [{"name": "absent"}],
                                                 "allow_auto_topic_creation": True})
            assert meta["brokers"][0]["node_id"] == 7
            assert meta["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            created = create(client, "configured", partitions=-1)
            assert created["num_partitions"] == 3
            configs = {c["name"]: c["value"] for c in created["configs"]}
            assert configs["max.message.bytes"] == "5000"
    finally:
        assert broker.stop() == 0


# shutdown ---------------------------------------------------------------------------------


def test_sigterm_answers_requests_in_flight_and_exits_zero(broker):
    topic = unique("inflight")
    with WireClient(broker.bootstrap) as client, WireClient(broker.bootstrap) as poller:
        create(client, topic)
        poller.send(FETCH, 12, fetch_body(topic, 0, 0, max_wait_ms=60_000, min_bytes=1))
        client.send(PRODUCE, 9, produce_body(topic, 0, encode_batch([b"last"])))
        produced = client.receive(PRODUCE, 9)["responses"][0]["partition_responses"][0]
        assert produced["error_code"] == 0
        broker.proc.send_signal(signal.SIGTERM)
        # the long poll was woken by the produce or by the shutdown: answered either way
        fetched = poller.receive(FETCH, 12)["responses"][0]["partitions"][0]
        assert fetched["error_code"] == 0
    assert broker.stop() == 0
    text = broker.log_text()
    assert "received SIGTERM" in text and "shutdown complete" in text
    assert os.path.exists(os.path.join(broker.data_dir, ".kafka_cleanshutdown"))


# retention --------------------------------------------------------------------------------


def test_retention_runs_periodically(broker_factory):
    broker = broker_factory(log_retention_check_interval_ms=100)
    topic = unique("retention")
    with WireClient(broker.bootstrap) as client:
        create(client, topic, configs={"retention.ms": "1000", "segment.bytes": "20000"})
        for i in range(6):
            batch = encode_batch([bytes([i]) * 8000], timestamps=[int(time.time() * 1000)])
            produced = client.request(PRODUCE, 9, produce_body(topic, 0, batch))
            assert produced["responses"][0]["partition_responses"][0]["error_code"] == 0
        body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}]}]}
        deadline = time.monotonic() + 60
        earliest = 0
        while earliest == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
            part = client.request(LIST_OFFSETS, 7, body)["topics"][0]["partitions"][0]
            earliest = part["offset"]
        assert earliest > 0
        out_of_range = client.request(FETCH, 12, fetch_body(topic, 0, 0))
        assert out_of_range["responses"][0]["partitions"][0]["error_code"] == \
            ErrorCode.OFFSET_OUT_OF_RANGE


# a reader that does not read ------------------------------------------------------------


def test_a_stalled_fetch_does_not_block_other_connections(module_broker):
    topic = unique("stall")
    value = os.urandom(1024) * 512
    with WireClient(module_broker.bootstrap) as client, \
            WireClient(module_broker.bootstrap) as stalled:
        create(client, topic, configs={"max.message.bytes": str(1024 * 1024)})
        for _ in range(24):
            client.request(PRODUCE, 9, produce_body(topic, 0, encode_batch([value])))
        # 12 MiB answer, far more than the socket buffers hold; nobody reads it for now
        stalled.send(FETCH, 12, fetch_body(topic, 0, 0, max_bytes=64 * 1024 * 1024))
        time.sleep(0.2)
        for _ in range(3):
            produced = client.request(PRODUCE, 9, produce_body(topic, 0, encode_batch([b"x"])))
            assert produced["responses"][0]["partition_responses"][0]["error_code"] == 0
        records = decode_all(stalled.receive(FETCH, 12)["responses"][0]["partitions"][0]
                             ["records"])
        assert len(records) >= 24 and records[0].value == value


# command line -----------------------------------------------------------------------------


def test_cli_lists_its_commands_and_dumps_a_log(module_broker):
    import subprocess
    import sys

    from tests.conftest import ROOT

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pybroker", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)

    usage = run("--help").stdout
    for command in ("serve", "log", "topic", "produce", "consume"):
        assert command in usage
    assert "--data-dir" in run("serve", "--help").stdout
    topic = unique("dump")
    with WireClient(module_broker.bootstrap) as client:
        create(client, topic)
        client.request(PRODUCE, 9, produce_body(topic, 0, encode_batch([b"a", b"b"])))
    dumped = run("log", "dump", os.path.join(module_broker.data_dir, f"{topic}-0"))
    assert dumped.returncode == 0, dumped.stderr
    assert "baseOffset: 0 lastOffset: 1 count: 2" in dumped.stdout

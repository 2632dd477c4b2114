"""A broker with several log directories (``log.dirs`` with a list), as real processes and
clients see it: partitions spread over the directories, DescribeLogDirs listing each with
its partitions and sizes (kafka-python's admin and exact requests), everything kept over a
restart, ``meta.properties`` in every directory."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterator

import pytest

from pybroker._native.records import encode_batch
from pybroker.errors import ErrorCode
from tests.admin.clients import unique
from tests.broker.prometheus import metrics_url, scrape
from tests.broker.wire_client import WireClient, decode_all, fetch_body, produce_body
from tests.cluster.harness import ContinuousProducer, TailingConsumer
from tests.conftest import BrokerProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.admin import KafkaAdminClient

PRODUCE, FETCH, CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS = 0, 1, 19, 20, 21
DESCRIBE_LOG_DIRS = 35


@pytest.fixture
def jbod(tmp_path) -> Iterator[Callable[..., BrokerProcess]]:
    """Starts a broker whose ``log.dirs`` are ``count`` directories (disk0, disk1, ...),
    with these settings."""
    started: list[BrokerProcess] = []

    def start(count: int, **settings: str) -> BrokerProcess:
        dirs = [str(tmp_path / f"disk{i}") for i in range(count)]
        broker = BrokerProcess(dirs[0], settings, log_path=str(tmp_path / "broker.log"),
                               extra_args=["--data-dir", ",".join(dirs)])
        broker.log_dirs = dirs  # type: ignore[attr-defined]
        started.append(broker)
        return broker.start()

    yield start
    for broker in started:
        if broker.alive():
            assert broker.stop() == 0, broker.log_text()[-3000:]


def create(client: WireClient, name: str, partitions: int, **configs: str) -> None:
    answer = client.request(CREATE_TOPICS, 7, {"topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": -1,
         "assignments": [], "configs": [{"name": k.replace("_", "."), "value": v}
                                        for k, v in configs.items()]}],
        "timeout_ms": 60000, "validate_only": False})
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


METADATA, LIST_OFFSETS = 3, 2


def metadata_errors(client: WireClient, topic: str) -> dict[int, int]:
    answer = client.request(METADATA, 12, {"topics": [{"name": topic}],
                                          "allow_auto_topic_creation": False})
    return {p["partition_index"]: p["error_code"] for p in answer["topics"][0]["partitions"]}


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"no {what} in {timeout:.0f} s"
        time.sleep(0.1)


def test_a_failed_dir_takes_only_its_partitions_offline(jbod):
    """The second directory is replaced by a file under a producer writing to every
    partition: the next roll there fails (ENOTDIR), the directory goes offline, its
    partitions answer KAFKA_STORAGE_ERROR to produce, fetch, ListOffsets, Metadata and
    DescribeLogDirs, and the partitions of the other directories go on being written
    and read, every acknowledged record there readable."""
    broker = jbod(3, metrics_listener="127.0.0.1:0")
    dirs = broker.log_dirs
    name = unique("failing")
    with WireClient(broker.bootstrap) as client:
        answer = client.request(CREATE_TOPICS, 7, {"topics": [
            {"name": name, "num_partitions": 6, "replication_factor": -1,
             "assignments": [], "configs": [{"name": "segment.bytes", "value": "2048"}]}],
            "timeout_ms": 60000, "validate_only": False})
        assert answer["topics"][0]["error_code"] == ErrorCode.NONE
    placed = placement(dirs, name)
    lost = sorted(p for p, d in placed.items() if d == dirs[1])
    kept = sorted(p for p, d in placed.items() if d != dirs[1])
    assert len(lost) == 2
    reader_partition = next(p for p in kept if placed[p] == dirs[2])
    producer = ContinuousProducer(broker.bootstrap, name, keys=60, pause_s=0.001,
                                  **{"enable.idempotence": False, "message.timeout.ms": 5000})
    consumer = TailingConsumer(broker.bootstrap, name, 6)
    producer.start()
    consumer.start()
    try:
        wait_for(lambda: {p for p, _, _ in producer.acked} == set(range(6)),
                 "acknowledgements from every partition")
        # the disk is gone (moved away at once, so the broker writes nothing more
        # there), a file in its place
        os.rename(dirs[1], dirs[1] + ".gone")
        with open(dirs[1], "w") as f:
            f.write("not a directory\n")
        with WireClient(broker.bootstrap) as client:
            wait_for(lambda: all(metadata_errors(client, name)[p] ==
                                 ErrorCode.KAFKA_STORAGE_ERROR for p in lost),
                     "offline partitions in Metadata")
            acked_then = len(producer.acked)
            # the other directories go on taking writes
            wait_for(lambda: {p for p, _, _ in producer.acked[acked_then:]} == set(kept),
                     "acknowledgements after the failure from every other partition")
            assert {p: e for p, e in metadata_errors(client, name).items() if p in kept} == \
                {p: ErrorCode.NONE for p in kept}
            for p in lost:
                assert produce(client, name, p, b"x") == ErrorCode.KAFKA_STORAGE_ERROR
                answer = client.request(FETCH, 12, fetch_body(name, p, 0))
                assert answer["responses"][0]["partitions"][0]["error_code"] == \
                    ErrorCode.KAFKA_STORAGE_ERROR
                answer = client.request(LIST_OFFSETS, 7, {"replica_id": -1, "topics": [
                    {"name": name, "partitions": [{"partition_index": p, "timestamp": -1}]}]})
                assert answer["topics"][0]["partitions"][0]["error_code"] == \
                    ErrorCode.KAFKA_STORAGE_ERROR
            results = client.request(DESCRIBE_LOG_DIRS, 4, {"topics": None})["results"]
            assert [(r["log_dir"], r["error_code"]) for r in results] == [
                (os.path.abspath(dirs[0]), 0),
                (os.path.abspath(dirs[1]), ErrorCode.KAFKA_STORAGE_ERROR),
                (os.path.abspath(dirs[2]), 0)]
            described = {p["partition_index"] for r in results for t in r["topics"]
                         if t["name"] == name for p in t["partitions"]}
            assert described == set(kept)
            offline = scrape(metrics_url(broker))[
                ("kafka_controller_kafkacontroller_offlinepartitionscount", ())]
            assert offline >= len(lost)  # (and the offsets topic's partitions there)
    finally:
        producer.stop(flush_timeout=60)
        consumer_seen = consumer.seen
        consumer.stop()
    assert not producer.fatal
    with WireClient(broker.bootstrap) as client:
        for p in kept:
            log_values = fetch_all_values(client, name, p)
            acked = [str(n).encode() for q, _, n in sorted(producer.acked) if q == p]
            assert set(acked) <= set(log_values), f"partition {p} lost acknowledged records"
    # the consumer of the third directory's partition read on through the failure
    read = [value for q, _, value in consumer_seen if q == reader_partition]
    acked = [str(n).encode() for q, _, n in sorted(producer.acked) if q == reader_partition]
    assert read[:len(acked)] == acked[:len(read)] and len(read) > 0
    assert "log directory" in broker.log_text() and "failed" in broker.log_text()

    def acked_values(partition: int) -> list[bytes]:
        return [str(n).encode() for q, _, n in sorted(producer.acked) if q == partition]

    # a restart with the directory still a file: offline from the start, the rest served
    broker.restart()
    with WireClient(broker.bootstrap) as client:
        errors = metadata_errors(client, name)
        assert {p: errors[p] for p in range(6)} == {
            p: ErrorCode.KAFKA_STORAGE_ERROR if p in lost else ErrorCode.NONE
            for p in range(6)}
        for p in kept:
            assert set(acked_values(p)) <= set(fetch_all_values(client, name, p))
    assert not [n for d in (dirs[0], dirs[2]) for n in os.listdir(d)
                if n.rpartition("-")[0] == name and int(n.rpartition("-")[2]) in lost]
    # the disk back in place: the next start serves its partitions with their records
    os.unlink(dirs[1])
    os.rename(dirs[1] + ".gone", dirs[1])
    broker.restart()
    with WireClient(broker.bootstrap) as client:
        assert set(metadata_errors(client, name).values()) == {ErrorCode.NONE}
        for p in range(6):
            assert set(acked_values(p)) <= set(fetch_all_values(client, name, p))


def fetch_all_values(client: WireClient, topic: str, partition: int) -> list[bytes]:
    values: list[bytes] = []
    while True:
        answer = client.request(FETCH, 12, fetch_body(topic, partition, len(values)))
        data = answer["responses"][0]["partitions"][0]
        assert data["error_code"] == ErrorCode.NONE
        batch = [record.value for record in decode_all(data["records"])]
        if not batch:
            return values
        values.extend(batch)


ALTER_REPLICA_LOG_DIRS = 34


def alter_dirs(client: WireClient, version: int, moves: dict[str, dict[str, list[int]]]
               ) -> dict[tuple[str, int], int]:
    """AlterReplicaLogDirs: {path: {topic: [partitions]}} -> {(topic, partition): error}."""
    answer = client.request(ALTER_REPLICA_LOG_DIRS, version, {"dirs": [
        {"path": path, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
        for path, topics in moves.items()]})
    return {(r["topic_name"], p["partition_index"]): p["error_code"]
            for r in answer["results"] for p in r["partitions"]}


def test_replicas_move_between_dirs_under_a_running_producer(jbod):
    """AlterReplicaLogDirs (kafka-python's admin) moves both partitions of a topic to the
    other directory while an idempotent acks=all producer writes to them: the moves end
    (no future log left), the producer saw no error, every acknowledged record is at its
    offset in the moved logs, and a restart finds them in their new directories."""
    broker = jbod(2)
    dirs = broker.log_dirs
    name = unique("moving")
    with WireClient(broker.bootstrap) as client:
        create(client, name, 2, segment_bytes="65536")  # a move copies many segments
    placed = placement(dirs, name)
    assert sorted(placed.values()) == sorted(dirs)
    producer = ContinuousProducer(broker.bootstrap, name, keys=40, pause_s=0.0005)
    producer.start()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        wait_for(lambda: len(producer.acked) >= 20_000, "20,000 records acknowledged")
        targets = {p: next(d for d in dirs if d != placed[p]) for p in placed}
        answer = admin.alter_replica_log_dirs({
            (name, p, 0): os.path.abspath(d) for p, d in targets.items()})
        assert {replica.partition: error.errno for replica, error in answer.items()} == \
            {0: 0, 1: 0}

        def moved() -> bool:
            (described,) = admin.describe_log_dirs(topic_partitions=[name])
            where = {(entry["log_dir"], p["partition_index"], p["is_future_key"])
                     for entry in described["log_dirs"] for t in entry["topics"]
                     for p in t["partitions"]}
            return where == {(os.path.abspath(d), p, False) for p, d in targets.items()}
        wait_for(moved, "both replicas in their new directories", timeout=120)
        mark = len(producer.acked)
        wait_for(lambda: len(producer.acked) >= mark + 500, "records acknowledged after")
    finally:
        admin.close()
        producer.stop()
    assert not producer.failed and not producer.fatal, (producer.failed[:5], producer.fatal)
    assert placement(dirs, name) == targets
    leftovers = [n for d in dirs for n in os.listdir(d) if n.endswith(("-future", "-delete"))]
    assert not leftovers
    broker.restart()
    assert placement(dirs, name) == targets
    with WireClient(broker.bootstrap) as client:
        for p in (0, 1):
            values = fetch_all_values(client, name, p)
            acked = sorted((o, n) for q, o, n in producer.acked if q == p)
            assert all(values[o] == str(n).encode() for o, n in acked), f"partition {p}"


def test_alter_replica_log_dirs_errors(jbod):
    broker = jbod(2)
    dirs = broker.log_dirs
    name = unique("moves")
    with WireClient(broker.bootstrap) as client:
        create(client, name, 1)
        here = placement(dirs, name)[0]
        for version in (1, 2):
            assert alter_dirs(client, version, {
                os.path.abspath(here): {name: [0], "no-such-topic": [0]},
            }) == {(name, 0): ErrorCode.NONE,  # already there: nothing to do
                   ("no-such-topic", 0): ErrorCode.REPLICA_NOT_AVAILABLE}
        answer = client.request(ALTER_REPLICA_LOG_DIRS, 2, {"dirs": [
            {"path": "/no/such/dir", "topics": [{"name": name, "partitions": [0, 5]}]}]})
        assert [(p["partition_index"], p["error_code"]) for p in
                answer["results"][0]["partitions"]] == [(0, ErrorCode.LOG_DIR_NOT_FOUND),
                                                         (5, ErrorCode.LOG_DIR_NOT_FOUND)]
    assert placement(dirs, name) == {0: here}


def test_a_topic_deleted_while_its_dir_is_offline_stays_deleted(jbod):
    """Its partition on the failed disk cannot be deleted then: when the disk is back,
    the next start deletes it instead of adopting it as a topic of its own."""
    broker = jbod(2)
    dirs = broker.log_dirs
    name = unique("doomed")
    with WireClient(broker.bootstrap) as client:
        create(client, name, 2, segment_bytes="1024")
        lost = next(p for p, d in placement(dirs, name).items() if d == dirs[1])
        assert produce(client, name, lost, b"x" * 600) == ErrorCode.NONE
        os.rename(dirs[1], dirs[1] + ".gone")
        with open(dirs[1], "w") as f:
            f.write("not a directory\n")
        wait_for(lambda: produce(client, name, lost, b"x" * 600) ==
                 ErrorCode.KAFKA_STORAGE_ERROR, "the directory offline")
        answer = client.request(DELETE_TOPICS, 6, {"topics": [{"name": name}],
                                                   "timeout_ms": 30000})
        assert answer["responses"][0]["error_code"] == ErrorCode.NONE
    broker.restart()  # still offline
    with WireClient(broker.bootstrap) as client:  # topics.json is written again
        create(client, unique("other"), 1)
    os.unlink(dirs[1])
    os.rename(dirs[1] + ".gone", dirs[1])
    broker.restart()
    with WireClient(broker.bootstrap) as client:
        answer = client.request(METADATA, 12, {"topics": [{"name": name}],
                                               "allow_auto_topic_creation": False})
        assert answer["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    wait_for(lambda: not placement(dirs, name), "the old partition directory removed")


def test_a_replica_whose_log_starts_inside_a_batch_moves(jbod):
    """DeleteRecords moved the log start inside a batch: the copy starts at that batch,
    and the moved log starts where the old one did."""
    broker = jbod(2)
    dirs = broker.log_dirs
    name = unique("trimmed")
    with WireClient(broker.bootstrap) as client:
        create(client, name, 1)
        for i in range(4):  # batches of three records: offsets 0-2, 3-5, ...
            answer = client.request(PRODUCE, 9, produce_body(
                name, 0, encode_batch([b"%d-%d" % (i, j) for j in range(3)])))
            assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
        answer = client.request(DELETE_RECORDS, 2, {"topics": [
            {"name": name, "partitions": [{"partition_index": 0, "offset": 4}]}],
            "timeout_ms": 30000})
        assert answer["topics"][0]["partitions"][0]["low_watermark"] == 4
        target = next(d for d in dirs if d != placement(dirs, name)[0])
        assert alter_dirs(client, 2, {os.path.abspath(target): {name: [0]}}) == {
            (name, 0): ErrorCode.NONE}
        wait_for(lambda: placement(dirs, name) == {0: target}, "the replica moved")
        wait_for(lambda: not [n for n in os.listdir(target) if n.endswith("-future")],
                 "the future log gone")
        answer = client.request(LIST_OFFSETS, 7, {"replica_id": -1, "topics": [
            {"name": name, "partitions": [{"partition_index": 0, "timestamp": -2}]}]})
        assert answer["topics"][0]["partitions"][0]["offset"] == 4
        data = client.request(FETCH, 12, fetch_body(name, 0, 4))["responses"][0][
            "partitions"][0]
        # (the batch holding offset 4 comes whole, as from Kafka: the client skips 3)
        assert [r.value for r in decode_all(data["records"])] == [
            b"%d-%d" % (i, j) for i in (1, 2, 3) for j in range(3)]


def test_losing_the_first_dir_stops_the_broker_with_exit_code_1(jbod):
    """The first directory holds the broker's own files (topics.json, ...): when it fails
    the broker stops (exit code 1, as Kafka halts when it has no directory left), closing
    the others cleanly; with the disk back it starts with every record."""
    broker = jbod(2)
    dirs = broker.log_dirs
    name = unique("first")
    with WireClient(broker.bootstrap) as client:
        create(client, name, 2, segment_bytes="1024")
        placed = placement(dirs, name)
        first = next(p for p, d in placed.items() if d == dirs[0])
        other = next(p for p, d in placed.items() if d == dirs[1])
        assert produce(client, name, other, b"kept") == ErrorCode.NONE
        assert produce(client, name, first, b"x" * 600) == ErrorCode.NONE
        os.rename(dirs[0], dirs[0] + ".gone")
        with open(dirs[0], "w") as f:
            f.write("not a directory\n")
        wait_for(lambda: produce(client, name, first, b"x" * 600) != ErrorCode.NONE,
                 "the first directory failing")
    wait_for(lambda: not broker.alive(), "the broker stopped")
    assert broker.stop() == 1
    assert "holds the broker's own files: stopping the broker" in broker.log_text()
    assert os.path.exists(os.path.join(dirs[1], ".kafka_cleanshutdown"))
    os.unlink(dirs[0])
    os.rename(dirs[0] + ".gone", dirs[0])
    broker.start()
    with WireClient(broker.bootstrap) as client:
        assert fetch_values(client, name, other) == [b"kept"]
        assert fetch_values(client, name, first)[0] == b"x" * 600

"""The replica fetcher against real leaders: a single-node broker process (leader of every
partition at epoch 0), produced to with confluent-kafka; the follower is a Partition over
a Log in tmp_path, fetching on a uvloop loop in the test process. A follower must end
byte-identical to the leader's segment.

Partial batches need a leader that cuts a response inside a batch, which pybroker's never
does (its reads stop at batch boundaries) and Kafka's does (``FileRecords.slice`` at the
byte limit): ``KafkaCutLeader`` serves a partition from a byte string with Kafka's limits.
"""

from __future__ import annotations

import asyncio
import glob
import os
import signal
import struct
from collections.abc import Callable, Iterator, Mapping
from types import SimpleNamespace
from typing import Any

import pytest
import uvloop

from pybroker._native.records import encode_batch, find_position, read_batch_header
from pybroker.broker.partition import Partition
from pybroker.config import BrokerConfig
from pybroker.errors import ErrorCode
from pybroker.log.log import Log
from pybroker.net.protocol import codec
from pybroker.repl.fetcher import ReplicaFetcherManager, truncation_offset, whole_batches_end
from pybroker.repl.throttle import FOLLOWER_REPLICAS, UNTHROTTLED, ReplicationQuotas
from tests.admin.clients import create_topic, produce, unique
from tests.broker.wire_client import WireClient

FOLLOWER_ID = 2
DEADLINE_S = 30.0
CONFIG = {"replica.fetch.wait.max.ms": 100, "replica.fetch.min.bytes": 1,
          "replica.fetch.response.max.bytes": 10 << 20, "replica.fetch.max.bytes": 1 << 20,
          "replica.fetch.backoff.ms": 50}


def run(coro: Any) -> Any:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def manager(overrides: Mapping[str, Mapping[str, str]] | None = None,
            **config: int) -> ReplicaFetcherManager:
    """Fetchers of broker FOLLOWER_ID; ``overrides``: topic configs by topic name (the
    follower throttle reads them), ``config``: replica_fetch_max_bytes=... settings."""
    settings = {**CONFIG, **{k.replace("_", "."): v for k, v in config.items()}}
    quotas = ReplicationQuotas(BrokerConfig({"broker.id": FOLLOWER_ID, **settings}),
                               lambda topic: (overrides or {}).get(topic, {}))
    return ReplicaFetcherManager(
        SimpleNamespace(broker_id=FOLLOWER_ID, replication_quotas=quotas), settings)


def leader_at(port: int, broker_id: int = 0) -> SimpleNamespace:
    return SimpleNamespace(broker_id=broker_id, host="127.0.0.1", port=port)


@pytest.fixture
def follower(tmp_path: Any) -> Iterator[Callable[..., Partition]]:
    """``follower(topic, epoch=0)``: partition 0 of ``topic`` following broker 0, over a
    Log in tmp_path (closed after the test)."""
    logs: list[Log] = []

    def make(topic: str, epoch: int = 0) -> Partition:
        plog = Log(str(tmp_path / f"{topic}-0"))
        logs.append(plog)
        partition = Partition(topic, 0, plog, broker_id=FOLLOWER_ID, is_leader=False)
        partition.become_follower(0, epoch, [0, FOLLOWER_ID], [0, FOLLOWER_ID], 0)
        return partition

    yield make
    for plog in logs:
        plog.close()


def segment_bytes(directory: str) -> bytes:
    return b"".join(open(path, "rb").read()
                    for path in sorted(glob.glob(os.path.join(directory, "*.log"))))


def leader_bytes(broker: Any, topic: str) -> bytes:
    return segment_bytes(os.path.join(broker.data_dir, f"{topic}-0"))


def assert_same_batches(partition: Partition, leader: bytes) -> None:
    """The follower's log is the leader's, byte for byte, from the follower's first batch."""
    mine = segment_bytes(partition.log.directory)
    assert mine, "the follower has nothing"
    found = find_position(leader, 0, len(leader), read_batch_header(mine, 0).base_offset)
    assert found is not None
    assert mine == leader[found[0]:]


async def until(condition: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"not within {DEADLINE_S} s: {what}")
        await asyncio.sleep(0.01)


def values(count: int, tag: str = "m") -> list[bytes]:
    return [f"{tag}-{i:06d}-".encode() * 8 for i in range(count)]


def leader_topic(broker: Any, prefix: str, count: int, **producer: Any) -> str:
    """A new topic on the leader with ``count`` records produced by confluent-kafka."""
    topic = unique(prefix)
    create_topic(broker.bootstrap, topic)
    produce(broker.bootstrap, topic, values(count), **producer)
    return topic


async def follow(fetchers: ReplicaFetcherManager, port: int, partition: Partition, end: int,
                 leader_id: int = 0) -> None:
    await fetchers.add(leader_at(port, leader_id), [partition])
    await until(lambda: partition.log.log_end_offset == end, f"caught up to {end}")


# a single-node pybroker leader -----------------------------------------------------------

@pytest.fixture
def broker(module_broker: Any) -> Any:
    """One leader for the module's tests: each has topics of its own, and the one that
    restarts it leaves it serving on the same port and data."""
    return module_broker


def test_follower_copies_the_leader_byte_for_byte(broker, follower):
    topic = leader_topic(broker, "repl", 3000,
                         **{"compression.type": "lz4", "enable.idempotence": True})
    partition = follower(topic)
    fetchers = manager(replica_fetch_max_bytes=64 * 1024)

    async def scenario() -> None:
        await follow(fetchers, broker.port, partition, 3000)
        assert_same_batches(partition, leader_bytes(broker, topic))
        # live: more records while it fetches, from another client
        await asyncio.to_thread(produce, broker.bootstrap, topic, values(500, "live"))
        await until(lambda: partition.log.log_end_offset == 3500, "caught up again")
        await until(lambda: partition.high_watermark == 3500, "high watermark followed")
        assert fetchers.lag(partition) == 0
        [stats] = fetchers.stats()
        assert stats["fetches"] > 1 and stats["errors"] == 0 and stats["connects"] == 1
        assert stats["bytes"] == partition.log.size()
        await fetchers.close()

    run(scenario())
    assert_same_batches(partition, leader_bytes(broker, topic))
    # the idempotent producer's state followed the log (a new leader would know it)
    assert len(partition.producers.producers) == 1


def test_follower_throttle_holds_back_a_lagging_throttled_replica(broker, follower):
    """KIP-73's follower side: over follower.replication.throttled.rate, a replica that
    its topic's follower.replication.throttled.replicas lists with this broker is left
    out of the fetch, and only its bytes count; another is fetched as usual; with the
    rate removed it catches up; in sync, a throttle does not hold it back."""
    small_batches = {"batch.size": 4096}
    throttled_topic = leader_topic(broker, "repl-thr", 3000, **small_batches)
    free_topic = leader_topic(broker, "repl-free", 3000, **small_batches)
    throttled, free = follower(throttled_topic), follower(free_topic)
    # samples of a minute: the first fetch keeps a rate of 1 byte/s exceeded for ten
    # minutes, far longer than the test
    fetchers = manager({throttled_topic: {FOLLOWER_REPLICAS: f"0:{FOLLOWER_ID}"}},
                       replica_fetch_max_bytes=16 * 1024,
                       replication_quota_window_size_seconds=60)
    quota = fetchers.broker.replication_quotas.follower
    quota.set_rate(1)

    async def scenario() -> None:
        await fetchers.add(leader_at(broker.port), [throttled, free])
        await until(lambda: free.log.log_end_offset == 3000, "the other replica caught up")
        assert 0 < throttled.log.log_end_offset < 3000
        assert quota.exceeded()
        assert quota.rate() == pytest.approx(throttled.log.size() / 600, rel=0.05)

        quota.set_rate(UNTHROTTLED)
        await until(lambda: throttled.log.log_end_offset == 3000, "caught up, unthrottled")
        quota.set_rate(1)
        await asyncio.to_thread(produce, broker.bootstrap, throttled_topic,
                                values(50, "live"))
        await until(lambda: throttled.log.log_end_offset == 3050, "in sync: followed")
        await fetchers.close()

    run(scenario())
    assert_same_batches(throttled, leader_bytes(broker, throttled_topic))


def test_divergent_tail_of_an_epoch_the_leader_lacks_goes(broker, follower):
    """The follower has a batch of epoch 3, unknown to the leader (epoch 0 only): the
    leader answers UNDEFINED for it, and the follower truncates to its high watermark,
    then fetches the leader's own records from there."""
    topic = leader_topic(broker, "repl-div", 20)
    leader = leader_bytes(broker, topic)
    partition = follower(topic)
    plog = partition.log
    plog.append_as_follower(leader)  # what it had replicated ...
    plog.append_as_follower(encode_batch([b"deposed"] * 5, base_offset=20,
                                         partition_leader_epoch=3))  # ... and wrote as leader
    plog.high_watermark = 20
    produce(broker.bootstrap, topic, values(7, "after"))
    fetchers = manager()

    async def scenario() -> None:
        await fetchers.add(leader_at(broker.port), [partition])
        await until(lambda: plog.log_end_offset == 27 and plog.leader_epoch_cache.latest_epoch
                    == 0, "truncated and caught up")
        await fetchers.close()

    run(scenario())
    assert plog.leader_epoch_cache.entries() == [(0, 0)]
    assert_same_batches(partition, leader_bytes(broker, topic))


def test_tail_past_the_leaders_end_of_the_same_epoch_goes(broker, follower):
    """The follower's epoch-0 log runs past the leader's end: it truncates to that end
    (the leader's answer for epoch 0), not to its high watermark (0 here)."""
    topic = leader_topic(broker, "repl-long", 10)
    leader = leader_bytes(broker, topic)
    partition = follower(topic)
    plog = partition.log
    plog.append_as_follower(leader)
    plog.append_as_follower(encode_batch([b"lost"] * 4, base_offset=10,
                                         partition_leader_epoch=0))
    fetchers = manager()

    async def scenario() -> None:
        await fetchers.add(leader_at(broker.port), [partition])
        await until(lambda: fetchers.lag(partition) == 0, "fetched")
        await fetchers.close()

    run(scenario())
    assert plog.log_end_offset == 10
    assert segment_bytes(plog.directory) == leader


def test_log_start_past_the_follower_restarts_its_log(broker, follower):
    """OFFSET_OUT_OF_RANGE below the leader's log start (DeleteRecords): the follower
    restarts there; the leader's start lies inside a batch, which the empty log takes."""
    topic = leader_topic(broker, "repl-start", 50, **{"linger.ms": 50})
    with WireClient(broker.bootstrap) as client:
        answer = client.request(21, 2, {"topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "offset": 33}]}], "timeout_ms": 10000})
    assert answer["topics"][0]["partitions"][0]["error_code"] == 0
    partition = follower(topic)
    fetchers = manager()

    async def scenario() -> None:
        await follow(fetchers, broker.port, partition, 50)
        await fetchers.close()

    run(scenario())
    assert partition.log.log_start_offset == 33
    assert_same_batches(partition, leader_bytes(broker, topic))


def test_leader_restart_reconnects(broker, follower):
    topic = leader_topic(broker, "repl-restart", 100)
    partition = follower(topic)
    fetchers = manager()

    async def scenario() -> None:
        await follow(fetchers, broker.port, partition, 100)
        await asyncio.to_thread(broker.restart, signal.SIGKILL)
        await asyncio.to_thread(produce, broker.bootstrap, topic, values(100, "again"))
        await until(lambda: partition.log.log_end_offset == 200, "caught up after restart")
        [stats] = fetchers.stats()
        assert stats["connects"] >= 2 and stats["errors"] >= 1
        await fetchers.close()

    run(scenario())
    assert_same_batches(partition, leader_bytes(broker, topic))


def test_fenced_until_the_controller_says_otherwise_and_one_leader_down(broker, follower):
    """A follower in epoch 1 of a leader at epoch 0 is answered UNKNOWN_LEADER_EPOCH and
    retries without fetching; a dead leader's fetcher fails on its own; once the
    partition follows in the leader's epoch it replicates. Removing it stops the appends
    and the fetcher."""
    topic = leader_topic(broker, "repl-epoch", 30)
    partition = follower(topic, epoch=1)
    orphan = follower(unique("repl-orphan"))
    fetchers = manager()

    async def scenario() -> None:
        await fetchers.add(leader_at(broker.port), [partition])
        await fetchers.add(leader_at(_closed_port(), broker_id=9), [orphan])
        await until(lambda: errors(fetchers, 0) >= 3, "fenced answers")
        await until(lambda: errors(fetchers, 9) >= 2, "the dead leader's errors")
        assert partition.log.log_end_offset == 0
        partition.become_follower(0, 0, [0, FOLLOWER_ID], [0, FOLLOWER_ID], 1)
        await follow(fetchers, broker.port, partition, 30)
        await fetchers.remove([partition])
        assert [s["leader"] for s in fetchers.stats()] == [9]
        await asyncio.to_thread(produce, broker.bootstrap, topic, values(5, "late"))
        await asyncio.sleep(0.3)
        assert partition.log.log_end_offset == 30 and fetchers.lag(partition) is None
        await fetchers.close()

    run(scenario())


def test_a_partition_moves_between_leaders(broker, follower):
    """``add`` with another leader moves the partition: the first fetcher, left empty,
    stops. (Both leader ids name the same broker, which serves either.)"""
    topic = leader_topic(broker, "repl-move", 10)
    partition = follower(topic)
    fetchers = manager()

    async def scenario() -> None:
        await follow(fetchers, broker.port, partition, 10)
        await asyncio.to_thread(produce, broker.bootstrap, topic, values(10, "moved"))
        await follow(fetchers, broker.port, partition, 20, leader_id=5)
        assert [s["leader"] for s in fetchers.stats()] == [5]
        await fetchers.close()

    run(scenario())
    assert_same_batches(partition, leader_bytes(broker, topic))


def errors(fetchers: ReplicaFetcherManager, leader_id: int) -> int:
    return {s["leader"]: s["errors"] for s in fetchers.stats()}[leader_id]


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# partial batches: a leader that cuts as Kafka's does -------------------------------------


class KafkaCutLeader:
    """Serves one partition (epoch 0) from ``data``: OffsetForLeaderEpoch answers the log
    end; Fetch returns the bytes from the fetched batch's position, ``max(limit, first
    batch)`` of them (Kafka's ``LogSegment.read`` with minOneMessage), cut anywhere."""

    def __init__(self, topic: str, data: bytes) -> None:
        self.topic, self.data = topic, data
        self.end = read_batch_header(data, _last_batch(data)).last_offset + 1
        self.cuts = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                header = codec.read_request_header(frame)
                body = codec.decode_request(header.api_key, header.api_version, frame,
                                            header.header_size)
                answer = (self._epoch_end(body) if header.api_key == 23
                          else self._fetch(body))
                writer.write(codec.encode_response(header.api_key, header.api_version,
                                                   header.correlation_id, answer))
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def _epoch_end(self, body: dict) -> dict:
        parts = [{"error_code": 0, "partition": 0, "leader_epoch": 0, "end_offset": self.end}
                 for _ in body["topics"][0]["partitions"]]
        return {"throttle_time_ms": 0, "topics": [{"topic": self.topic, "partitions": parts}]}

    def _fetch(self, body: dict) -> dict:
        p = body["topics"][0]["partitions"][0]
        records = b""
        found = find_position(self.data, 0, len(self.data), p["fetch_offset"])
        if found is not None:
            position, first = found
            limit = min(p["partition_max_bytes"], body["max_bytes"])
            chunk = self.data[position:position + max(limit, first.size)]
            self.cuts += whole_batches_end(chunk) < len(chunk)
            records = chunk
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
            {"topic": self.topic, "partitions": [
                {"partition_index": 0, "error_code": 0, "high_watermark": self.end,
                 "last_stable_offset": self.end, "log_start_offset": 0,
                 "aborted_transactions": None, "preferred_read_replica": -1,
                 "records": records}]}]}


def _last_batch(data: bytes) -> int:
    position = 0
    while True:
        size = read_batch_header(data, position).size
        if position + size >= len(data):
            return position
        position += size


def test_partial_batches_at_the_byte_limit(follower):
    topic = unique("repl-cut")
    batches, offset = [], 0
    for i in range(40):
        count = 1 + (i * 7) % 13
        value_size = 5000 if i == 17 else 60  # batch 17 alone is above the limit
        batches.append(encode_batch([bytes([65 + i % 26]) * value_size] * count,
                                    base_offset=offset, partition_leader_epoch=0))
        offset += count
    data = b"".join(batches)
    leader = KafkaCutLeader(topic, data)
    partition = follower(topic)
    fetchers = manager(replica_fetch_max_bytes=1500)

    async def scenario() -> None:
        port = await leader.start()
        await follow(fetchers, port, partition, offset)
        await fetchers.close()
        assert leader.server is not None
        leader.server.close()

    run(scenario())
    assert leader.cuts >= 10
    assert segment_bytes(partition.log.directory) == data
    assert partition.high_watermark == offset


def test_stop_lands_while_answers_keep_arriving(follower):
    """A caught-up follower of a leader that answers at once (no long poll) has an answer
    arriving in nearly every loop iteration. Stopping its fetcher (the partition removed,
    as when this broker becomes the leader) must end the task every time: before Python
    3.12, ``asyncio.wait_for`` lost a cancellation that met its result, and ``remove``
    then waited forever for a fetcher that fetched on."""
    topic = unique("repl-stop")
    data = encode_batch([b"x"] * 5, base_offset=0, partition_leader_epoch=0)
    leader = KafkaCutLeader(topic, data)
    partition = follower(topic)
    fetchers = manager()

    async def scenario() -> None:
        port = await leader.start()
        await follow(fetchers, port, partition, 5)
        for round_ in range(100):
            await fetchers.add(leader_at(port), [partition])
            # stop after 1-3 answers, so that stops land at different points of a fetch
            wanted = fetchers.stats()[0]["fetches"] + 1 + round_ % 3
            await until(lambda w=wanted: fetchers.stats()[0]["fetches"] >= w,
                        "answers arriving")
            try:
                async with asyncio.timeout(DEADLINE_S):
                    await fetchers.remove([partition])
            except TimeoutError:
                raise AssertionError(f"round {round_}: the fetcher did not stop") from None
            assert fetchers.stats() == []
        await fetchers.close()
        assert leader.server is not None
        leader.server.close()

    run(scenario())
    assert segment_bytes(partition.log.directory) == data


def test_whole_batches_end_and_a_bad_whole_batch():
    a, b = encode_batch([b"a"] * 3), encode_batch([b"b"] * 2, base_offset=3)
    data = a + b
    assert whole_batches_end(data) == len(data)
    assert whole_batches_end(data[:-1]) == len(a)
    assert whole_batches_end(data[:len(a) + 10]) == len(a)
    assert whole_batches_end(data[:30]) == 0
    bad = bytearray(data)
    bad[-1] ^= 0xFF  # a whole batch whose CRC fails is not a cut: it is corrupt
    with pytest.raises(Exception) as raised:
        whole_batches_end(bad)
    assert getattr(raised.value, "code", None) == ErrorCode.CORRUPT_MESSAGE


def test_truncation_offset_follows_kafkas_rules(tmp_path):
    """A log with epochs 1 (offsets 0-2), 4 (3-4), 6 (5-9), high watermark 4."""
    plog = Log(str(tmp_path / "t-0"))
    offset = 0
    for epoch, count in ((1, 3), (4, 2), (6, 5)):
        plog.append_as_follower(encode_batch([b"v"] * count, base_offset=offset,
                                             partition_leader_epoch=epoch))
        offset += count
    plog.high_watermark = 4
    assert truncation_offset(plog, 6, 12) == (10, True)   # the leader has more of 6
    assert truncation_offset(plog, 6, 7) == (7, True)     # ours ran past the leader's
    assert truncation_offset(plog, 4, 5) == (5, True)     # epoch 6 never reached it
    assert truncation_offset(plog, 5, 8) == (5, False)    # we lack 5: back to 4's end,
    assert truncation_offset(plog, -1, 3) == (3, True)    # leader without epochs
    assert truncation_offset(plog, 3, -1) == (4, True)    # unknown: high watermark
    assert truncation_offset(plog, 0, 0) == (0, True)     # below our first epoch

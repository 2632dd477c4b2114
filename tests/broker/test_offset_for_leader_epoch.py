"""OffsetForLeaderEpoch (key 23): answers of a real single-node broker over a socket, and
the cluster-mode cases (fenced, follower, debugging replica) on real partitions in the
test process, through the registered handler."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from pybroker._native.records import encode_batch
from pybroker.broker.handlers import load_all
from pybroker.broker.partition import Partition
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode, UnknownTopicOrPartitionError
from pybroker.log.log import Log
from tests.admin.clients import unique
from tests.broker.wire_client import WireClient, produce_body

OFFSET_FOR_LEADER_EPOCH, PRODUCE, CREATE_TOPICS = 23, 0, 19


def request_body(topic: str, partitions: list[tuple[int, int, int]],
                 replica_id: int = -1) -> dict:
    """``partitions``: (index, current leader epoch, leader epoch asked)."""
    return {"replica_id": replica_id, "topics": [{"topic": topic, "partitions": [
        {"partition": index, "current_leader_epoch": current, "leader_epoch": epoch}
        for index, current, epoch in partitions]}]}


def answers(response: dict) -> list[tuple[int, int, int, int]]:
    """(partition, error code, epoch, end offset) of the first topic."""
    return [(p["partition"], p["error_code"], p["leader_epoch"], p["end_offset"])
            for p in response["topics"][0]["partitions"]]


@pytest.fixture(scope="module")
def client(module_broker):
    with WireClient(module_broker.bootstrap) as c:
        yield c


def create(client: WireClient, name: str, partitions: int) -> None:
    body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                        "assignments": [], "configs": []}],
            "timeout_ms": 10000, "validate_only": False}
    assert client.request(CREATE_TOPICS, 7, body)["topics"][0]["error_code"] == 0


@pytest.mark.parametrize("version", [3, 4])
def test_single_node_answers_the_end_of_epoch_zero(client, version):
    topic = unique("olfe")
    create(client, topic, 2)
    for values in ([b"a", b"b", b"c"], [b"d", b"e"]):
        response = client.request(PRODUCE, 9, produce_body(topic, 0, encode_batch(values)))
        assert response["responses"][0]["partition_responses"][0]["error_code"] == 0
    response = client.request(OFFSET_FOR_LEADER_EPOCH, version, request_body(
        topic, [(0, 0, 0), (0, -1, 0), (0, -1, 7), (1, 0, 0), (0, 1, 0), (5, -1, 0)]))
    assert answers(response) == [
        (0, 0, 0, 5),                                # the latest epoch ends at the log end
        (0, 0, 0, 5),                                # no current epoch named
        (0, 0, -1, -1),                              # an epoch the log does not know yet
        (1, 0, -1, -1),                              # an empty log knows no epoch
        (0, ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1),  # newer than the broker's epoch 0
        (5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
    ]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_old_versions(client, version):
    topic = unique("olfe-old")
    create(client, topic, 1)
    client.request(PRODUCE, 9, produce_body(topic, 0, encode_batch([b"x"] * 4)))
    response = client.request(OFFSET_FOR_LEADER_EPOCH, version,
                              request_body(topic, [(0, 3, 0)]))
    part = response["topics"][0]["partitions"][0]
    if version < 2:  # the current leader epoch is a v2 field: v0-v1 do not send it
        assert (part["error_code"], part["end_offset"]) == (0, 4)
    else:
        assert (part["error_code"], part["end_offset"]) == (ErrorCode.UNKNOWN_LEADER_EPOCH, -1)
    if version >= 1:  # v1 adds the epoch to the answer
        assert part["leader_epoch"] == (0 if version < 2 else -1)


def test_unknown_topic(client):
    response = client.request(OFFSET_FOR_LEADER_EPOCH, 4,
                              request_body(unique("missing"), [(0, -1, 0)], replica_id=1))
    assert answers(response) == [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]


# cluster-mode roles: real Partition and Log objects, the handler called as the broker does


class _Topics:
    def __init__(self, partition: Partition) -> None:
        self.partition_ = partition

    def partition(self, name: str, index: int) -> Partition:
        if name != self.partition_.topic or index != self.partition_.index:
            raise UnknownTopicOrPartitionError(f"{name}-{index}")
        return self.partition_


def _epoch_log(tmp_path) -> Log:
    """Epoch 1 holds offsets 0-2, epoch 4 offsets 3-4, epoch 6 offsets 5-9."""
    log = Log(str(tmp_path / "t-0"))
    offset = 0
    for epoch, count in ((1, 3), (4, 2), (6, 5)):
        log.append_as_follower(encode_batch([b"v"] * count, base_offset=offset,
                                            partition_leader_epoch=epoch))
        offset += count
    return log


def _ask(partition: Partition, version: int, parts: list[tuple[int, int, int]],
         replica_id: int = 2) -> list[tuple[int, int, int, int]]:
    handler = load_all()[OFFSET_FOR_LEADER_EPOCH].fn
    ctx = RequestContext(SimpleNamespace(topics=_Topics(partition), authorizer=None),
                         OFFSET_FOR_LEADER_EPOCH,
                         version, 1, "tests", "test")
    body = request_body(partition.topic, parts, replica_id)
    return answers(asyncio.run(handler(ctx, body)))


def test_leader_answers_by_epoch_and_fences_older_epochs(tmp_path):
    log = _epoch_log(tmp_path)
    try:
        partition = Partition("t", 0, log, broker_id=1)
        partition.become_leader(6, [1, 2], [1, 2], 0)
        assert _ask(partition, 3, [(0, 6, 1), (0, 6, 4), (0, 6, 5), (0, 6, 6), (0, 6, 0),
                                   (0, 5, 6), (0, 7, 6), (0, -1, 9)]) == [
            (0, 0, 1, 3),     # epoch 1 ended where epoch 4 started
            (0, 0, 4, 5),
            (0, 0, 4, 5),     # epoch 5 was never written: the largest epoch below it
            (0, 0, 6, 10),    # the latest epoch ends at the log end
            (0, 0, 0, 0),     # below the first epoch: it ends where the first one starts
            (0, ErrorCode.FENCED_LEADER_EPOCH, -1, -1),
            (0, ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1),
            (0, 0, -1, -1),   # above every epoch the log has
        ]
    finally:
        log.close()


def test_follower_refuses_except_the_debugging_replica(tmp_path):
    log = _epoch_log(tmp_path)
    try:
        partition = Partition("t", 0, log, broker_id=2, is_leader=False)
        partition.become_follower(1, 6, [1, 2], [1, 2], 0)
        refused = (0, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1)
        assert _ask(partition, 4, [(0, 6, 4)]) == [refused]
        assert _ask(partition, 2, [(0, 6, 4)], replica_id=-2) == [refused]  # no replica id
        assert _ask(partition, 4, [(0, 6, 4), (0, 5, 4)], replica_id=-2) == [
            (0, 0, 4, 5), (0, ErrorCode.FENCED_LEADER_EPOCH, -1, -1)]
        assert _ask(partition, 4, [(1, -1, 4)]) == [
            (1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]
        partition.log = None  # a placeholder: a partition of the topic with no replica here
        assert _ask(partition, 4, [(0, -1, 4)], replica_id=-2) == [refused]
    finally:
        log.close()

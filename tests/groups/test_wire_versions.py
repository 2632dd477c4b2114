"""The group APIs on the wire, at every version served, against a real broker process.

A raw protocol connection (pybroker.client.connection) plays a consumer step by step, so
the fencing answers can be checked exactly: a commit or heartbeat from a stale generation
gets ILLEGAL_GENERATION, an unknown member UNKNOWN_MEMBER_ID.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import pytest

from pybroker.coordinator.consumer_protocol import encode_assignment, encode_subscription
from pybroker.errors import ErrorCode
from tests.groups.helpers import WireConnection, create_topic, wait_until

FIND_COORDINATOR, JOIN, HEARTBEAT, LEAVE, SYNC = 10, 11, 12, 13, 14
COMMIT, FETCH, DESCRIBE, LIST, DELETE, OFFSET_DELETE = 8, 9, 15, 16, 42, 47
TOPIC = "wire"
_names = (f"g-wire-{i}" for i in itertools.count())


@pytest.fixture(scope="module")
def conn(module_broker: Any) -> Iterator[WireConnection]:
    create_topic(module_broker.bootstrap, TOPIC, 2)
    host, port = module_broker.bootstrap.split(":")
    with WireConnection(host, int(port), client_id="wire-test") as c:
        yield c


def join(conn: WireConnection, group: str, version: int = 7, member_id: str = "",
         instance: str | None = None, rebalance_ms: int = 10000) -> dict:
    body = {"group_id": group, "session_timeout_ms": 10000, "rebalance_timeout_ms": rebalance_ms,
            "member_id": member_id, "group_instance_id": instance,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": encode_subscription([TOPIC])}]}
    response = conn.request(JOIN, version, body)
    if response["error_code"] == ErrorCode.MEMBER_ID_REQUIRED:
        body["member_id"] = response["member_id"]
        response = conn.request(JOIN, version, body)
    assert response["error_code"] == ErrorCode.NONE, response
    return response


def sync(conn: WireConnection, group: str, joined: dict, version: int = 5) -> dict:
    assignment = encode_assignment({TOPIC: [0, 1]})
    return conn.request(SYNC, version, {
        "group_id": group, "generation_id": joined["generation_id"],
        "member_id": joined["member_id"], "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [{"member_id": joined["member_id"], "assignment": assignment}]})


def commit(conn: WireConnection, group: str, generation: int, member_id: str,
           offset: int = 1, version: int = 8) -> int:
    response = conn.request(COMMIT, version, {
        "group_id": group, "generation_id_or_member_epoch": generation,
        "member_id": member_id, "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": offset,
             "committed_metadata": "m"}]}]})
    return response["topics"][0]["partitions"][0]["error_code"]


def test_stale_generation_commit_and_heartbeat_are_fenced(conn: WireConnection) -> None:
    group = next(_names)
    first = join(conn, group)
    assert sync(conn, group, first)["error_code"] == ErrorCode.NONE
    # the leader rejoining starts a new generation; the old one is now stale
    second = join(conn, group, member_id=first["member_id"])
    assert second["generation_id"] == first["generation_id"] + 1
    assert sync(conn, group, second)["error_code"] == ErrorCode.NONE
    member = second["member_id"]
    for version in range(1, 10):
        assert commit(conn, group, first["generation_id"], member, version=version) \
            == ErrorCode.ILLEGAL_GENERATION, version
    assert commit(conn, group, second["generation_id"], "someone-else") \
        == ErrorCode.UNKNOWN_MEMBER_ID
    heartbeat = {"group_id": group, "generation_id": first["generation_id"],
                 "member_id": member}
    assert conn.request(HEARTBEAT, 4, heartbeat)["error_code"] == ErrorCode.ILLEGAL_GENERATION
    heartbeat["generation_id"] = second["generation_id"]
    assert conn.request(HEARTBEAT, 4, heartbeat)["error_code"] == ErrorCode.NONE
    assert commit(conn, group, second["generation_id"], member, offset=7) == ErrorCode.NONE
    fetched = conn.request(FETCH, 8, {"groups": [{"group_id": group, "topics": None}]})
    partitions = fetched["groups"][0]["topics"][0]["partitions"]
    assert [(p["partition_index"], p["committed_offset"], p["metadata"]) for p in partitions] \
        == [(0, 7, "m")]


def test_member_not_rejoining_is_dropped_after_its_rebalance_timeout(
        conn: WireConnection, module_broker: Any) -> None:
    """max.poll.interval.ms: a member whose heartbeats go on but whose application stopped
    polling never rejoins; the rebalance completes without it after the rebalance timeout
    (the largest of the members', as Kafka's)."""
    group = next(_names)
    stuck = join(conn, group, rebalance_ms=1000)
    assert sync(conn, group, stuck)["error_code"] == ErrorCode.NONE
    host, port = module_broker.bootstrap.split(":")
    with WireConnection(host, int(port)) as other:
        joined = join(other, group, rebalance_ms=1000)  # parks until the rebalance timeout
        assert [m["member_id"] for m in joined["members"]] == [joined["member_id"]]
        assert joined["generation_id"] == stuck["generation_id"] + 1
    assert conn.request(HEARTBEAT, 4, {
        "group_id": group, "generation_id": stuck["generation_id"],
        "member_id": stuck["member_id"]})["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    assert "members did not rejoin in time" in module_broker.log_text()


@pytest.mark.parametrize("version", range(0, 10))
def test_join_sync_heartbeat_leave_every_version(conn: WireConnection, version: int) -> None:
    group = next(_names)
    joined = join(conn, group, version=version)
    assert joined["leader"] == joined["member_id"]
    assert [m["member_id"] for m in joined["members"]] == [joined["member_id"]]
    synced = sync(conn, group, joined, version=min(version, 5))
    assert synced["error_code"] == ErrorCode.NONE
    assert synced["assignment"] == encode_assignment({TOPIC: [0, 1]})
    assert conn.request(HEARTBEAT, min(version, 4), {
        "group_id": group, "generation_id": joined["generation_id"],
        "member_id": joined["member_id"]})["error_code"] == ErrorCode.NONE
    leave_version = min(version, 5)
    if leave_version < 3:
        leave = {"group_id": group, "member_id": joined["member_id"]}
    else:
        leave = {"group_id": group, "members": [{"member_id": joined["member_id"]}]}
    left = conn.request(LEAVE, leave_version, leave)
    assert left["error_code"] == ErrorCode.NONE
    described = conn.request(DESCRIBE, min(version, 5), {"groups": [group]})["groups"][0]
    assert described["group_state"] == "Empty"


@pytest.mark.parametrize("version", range(0, 10))
def test_offset_commit_and_fetch_every_version(conn: WireConnection, version: int) -> None:
    group = next(_names)
    assert commit(conn, group, -1, "", offset=40 + version, version=version) == ErrorCode.NONE
    if version >= 8:
        body: dict = {"groups": [{"group_id": group, "topics": [
            {"name": TOPIC, "partition_indexes": [0, 1]}]}]}
        topics = conn.request(FETCH, version, body)["groups"][0]["topics"]
    else:
        body = {"group_id": group, "topics": [{"name": TOPIC, "partition_indexes": [0, 1]}]}
        topics = conn.request(FETCH, version, body)["topics"]
    offsets = {p["partition_index"]: p["committed_offset"] for p in topics[0]["partitions"]}
    assert offsets == {0: 40 + version, 1: -1}


def test_find_coordinator_list_delete_and_offset_delete(conn: WireConnection) -> None:
    for version in range(0, 4):
        found = conn.request(FIND_COORDINATOR, version, {"key": "g", "key_type": 0})
        assert (found["error_code"], found["port"]) == (0, conn.port)
    for version in range(4, 7):
        found = conn.request(FIND_COORDINATOR, version,
                             {"key_type": 0, "coordinator_keys": ["a", "b"]})
        assert [(c["key"], c["port"]) for c in found["coordinators"]] == \
            [("a", conn.port), ("b", conn.port)]

    group = next(_names)
    assert commit(conn, group, -1, "") == ErrorCode.NONE
    for version in range(0, 6):
        listed = conn.request(LIST, version, {"states_filter": ["Empty"] if version >= 4
                                              else []})
        assert group in [g["group_id"] for g in listed["groups"]], version
    stable = conn.request(LIST, 4, {"states_filter": ["Stable"]})["groups"]
    assert group not in [g["group_id"] for g in stable]

    deleted = conn.request(OFFSET_DELETE, 0, {"group_id": group, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0}]}]})
    assert deleted["error_code"] == ErrorCode.NONE
    assert deleted["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
    for version in range(0, 3):
        name = next(_names)
        assert commit(conn, name, -1, "") == ErrorCode.NONE
        results = conn.request(DELETE, version, {"groups_names": [name, "missing"]})["results"]
        assert [(r["group_id"], r["error_code"]) for r in results] == \
            [(name, ErrorCode.NONE), ("missing", ErrorCode.GROUP_ID_NOT_FOUND)]


def test_parked_join_is_answered_when_the_broker_stops(broker_factory: Any) -> None:
    broker = broker_factory()
    create_topic(broker.bootstrap, TOPIC, 2)
    host, port = broker.bootstrap.split(":")
    with WireConnection(host, int(port)) as first, WireConnection(host, int(port)) as late:
        group = next(_names)
        joined = join(first, group)
        assert sync(first, group, joined)["error_code"] == ErrorCode.NONE
        # a second member's join waits for the first to rejoin: it stays parked
        late.send(JOIN, 4, {"group_id": group, "session_timeout_ms": 10000,
                            "rebalance_timeout_ms": 60000, "member_id": "",
                            "protocol_type": "consumer", "protocols": [
                                {"name": "range", "metadata": encode_subscription([TOPIC])}]})
        wait = late.receive()[1]  # MEMBER_ID_REQUIRED comes back at once
        late.send(JOIN, 4, {"group_id": group, "session_timeout_ms": 10000,
                            "rebalance_timeout_ms": 60000, "member_id": wait["member_id"],
                            "protocol_type": "consumer", "protocols": [
                                {"name": "range", "metadata": encode_subscription([TOPIC])}]})

        def preparing() -> bool:
            described = first.request(DESCRIBE, 5, {"groups": [group]})["groups"][0]
            return described["group_state"] == "PreparingRebalance"
        wait_until(preparing, what="the rebalance to start")
        assert broker.stop() == 0
        assert late.receive()[1]["error_code"] == ErrorCode.NOT_COORDINATOR


def test_offset_fetch_of_several_groups_in_one_request(conn: WireConnection) -> None:
    first, second = next(_names), next(_names)
    assert commit(conn, first, -1, "", offset=11) == ErrorCode.NONE
    assert commit(conn, second, -1, "", offset=22) == ErrorCode.NONE
    for version in (8, 9):
        groups = conn.request(FETCH, version, {"groups": [
            {"group_id": first, "topics": None},
            {"group_id": second, "topics": [{"name": TOPIC, "partition_indexes": [0]}]},
            {"group_id": "never-seen", "topics": None}]})["groups"]
        assert [(g["group_id"], g["error_code"],
                 [p["committed_offset"] for t in g["topics"] for p in t["partitions"]])
                for g in groups] == [(first, 0, [11]), (second, 0, [22]), ("never-seen", 0, [])]


def test_first_find_coordinator_answers_once_the_offsets_topic_exists(
        broker_factory: Any) -> None:
    """The offsets topic is created on first use, its logs off the event loop; the first
    FindCoordinators, sent together, are answered with this broker once all its
    partitions exist, and a commit without a FindCoordinator still creates it."""
    broker = broker_factory(**{"offsets.topic.num.partitions": 7})
    host, port = broker.bootstrap.split(":")
    with WireConnection(host, int(port)) as conn:
        for version in (1, 4, 3):
            conn.send(FIND_COORDINATOR, version, {"key": "g", "key_type": 0,
                                                  "coordinator_keys": ["g"]})
        answers = [conn.receive()[1] for _ in range(3)]
        assert [a["port"] for a in (answers[0], answers[1]["coordinators"][0], answers[2])] \
            == [conn.port] * 3
        metadata = conn.request(3, 9, {"topics": [{"name": "__consumer_offsets"}],
                                        "allow_auto_topic_creation": False})
        assert len(metadata["topics"][0]["partitions"]) == 7
    assert sorted(d for d in os.listdir(broker.data_dir) if d.startswith("__consumer")) == \
        sorted(f"__consumer_offsets-{i}" for i in range(7))

    other = broker_factory(**{"offsets.topic.num.partitions": 3})
    create_topic(other.bootstrap, TOPIC, 2)
    host, port = other.bootstrap.split(":")
    with WireConnection(host, int(port)) as conn:
        assert commit(conn, next(_names), -1, "") == ErrorCode.NONE
        metadata = conn.request(3, 9, {"topics": [{"name": "__consumer_offsets"}],
                                        "allow_auto_topic_creation": False})
        assert len(metadata["topics"][0]["partitions"]) == 3

"""The coordinator's state through ``__consumer_offsets`` on the real log and topic
manager: written, closed, reopened from disk, loaded back."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pybroker.broker.topic_manager import TopicManager
from pybroker.config import BrokerConfig
from pybroker.coordinator import (
    CoordinatorConfig,
    GroupCoordinator,
    GroupState,
    OffsetCommit,
    offsets_partitions,
)
from pybroker.coordinator.internal_topic import partition_for
from pybroker.coordinator.offset_store import OFFSETS_TOPIC
from pybroker.errors import ErrorCode
from pybroker.log.log_manager import LogManager
from pybroker.metadata.single_node import offsets_topic


def open_topics(data_dir: str) -> tuple[Any, TopicManager]:
    """The broker's start-up order: topics.json, then the logs, then attach them."""
    logs = LogManager(data_dir)
    topics = TopicManager(BrokerConfig({"log.dirs": data_dir}), logs)
    topics.read()
    logs.load(config_for=topics.config_for)
    topics.open()
    return logs, topics


def one_node(topics: TopicManager, config: CoordinatorConfig | None = None,
             **kwargs: Any) -> GroupCoordinator:
    """The coordinator as a single node wires it: over the node's offsets topic, leading
    every partition; returned once every group is loaded."""
    config = config or CoordinatorConfig(initial_rebalance_delay_ms=0)
    coordinator = GroupCoordinator(offsets_topic(topics, config), config, **kwargs)

    async def load() -> None:
        coordinator.lead_every_partition()
        while coordinator.loading():
            await asyncio.sleep(0)

    asyncio.run(load())
    return coordinator


def test_state_survives_reopen_from_disk(tmp_path: Any) -> None:
    data_dir = str(tmp_path / "data")
    logs, topics = open_topics(data_dir)
    topics.create("t", 3, 1, {})
    coordinator = one_node(topics, partition_exists=lambda t, p: p < 3)

    async def build() -> tuple[str, int]:
        commits = [OffsetCommit("t", p, 10 + p, 2, f"meta-{p}") for p in range(3)]
        assert set(coordinator.commit_offsets("standalone", "", None, -1, commits).values()) \
            == {ErrorCode.NONE}
        coordinator.delete_offsets("standalone", [("t", 1)])
        coordinator.commit_offsets("gone", "", None, -1, commits)
        assert coordinator.delete_groups(["gone"]) == {"gone": ErrorCode.NONE}
        joined = await coordinator.join_group("active", "", "static-1", "cid", "/h", 10000,
                                              20000, "consumer", [("range", b"sub")], False)
        await coordinator.sync_group("active", joined.generation, joined.member_id,
                                     "static-1", None, None, {joined.member_id: b"assigned"})
        coordinator.commit_offsets("active", joined.member_id, "static-1",
                                   joined.generation, [OffsetCommit("t", 0, 99)])
        return joined.member_id, joined.generation

    member_id, generation = asyncio.run(build())
    logs.close(clean=True)

    logs, topics = open_topics(data_dir)
    assert len(topics.get(OFFSETS_TOPIC).partitions) == 50
    loaded = one_node(topics)
    assert sorted(loaded.groups) == ["active", "standalone"]
    standalone = loaded.fetch_offsets("standalone", None)
    assert {tp: (o.offset, o.leader_epoch, o.metadata) for tp, o in standalone.items()} == \
        {("t", 0): (10, 2, "meta-0"), ("t", 2): (12, 2, "meta-2")}
    active = loaded.groups["active"]
    assert (active.state, active.generation, active.protocol_name, active.leader_id) == \
        (GroupState.STABLE, generation, "range", member_id)
    member = active.members[member_id]
    assert (member.group_instance_id, member.assignment, member.metadata("range")) == \
        ("static-1", b"assigned", b"sub")
    # the member keeps its session across the restart: its heartbeat is accepted
    assert loaded.heartbeat("active", member_id, "static-1", generation) == ErrorCode.NONE
    assert loaded.fetch_offsets("active", [("t", 0)])[("t", 0)].offset == 99
    # every record of a group sits in the group's partition
    for group in ("active", "standalone", "gone"):
        partition = topics.partition(OFFSETS_TOPIC, partition_for(group, 50))
        assert partition.log.log_end_offset > 0
    logs.close(clean=True)


def test_one_node_answers_a_commit_without_suspending(tmp_path: Any) -> None:
    # the ISR is this broker: the high watermark moves with the write, so OffsetCommit is
    # answered in the handler's first step (no task, no future)
    logs, topics = open_topics(str(tmp_path / "data"))
    topics.create("t", 1, 1, {})
    coordinator = one_node(topics)
    step = coordinator.commit_offsets_async("g", "", None, -1, [OffsetCommit("t", 0, 5)])
    with pytest.raises(StopIteration) as done:  # (a suspended step would return)
        step.send(None)
    assert done.value.value == {("t", 0): ErrorCode.NONE}
    assert coordinator.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 5
    logs.close(clean=True)


def test_one_node_loads_its_groups_in_slices_while_serving(tmp_path: Any,
                                                           monkeypatch: Any) -> None:
    logs, topics = open_topics(str(tmp_path / "data"))
    earlier = one_node(topics)
    for i in range(50):  # 50 batches in the group's partition
        earlier.commit_offsets("g", "", None, -1, [OffsetCommit("t", 0, i)])
    monkeypatch.setattr(offsets_partitions, "LOAD_SLICE_S", 0.0)  # a pause at each batch
    config = CoordinatorConfig()
    restarted = GroupCoordinator(offsets_topic(topics, config), config)

    async def scenario() -> None:
        restarted.lead_every_partition()
        # the loads run on the loop; meanwhile the group's requests get Kafka's answer
        assert restarted.coordinator_error("g") == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        turns = 0
        while restarted.loading():
            turns += 1  # the loop ran something else while the partitions loaded
            await asyncio.sleep(0)
        assert turns >= 50
        assert restarted.coordinator_error("g") == ErrorCode.NONE
        assert restarted.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 49

    asyncio.run(scenario())
    logs.close(clean=True)

"""The coordinator as a cluster member wires it (following leadership, over
``ClusterInternalTopic``), on the real log, topic manager and partitions: the test plays
the ReplicaManager, making this broker the leader or a follower of ``__consumer_offsets``
partitions (``Partition.become_leader`` / ``become_follower``, then
``leadership_changed``), and a follower whose fetches move the high watermark
(``Partition.follower_fetched``). No server, no ZooKeeper: the cluster test
(tests/cluster/test_cluster_groups.py) runs the whole path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pybroker.coordinator import (
    CoordinatorConfig,
    GroupCoordinator,
    GroupState,
    OffsetCommit,
    offsets_partitions,
)
from pybroker.coordinator.internal_topic import partition_for
from pybroker.coordinator.offset_store import OFFSETS_TOPIC, offsets_topic_config
from pybroker.errors import ErrorCode
from pybroker.log.log_config import LogConfig
from pybroker.metadata.zk_cluster import ClusterInternalTopic
from tests.groups.test_offset_store import one_node, open_topics

PARTITIONS = 3
FOLLOWER = 99  # a replica id of no broker: the test fetches on its behalf
GROUP = "g"


@pytest.fixture
def topics(tmp_path: Any) -> Iterator[Any]:
    logs, topics = open_topics(str(tmp_path / "data"))
    topics.create("t", 3, 1, {})
    topics.create(OFFSETS_TOPIC, PARTITIONS, 1, dict(offsets_topic_config(1 << 20)))
    yield topics
    logs.close(clean=True)


def cluster_member(topics: Any, **config: Any) -> GroupCoordinator:
    coordinator = GroupCoordinator(
        ClusterInternalTopic(topics, OFFSETS_TOPIC, lambda: PARTITIONS),
        CoordinatorConfig(offsets_topic_num_partitions=PARTITIONS,
                          **{"initial_rebalance_delay_ms": 0, **config}),
        partition_exists=lambda t, p: t == "t" and p < 3)
    # the test plays the ReplicaManager: it calls leadership_changed itself
    coordinator.follow_leadership(lambda listener: None)
    return coordinator


def offsets_partition(topics: Any, group: str = GROUP) -> Any:
    return topics.partition(OFFSETS_TOPIC, partition_for(group, PARTITIONS))


def lead(coordinator: GroupCoordinator, partition: Any, epoch: int,
         followers: tuple[int, ...] = ()) -> None:
    me = partition.broker_id
    replicas = [me, *followers]
    partition.become_leader(epoch, replicas, replicas, 0)
    coordinator.leadership_changed(partition, True)


def follow(coordinator: GroupCoordinator, partition: Any, epoch: int) -> None:
    partition.become_follower(FOLLOWER, epoch, [FOLLOWER, partition.broker_id],
                              [FOLLOWER, partition.broker_id], 0)
    coordinator.leadership_changed(partition, False)


async def until(predicate: Callable[[], Any], what: str, rounds: int = 10_000) -> None:
    for _ in range(rounds):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def join_call(c: GroupCoordinator, member_id: str = "", group: str = GROUP) -> Any:
    return c.join_group(group, member_id, None, "client", "/127.0.0.1", 10_000, 30_000,
                        "consumer", [("range", b"sub")], False)


def join(c: GroupCoordinator, member_id: str = "", group: str = GROUP) -> Any:
    return asyncio.ensure_future(join_call(c, member_id, group))


def commit(c: GroupCoordinator, offset: int, member_id: str = "", generation: int = -1) -> Any:
    return asyncio.ensure_future(c.commit_offsets_async(GROUP, member_id, None, generation,
                                                        [OffsetCommit("t", 0, offset)]))


def committed(c: GroupCoordinator, group: str = GROUP) -> int | None:
    found = c.fetch_offsets(group, [("t", 0)])[("t", 0)]
    return None if found is None else found.offset


def test_groups_load_on_leadership_and_unload_without_it(topics: Any) -> None:
    # what an earlier leader of the partition wrote
    earlier = one_node(topics, CoordinatorConfig(offsets_topic_num_partitions=PARTITIONS,
                                                 initial_rebalance_delay_ms=0))
    assert earlier.commit_offsets(GROUP, "", None, -1, [OffsetCommit("t", 0, 7)]) == \
        {("t", 0): ErrorCode.NONE}
    c = cluster_member(topics)
    partition = offsets_partition(topics)
    other_group = next(g for g in (f"x{i}" for i in range(100))
                       if partition_for(g, PARTITIONS) != partition.index)

    async def scenario() -> None:
        # led elsewhere: every request of the group is sent to look again
        assert c.coordinator_error(GROUP) == ErrorCode.NOT_COORDINATOR
        assert (await join(c)).error == ErrorCode.NOT_COORDINATOR
        assert (await c.sync_group(GROUP, 1, "m", None, None, None, {})).error == \
            ErrorCode.NOT_COORDINATOR
        assert c.heartbeat(GROUP, "m", None, 1) == ErrorCode.NOT_COORDINATOR
        assert c.leave_group(GROUP, [("m", None)]) == (ErrorCode.NOT_COORDINATOR, [])
        assert await commit(c, 8) == {("t", 0): ErrorCode.NOT_COORDINATOR}
        assert c.describe_group(GROUP).error == ErrorCode.NOT_COORDINATOR
        assert c.delete_groups([GROUP]) == {GROUP: ErrorCode.NOT_COORDINATOR}
        assert c.delete_offsets(GROUP, [("t", 0)]) == (ErrorCode.NOT_COORDINATOR, {})

        lead(c, partition, 1)
        # loading (the loader task has not run yet; these calls do not suspend): Kafka's
        # answers while the state is not there yet
        assert c.loading()
        assert (await join_call(c)).error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert (await c.sync_group(GROUP, 1, "m", None, None, None, {})).error == \
            ErrorCode.REBALANCE_IN_PROGRESS
        assert c.heartbeat(GROUP, "m", None, 1) == ErrorCode.NONE
        assert await c.commit_offsets_async(GROUP, "", None, -1, [OffsetCommit("t", 0, 8)]) \
            == {("t", 0): ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
        assert c.loading()
        await until(lambda: not c.loading(), "the partition loaded")
        assert committed(c) == 7
        assert c.coordinator_error(other_group) == ErrorCode.NOT_COORDINATOR

        # told leader again at a new epoch: what is loaded stays
        lead(c, partition, 2)
        assert not c.loading() and committed(c) == 7

        first = await join(c)
        assert first.error == ErrorCode.NONE
        sync = await c.sync_group(GROUP, first.generation, first.member_id, None, None, None,
                                  {first.member_id: b"a"})
        assert sync.error == ErrorCode.NONE
        parked = join(c)  # a second member: parked until the first rejoins
        await settle()
        assert not parked.done()

        # the replica is a follower before the listener hears of it: refused already
        partition.become_follower(FOLLOWER, 3, [FOLLOWER, partition.broker_id],
                                  [FOLLOWER, partition.broker_id], 0)
        assert c.heartbeat(GROUP, first.member_id, None, first.generation) == \
            ErrorCode.NOT_COORDINATOR
        follow(c, partition, 3)
        assert (await parked).error == ErrorCode.NOT_COORDINATOR
        assert GROUP not in c.groups
        assert c.coordinator_error(GROUP) == ErrorCode.NOT_COORDINATOR
        assert c.heartbeat(GROUP, first.member_id, None, first.generation) == \
            ErrorCode.NOT_COORDINATOR

        # leader again: the group comes back from the log, Stable with its member
        lead(c, partition, 4)
        await until(lambda: not c.loading(), "the partition loaded again")
        group = c.groups[GROUP]
        assert group.state == GroupState.STABLE and list(group.members) == [first.member_id]
        assert committed(c) == 7

    asyncio.run(scenario())


def test_writes_are_answered_once_replicated(topics: Any) -> None:
    c = cluster_member(topics, offsets_commit_timeout_ms=300)
    partition = offsets_partition(topics)

    def follower_catches_up() -> None:
        partition.follower_fetched(FOLLOWER, partition.log.log_end_offset)

    async def scenario() -> None:
        lead(c, partition, 1, followers=(FOLLOWER,))
        await until(lambda: not c.loading(), "the partition loaded")

        pending = commit(c, 42)
        await settle()
        assert not pending.done()
        assert committed(c) is None  # not replicated: not visible either
        follower_catches_up()
        assert await pending == {("t", 0): ErrorCode.NONE}
        assert committed(c) == 42

        # the follower never fetches: the commit is not acknowledged, nor applied
        assert await commit(c, 43) == {("t", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE}
        assert committed(c) == 42
        follower_catches_up()

        # the leader's SyncGroup: the group turns Stable once its assignment is replicated
        joined = await join(c)
        assert joined.error == ErrorCode.NONE
        sync = asyncio.ensure_future(c.sync_group(GROUP, joined.generation, joined.member_id,
                                                  None, None, None,
                                                  {joined.member_id: b"assigned"}))
        await settle()
        assert not sync.done()
        assert c.groups[GROUP].state == GroupState.COMPLETING_REBALANCE
        follower_catches_up()
        result = await sync
        assert (result.error, result.assignment) == (ErrorCode.NONE, b"assigned")
        assert c.groups[GROUP].state == GroupState.STABLE

        # leadership lost while a commit waits: the client looks for the coordinator again
        pending = commit(c, 44, joined.member_id, joined.generation)
        await settle()
        assert not pending.done()
        follow(c, partition, 2)
        assert await pending == {("t", 0): ErrorCode.NOT_COORDINATOR}

    asyncio.run(scenario())


def test_a_commit_below_min_insync_replicas_is_refused(topics: Any) -> None:
    c = cluster_member(topics)
    partition = offsets_partition(topics)
    partition.log.update_config(LogConfig.from_properties(
        {**offsets_topic_config(1 << 20), "min.insync.replicas": "2"}))

    async def scenario() -> None:
        lead(c, partition, 1)  # an ISR of one
        await until(lambda: not c.loading(), "the partition loaded")
        end = partition.log.log_end_offset
        assert await commit(c, 5) == {("t", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE}
        assert partition.log.log_end_offset == end  # refused before the append
        assert committed(c) is None

    asyncio.run(scenario())


def test_a_big_partition_loads_in_slices(topics: Any, monkeypatch: Any) -> None:
    earlier = one_node(topics, CoordinatorConfig(offsets_topic_num_partitions=PARTITIONS,
                                                 initial_rebalance_delay_ms=0))
    keys = 3 * offsets_partitions._INSTALL_STEP  # parsed in 3 steps
    earlier.commit_offsets(GROUP, "", None, -1, [OffsetCommit("t", p, p) for p in range(keys)])
    for i in range(50):  # 50 more batches
        earlier.commit_offsets(GROUP, "", None, -1, [OffsetCommit("t", 0, i)])
    monkeypatch.setattr(offsets_partitions, "LOAD_SLICE_S", 0.0)  # a pause at each step
    c = cluster_member(topics)
    partition = offsets_partition(topics)

    async def scenario() -> None:
        lead(c, partition, 1)
        turns = 0
        while c.loading():
            turns += 1  # the loop ran something else while the partition loaded
            await asyncio.sleep(0)
        assert turns >= 50 + 3
        assert committed(c) == 49
        assert len(c.fetch_offsets(GROUP, None)) == keys

        # a load stopped by a lost leadership leaves no state behind
        follow(c, partition, 2)
        lead(c, partition, 3)
        await asyncio.sleep(0)
        follow(c, partition, 4)
        await settle()
        assert GROUP not in c.groups and not c.loading()
        assert c.coordinator_error(GROUP) == ErrorCode.NOT_COORDINATOR

    asyncio.run(scenario())

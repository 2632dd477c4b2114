"""The controller's reassignment steps (KIP-455) against a real ZooKeeper and recording
stand-in brokers (``test_controller``'s scene): what it writes and sends at each step,
where the cluster tests see only the outcome. Moves are written into the topic znode as
any broker writes them (``ReplicaAssignment`` on the store)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from pybroker.cluster import reassignment
from pybroker.cluster.reassignment import ReplicaAssignment
from pybroker.cluster.zk_store import ClusterStore, PartitionState
from pybroker.errors import ErrorCode
from pybroker.metadata.interface import OngoingReassignment
from tests.cluster.test_controller import (
    STOP_REPLICA,
    Scene,
    scene_test,
    until,
    until_state,
)


async def request_move(store: ClusterStore, topic: str, partition: int,
                       target: list[int] | None) -> None:
    """What AlterPartitionReassignments writes: a move to ``target`` (None: cancel)."""
    found = await asyncio.to_thread(store.versioned_topic, topic)
    assert found is not None
    current, version = found
    moving = ReplicaAssignment.of(current, partition)
    wanted = moving.reassign_to(target) if target is not None else ReplicaAssignment(
        moving.origin, [], [])
    await asyncio.to_thread(store.write_topic, wanted.in_topic(current, partition), version)


async def assignment(store: ClusterStore, topic: str, partition: int) -> ReplicaAssignment:
    found = await asyncio.to_thread(store.topic, topic)
    assert found is not None
    return ReplicaAssignment.of(found, partition)


def stopped(scene: Scene, broker_id: int, topic: str) -> list[tuple[int, bool]]:
    return [(p["partition_index"], p["delete_partition"])
            for body in scene.brokers[broker_id].of(STOP_REPLICA)
            for t in body["topic_states"] if t["topic_name"] == topic
            for p in t["partition_states"]]


def told_replicas(scene: Scene, broker_id: int, topic: str, replicas: list[int]
                  ) -> dict | None:
    """The last LeaderAndIsr state the broker got for ``topic``-0 if it names
    ``replicas``."""
    got = scene.brokers[broker_id].leader_and_isr(topic, 0)
    return got if got is not None and got["replicas"] == replicas else None


async def isr_joined(scene: Scene, topic: str, isr: list[int]) -> None:
    """The leader (here: the test) lets followers into the ISR and notifies it."""
    state = await until_state(scene.admin, topic, 0, lambda s: True, "a state")
    await asyncio.to_thread(scene.admin.set_partition_state, topic, 0, state.leader,
                            state.leader_epoch, isr, state.controller_epoch,
                            state.zk_version, None)
    await asyncio.to_thread(scene.admin.notify_isr_change, [(topic, 0)])


async def three_brokers_t_on_1_and_2(scene: Scene) -> PartitionState:
    """Brokers 1 to 3, controller 1, topic t's one partition on 1 (leading) and 2."""
    await scene.start_brokers(1, 2, 3)
    await scene.create_topic("t", {0: [1, 2]})
    controller = await scene.controller(1)
    await until("an active controller", lambda: controller.is_active)
    return await until_state(scene.admin, "t", 0, lambda s: s.leader == 1, "leader 1")


def test_move_adds_then_moves_leadership_then_removes(store_factory: Any) -> None:
    async def body(scene: Scene) -> None:
        first = await three_brokers_t_on_1_and_2(scene)

        await request_move(scene.admin, "t", 0, [2, 3])
        # A1: the whole set to every replica, with a new leader epoch
        moving = await until_state(scene.admin, "t", 0,
                                   lambda s: s.leader_epoch == first.leader_epoch + 1,
                                   "a new epoch")
        assert (moving.leader, moving.isr) == (1, [1, 2])
        for broker_id in (1, 2, 3):
            told = await until(f"broker {broker_id} told the whole set", lambda b=broker_id:
                               told_replicas(scene, b, "t", [2, 3, 1]))
            assert (told["adding_replicas"], told["removing_replicas"]) == ([3], [1])
            assert told["leader"] == 1 and told["leader_epoch"] == moving.leader_epoch
        assert await assignment(scene.admin, "t", 0) == ReplicaAssignment([2, 3, 1], [3],
                                                                          [1])

        # broker 3 caught up: RS = TRS, leadership off the removed replica, 1 deleted
        await isr_joined(scene, "t", [1, 2, 3])
        done = await until_state(scene.admin, "t", 0, lambda s: s.leader == 2,
                                 "leader 2")
        assert done.isr == [2, 3] and done.leader_epoch > moving.leader_epoch
        assert await assignment(scene.admin, "t", 0) == ReplicaAssignment([2, 3], [], [])
        await until("StopReplica with delete to broker 1",
                    lambda: stopped(scene, 1, "t") == [(0, True)])
        for broker_id in (2, 3):
            told = await until(f"broker {broker_id} told it leads", lambda b=broker_id:
                               scene.brokers[b].told("t", 0, 2))
            assert told["replicas"] == [2, 3] and told["adding_replicas"] == []
        assert stopped(scene, 2, "t") == stopped(scene, 3, "t") == []
    scene_test(body, store_factory)


def test_cancel_stops_the_added_replicas(store_factory: Any) -> None:
    async def body(scene: Scene) -> None:
        await three_brokers_t_on_1_and_2(scene)
        await request_move(scene.admin, "t", 0, [1, 3])
        await until("broker 3 told", lambda: scene.brokers[3].leader_and_isr("t", 0))
        await request_move(scene.admin, "t", 0, None)
        await until("StopReplica with delete to broker 3",
                    lambda: stopped(scene, 3, "t") == [(0, True)])
        state = await until_state(scene.admin, "t", 0, lambda s: s.leader_epoch >= 2,
                                  "a new epoch")
        assert (state.leader, state.isr) == (1, [1, 2])
        for broker_id in (1, 2):
            await until(f"broker {broker_id} told the original set", lambda b=broker_id:
                        told_replicas(scene, b, "t", [1, 2]))
        assert stopped(scene, 1, "t") == stopped(scene, 2, "t") == []
        assert await assignment(scene.admin, "t", 0) == ReplicaAssignment([1, 2], [], [])
    scene_test(body, store_factory)


def test_new_controller_starts_a_move_it_finds_in_zookeeper(store_factory: Any) -> None:
    async def body(scene: Scene) -> None:
        await scene.start_brokers(1, 2)
        await scene.create_topic("t", {0: [1]})
        await asyncio.to_thread(scene.admin.create_partition_state, "t", 0, 1, 4, [1], 1,
                                None)
        # written while no controller runs (or before the last one acted on it)
        await request_move(scene.admin, "t", 0, [2])
        controller = await scene.controller(2)
        await until("an active controller", lambda: controller.is_active)
        # the leader learns the whole set: only a new epoch tells it
        state = await until_state(scene.admin, "t", 0, lambda s: s.leader_epoch == 5,
                                  "a new epoch")
        assert (state.leader, state.isr) == (1, [1])
        await until("the leader told the whole set", lambda: (
            scene.brokers[1].told("t", 0, 1) or {}).get("leader_epoch") == 5)
        assert scene.brokers[1].told("t", 0, 1)["replicas"] == [2, 1]
        await until("broker 2 told", lambda: scene.brokers[2].leader_and_isr("t", 0))
        await isr_joined(scene, "t", [1, 2])
        await until_state(scene.admin, "t", 0, lambda s: (s.leader, s.isr) == (2, [2]),
                          "broker 2 leading alone")
        await until("StopReplica with delete to broker 1",
                    lambda: stopped(scene, 1, "t") == [(0, True)])
    scene_test(body, store_factory)


def test_legacy_request_znode(store_factory: Any) -> None:
    async def body(scene: Scene) -> None:
        await scene.start_brokers(1, 2)
        await scene.create_topic("t", {0: [1], 1: [1]})
        controller = await scene.controller(1)
        await until("an active controller", lambda: controller.is_active)
        await until_state(scene.admin, "t", 1, lambda s: s.leader == 1, "leader 1")
        client = scene.admin.client
        await asyncio.to_thread(
            client.create, "/admin/reassign_partitions",
            b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2]},'
            b'{"topic":"t","partition":1,"replicas":[1,2]},'
            b'{"topic":"t","partition":9,"replicas":[2]}]}')
        await until("moves from the znode", lambda: (
            scene.brokers[2].leader_and_isr("t", 0) and scene.brokers[2].leader_and_isr(
                "t", 1)))
        left = await asyncio.to_thread(scene.admin.legacy_reassignment)
        assert left is not None and sorted(left[0]) == [("t", 0), ("t", 1)]  # 9: dropped
        # an API request for partition 1 replaces its legacy entry
        await request_move(scene.admin, "t", 1, None)
        await isr_joined(scene, "t", [1, 2])
        await until_state(scene.admin, "t", 0, lambda s: (s.leader, s.isr) == (2, [2]),
                          "t-0 on broker 2")

        def gone() -> bool:
            return client.exists("/admin/reassign_partitions") is None
        await until("the request znode deleted", gone)
        assert await assignment(scene.admin, "t", 1) == ReplicaAssignment([1], [], [])
    scene_test(body, store_factory)


def test_requests_are_checked_against_zookeeper(store_factory: Any) -> None:
    """What a broker answering AlterPartitionReassignments does, with no controller: the
    target brokers checked against the registrations, a topic being deleted is no topic
    to move (as Kafka's controller answers), accepted moves written for ListPartition-
    Reassignments to see."""
    async def body(scene: Scene) -> None:
        await scene.start_brokers(1, 2)
        await scene.create_topic("t", {0: [1], 1: [1]})
        await scene.create_topic("going", {0: [1]})
        await asyncio.to_thread(scene.admin.request_topic_deletion, "going")
        node = SimpleNamespace(store=scene.admin)
        errors = await reassignment.alter(node, [  # type: ignore[arg-type]
            ("t", 0, [2]), ("going", 0, [2]), ("t", 1, [3]), ("t", 1, None)])
        assert [None if e is None else e.code for e in errors] == [
            None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            ErrorCode.NO_REASSIGNMENT_IN_PROGRESS]
        assert await reassignment.ongoing(node, None) == [  # type: ignore[arg-type]
            OngoingReassignment("t", 0, [2, 1], [2], [1])]
        assert await reassignment.ongoing(node, [("t", 1)]) == []  # type: ignore[arg-type]
    scene_test(body, store_factory)

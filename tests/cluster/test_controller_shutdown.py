"""The controller's side of controlled shutdown (``Controller.controlled_shutdown``),
against a real ZooKeeper and stand-in brokers recording what they are sent (the scene of
test_controller.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from pybroker.errors import ErrorCode
from pybroker.metadata.interface import PREFERRED_ELECTION
from tests.cluster.test_controller import (
    LEADER_AND_ISR,
    STOP_REPLICA,
    Scene,
    codes,
    scene_test,
    state_of,
    until,
    until_state,
)


def test_leaderships_move_and_isrs_drop_the_stopping_broker(store_factory: Any) -> None:
    async def body(scene: Scene) -> None:
        await scene.start_brokers(1, 2, 3)
        # t-0 led by 1, t-1 followed by 1, t-2 its alone (nothing to hand over)
        await scene.create_topic("t", {0: [1, 2, 3], 1: [2, 1, 3], 2: [1]})
        controller = await scene.controller(3)
        await until_state(scene.admin, "t", 2, lambda s: s.leader == 1, "t-2 led")
        before = {p: await state_of(scene.admin, "t", p) for p in range(3)}

        assert await controller.controlled_shutdown(1, scene.brokers[1].epoch) == (
            ErrorCode.NONE, [])
        led = await state_of(scene.admin, "t", 0)
        followed = await state_of(scene.admin, "t", 1)
        assert led is not None and followed is not None and before[0] and before[1]
        assert (led.leader, led.isr, led.leader_epoch) == (2, [2, 3],
                                                           before[0].leader_epoch + 1)
        assert (followed.leader, followed.isr, followed.leader_epoch) == (
            2, [2, 3], before[1].leader_epoch + 1)
        assert await state_of(scene.admin, "t", 2) == before[2]

        stopping, new_leader = scene.brokers[1], scene.brokers[2]
        # the stopping broker follows t-0's new leader, and stops fetching t-1
        got = await until("LeaderAndIsr naming 2 leader of t-0", lambda: stopping.told("t", 0, 2))
        assert got["isr"] == [2, 3]
        stop = await until("StopReplica for t-1", lambda: stopping.of(STOP_REPLICA))
        assert [(t["topic_name"], p["partition_index"], p["delete_partition"],
                 p["leader_epoch"]) for t in stop[-1]["topic_states"]
                for p in t["partition_states"]] == [("t", 1, False, followed.leader_epoch)]
        assert all(p["partition_index"] != 1 for body in stopping.of(LEADER_AND_ISR)[1:]
                   for t in body["topic_states"] for p in t["partition_states"])
        await until("t-1's ISR without 1 at its leader",
                    lambda: (new_leader.leader_and_isr("t", 1) or {}).get("isr") == [2, 3])
        await until("UpdateMetadata naming 2 leader of t-0",
                    lambda: (scene.brokers[3].metadata("t", 0) or {}).get("leader") == 2)

        # shutting down until gone: a new partition is not given to it to lead
        await scene.create_topic("new", {0: [1, 2]})
        created = await until_state(scene.admin, "new", 0, lambda s: s.leader >= 0,
                                    "new-0 led")
        assert (created.leader, created.isr) == (2, [2])
        # asked again (a retry): nothing left to move
        assert await controller.controlled_shutdown(1, scene.brokers[1].epoch) == (
            ErrorCode.NONE, [])
    scene_test(body, store_factory)


def test_a_partition_no_other_isr_member_can_lead_remains(store_factory: Any) -> None:
    async def body(scene: Scene) -> None:
        await scene.start_brokers(1, 2)
        await scene.create_topic("only", {0: [1, 2]})
        controller = await scene.controller(1)
        await until_state(scene.admin, "only", 0, lambda s: s.leader == 1, "leader 1")
        await scene.brokers[2].die()
        state = await until_state(scene.admin, "only", 0, lambda s: s.isr == [1],
                                  "2 out of the ISR")
        assert await controller.controlled_shutdown(1, scene.brokers[1].epoch) == (
            ErrorCode.NONE, [("only", 0)])
        assert await state_of(scene.admin, "only", 0) == state  # it keeps leading
    scene_test(body, store_factory)


def test_refused_for_a_stale_broker_epoch_or_a_broker_not_live(store_factory: Any) -> None:
    async def body(scene: Scene) -> None:
        await scene.start_brokers(1, 2)
        await scene.create_topic("t", {0: [1, 2]})
        controller = await scene.controller(2)
        await until_state(scene.admin, "t", 0, lambda s: s.leader == 1, "leader 1")
        broker = scene.brokers[1]
        old_epoch = broker.epoch
        await broker.die()
        await broker.register()  # a new registration, a new broker epoch
        await until("the controller saw the new registration",
                    lambda: any(b["broker_epoch"] == broker.epoch
                                for b in broker.of(LEADER_AND_ISR)))
        assert await controller.controlled_shutdown(1, old_epoch) == (
            ErrorCode.STALE_BROKER_EPOCH, [])
        assert await controller.controlled_shutdown(9, -1) == (
            ErrorCode.BROKER_NOT_AVAILABLE, [])
        # the refused request changed nothing: once back in the ISR, 1 may lead again
        state = await until_state(scene.admin, "t", 0, lambda s: s.leader == 2, "leader 2")
        await asyncio.to_thread(scene.admin.set_partition_state, "t", 0, 2, state.leader_epoch,
                                [2, 1], state.controller_epoch, state.zk_version, None)
        await asyncio.to_thread(scene.admin.notify_isr_change, [("t", 0)])
        await until("the controller saw 1 back in the ISR",
                    lambda: (broker.metadata("t", 0) or {}).get("isr") == [2, 1])
        assert codes(await controller.elect_leaders(PREFERRED_ELECTION, [("t", 0)])) == {
            ("t", 0): ErrorCode.NONE}
    scene_test(body, store_factory)

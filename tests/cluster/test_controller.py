"""The controller against a real ZooKeeper and real control channels.

Each stand-in broker is what the controller sees of a broker: a ZooKeeper session holding
its registration (``/brokers/ids/<id>``) and a real ``ControlServer`` that records every
request it gets. A broker "dies" when its session is closed (its registration goes at
once) and comes back with a new session, so a new broker epoch. Controllers run on the
test's event loop with their own sessions, as they do inside a broker.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kazoo.client import KazooClient

from pybroker.cluster import controller as controller_module
from pybroker.cluster.channel import ControlClient, ControlServer
from pybroker.cluster.controller import Controller
from pybroker.cluster.zk_store import ClusterStore, PartitionState
from pybroker.config import BrokerConfig
from pybroker.errors import ErrorCode
from pybroker.metadata.interface import PREFERRED_ELECTION, UNCLEAN_ELECTION, ElectionResult
from pybroker.net.protocol import codec

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6
WAIT_S = 20.0
PREFERRED, UNCLEAN = PREFERRED_ELECTION, UNCLEAN_ELECTION
NONE, UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
PREFERRED_LEADER_NOT_AVAILABLE = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
ELIGIBLE_LEADERS_NOT_AVAILABLE = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
ELECTION_NOT_NEEDED = ErrorCode.ELECTION_NOT_NEEDED


def settings(**overrides: Any) -> BrokerConfig:
    values = {"controller.socket.timeout.ms": 5000, "auto.leader.rebalance.enable": False,
              "leader.imbalance.check.interval.seconds": 1}
    values.update({k.replace("_", "."): v for k, v in overrides.items()})
    return BrokerConfig(values)


class StandIn:
    """A broker as the controller sees it: a registration and a recording control server."""

    def __init__(self, broker_id: int, store_factory: Callable[..., ClusterStore]) -> None:
        self.broker_id = broker_id
        self._store_factory = store_factory
        self.requests: list[tuple[int, dict]] = []
        self.server = ControlServer("127.0.0.1", 0, self._handle)
        self.store: ClusterStore | None = None
        self.epoch = -1

    async def _handle(self, api_key: int, api_version: int, body: dict) -> dict:
        self.requests.append((api_key, body))
        return codec.response_defaults(api_key, api_version)

    async def start(self) -> StandIn:
        self.server.start()
        await self.register()
        return self

    async def register(self) -> None:
        """A new session and registration (new broker epoch); the recording starts over."""
        self.requests = []
        self.store = await asyncio.to_thread(self._store_factory)
        self.epoch = await asyncio.to_thread(
            self.store.register_broker, self.broker_id, "127.0.0.1", 9000 + self.broker_id,
            f"127.0.0.1:{self.server.port}")

    async def die(self) -> None:
        assert self.store is not None
        await asyncio.to_thread(self.store.stop)
        self.store = None

    def of(self, api_key: int) -> list[dict]:
        return [body for key, body in self.requests if key == api_key]

    def _last_state(self, api_key: int, topic: str, partition: int) -> dict | None:
        found = None
        for body in self.of(api_key):
            for t in body["topic_states"]:
                for p in t["partition_states"]:
                    if t["topic_name"] == topic and p["partition_index"] == partition:
                        found = p
        return found

    def leader_and_isr(self, topic: str, partition: int) -> dict | None:
        """The last LeaderAndIsr partition state this broker got for the partition."""
        return self._last_state(LEADER_AND_ISR, topic, partition)

    def metadata(self, topic: str, partition: int) -> dict | None:
        """The last UpdateMetadata partition state this broker got for the partition."""
        return self._last_state(UPDATE_METADATA, topic, partition)

    def told(self, topic: str, partition: int, leader: int) -> dict | None:
        """The last LeaderAndIsr state of the partition if it names ``leader``."""
        got = self.leader_and_isr(topic, partition)
        return got if got is not None and got["leader"] == leader else None

    def live_brokers(self) -> list[int]:
        bodies = self.of(UPDATE_METADATA)
        return [b["id"] for b in bodies[-1]["live_brokers"]] if bodies else []


def codes(results: dict[tuple[str, int], ElectionResult] | None) -> dict[tuple[str, int], int]:
    assert results is not None, "the controller is not active"
    return {tp: result.code for tp, result in results.items()}


async def until(what: str, condition: Callable[[], Any]) -> Any:
    """Poll ``condition`` until it is true (a liveness wait, never a timing assertion)."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while True:
        value = condition()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def state_of(store: ClusterStore, topic: str, partition: int) -> PartitionState | None:
    return await asyncio.to_thread(store.partition_state, topic, partition)


async def until_state(store: ClusterStore, topic: str, partition: int,
                      check: Callable[[PartitionState], bool], what: str) -> PartitionState:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while True:
        state = await state_of(store, topic, partition)
        if state is not None and check(state):
            return state
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {topic}-{partition}: {what} "
                                 f"(last {state})")
        await asyncio.sleep(0.02)


class CountingClient(ControlClient):
    """A ControlClient counting the requests it sends (retries included)."""

    sent: dict[int, int] = {}

    async def request(self, api_key: int, api_version: int, body: dict,
                      timeout_s: float) -> dict:
        CountingClient.sent[self.broker_id] = CountingClient.sent.get(self.broker_id, 0) + 1
        return await super().request(api_key, api_version, body, timeout_s)


class Scene:
    """Stand-in brokers, controllers and an admin session on one chroot."""

    def __init__(self, store_factory: Callable[..., ClusterStore]) -> None:
        self.store_factory = store_factory
        self.brokers: dict[int, StandIn] = {}
        self.controllers: list[Controller] = []
        self.admin = store_factory()

    async def start_brokers(self, *ids: int) -> None:
        for broker_id in ids:
            self.brokers[broker_id] = await StandIn(broker_id, self.store_factory).start()

    async def controller(self, broker_id: int, client: type[ControlClient] = ControlClient,
                         **config: Any) -> Controller:
        store = await asyncio.to_thread(self.store_factory)
        controller = Controller(broker_id, store, settings(**config),
                                lambda info: client(info.broker_id, info.control))
        await controller.start()
        self.controllers.append(controller)
        controller.store_for_test = store  # type: ignore[attr-defined]
        return controller

    async def create_topic(self, name: str, assignment: dict[int, list[int]],
                           configs: dict[str, str] | None = None) -> uuid.UUID:
        topic_id = uuid.uuid4()
        await asyncio.to_thread(self.admin.create_topic, name, topic_id, assignment,
                                configs or {})
        return topic_id

    async def close(self) -> None:
        for controller in self.controllers:
            await controller.stop()
        for broker in self.brokers.values():
            await broker.server.close()


def scene_test(body: Callable[[Scene], Awaitable[None]],
               store_factory: Callable[..., ClusterStore]) -> None:
    async def main() -> None:
        scene = Scene(store_factory)
        try:
            await body(scene)
        finally:
            await scene.close()
    asyncio.run(asyncio.wait_for(main(), 120))


async def two_controllers(scene: Scene) -> tuple[Controller, Controller, PartitionState]:
    """Brokers 1 and 2, topic t on both, controller 1 active, controller 2 waiting."""
    await scene.start_brokers(1, 2)
    await scene.create_topic("t", {0: [1, 2]})
    first = await scene.controller(1)
    await until("the first controller", lambda: first.is_active)
    second = await scene.controller(2)
    state = await until_state(scene.admin, "t", 0, lambda s: s.leader == 1, "leader 1")
    return first, second, state


async def isr_rounds(scene: Scene, state: PartitionState, rounds: int) -> None:
    """The leader (here: the test) changes t-0's ISR ``rounds`` times, notifying each; every
    stand-in broker must get an UpdateMetadata with each new state."""
    for round_ in range(rounds):
        isr = [1] if round_ % 2 == 0 else [1, 2]
        state = await asyncio.to_thread(
            scene.admin.set_partition_state, "t", 0, 1, state.leader_epoch, isr,
            state.controller_epoch, state.zk_version, None)
        await asyncio.to_thread(scene.admin.notify_isr_change, [("t", 0)])
        for broker in scene.brokers.values():
            await until(f"UpdateMetadata with ISR {isr} (round {round_})",
                        lambda b=broker, v=state.zk_version:
                        (b.metadata("t", 0) or {}).get("zk_version") == v)


def test_first_controller_elected_sends_the_whole_state(store_factory: Any) -> None:
    async def body(scene: Scene) -> None:
        await scene.start_brokers(1, 2, 3)
        t_id = await scene.create_topic("t", {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
        controller = await scene.controller(1)
        await until("an active controller", lambda: controller.is_active)
        assert controller.epoch >= 1
        assignment = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
        for p, replicas in assignment.items():  # ISR: the live replicas in assignment order
            state = await until_state(scene.admin, "t", p, lambda s: True, "a state")
            assert (state.leader, state.leader_epoch, state.isr) == (replicas[0], 0, replicas)
            assert state.controller_epoch == controller.epoch
        for broker in scene.brokers.values():
            await until(f"broker {broker.broker_id}'s requests",
                        lambda b=broker: b.of(LEADER_AND_ISR) and b.of(UPDATE_METADATA))
            um = broker.of(UPDATE_METADATA)[0]
            assert um["controller_id"] == 1 and um["controller_epoch"] == controller.epoch
            assert um["broker_epoch"] == broker.epoch
            assert sorted(b["id"] for b in um["live_brokers"]) == [1, 2, 3]
            assert {b["id"]: b["endpoints"][0]["port"] for b in um["live_brokers"]} == \
                {1: 9001, 2: 9002, 3: 9003}
            (topic,) = um["topic_states"]
            assert topic["topic_name"] == "t" and topic["topic_id"] == t_id
            assert [p["leader"] for p in topic["partition_states"]] == [1, 2, 3]
            lai = broker.of(LEADER_AND_ISR)[0]
            assert lai["type"] == 2 and lai["broker_epoch"] == broker.epoch
            assert lai["controller_epoch"] == controller.epoch
            states = lai["topic_states"][0]["partition_states"]
            assert [p["partition_index"] for p in states] == [0, 1, 2]
            assert all(p["is_new"] and p["isr"] == p["replicas"] for p in states)
            assert sorted(b["broker_id"] for b in lai["live_leaders"]) == [1, 2, 3]

        # a topic created while the controller runs: started, is_new to its replicas only
        await scene.create_topic("late", {0: [2, 3], 1: [3, 1]})
        state = await until_state(scene.admin, "late", 1, lambda s: True, "a state")
        assert (state.leader, state.leader_epoch, state.isr) == (3, 0, [3, 1])
        for broker_id, partitions in ((1, [1]), (2, [0]), (3, [0, 1])):
            broker = scene.brokers[broker_id]
            for p in partitions:
                got = await until("LeaderAndIsr for late",
                                  lambda b=broker, p=p: b.leader_and_isr("late", p))
                assert got["is_new"] and got["leader"] == [2, 3][p]
            await until("UpdateMetadata for late", lambda b=broker: b.metadata("late", 1))
        assert scene.brokers[1].leader_and_isr("late", 0) is None
    scene_test(body, store_factory)


def test_broker_death_moves_leadership_and_return_restores_the_preferred_leader(
        store_factory: Any) -> None:
    async def body(scene: Scene) -> None:
        await scene.start_brokers(1, 2, 3)
        await scene.create_topic("t", {0: [1, 2, 3], 1: [2, 1, 3]})
        controller = await scene.controller(3, auto_leader_rebalance_enable=True)
        await until_state(scene.admin, "t", 0, lambda s: s.leader == 1, "leader 1")
        first_epoch = scene.brokers[2].epoch

        await scene.brokers[1].die()
        moved = await until_state(scene.admin, "t", 0, lambda s: s.leader != 1, "a new leader")
        assert (moved.leader, moved.leader_epoch, moved.isr) == (2, 1, [2, 3])
        follower = await until_state(scene.admin, "t", 1, lambda s: s.leader_epoch == 1,
                                     "broker 1 out of the ISR")
        assert (follower.leader, follower.isr) == (2, [2, 3])
        for broker_id in (2, 3):
            broker = scene.brokers[broker_id]
            got = await until("the new leader's LeaderAndIsr",
                              lambda b=broker: b.told("t", 0, 2))
            assert got["leader_epoch"] == 1 and got["isr"] == [2, 3]
            assert got["partition_epoch"] == moved.zk_version
            await until("UpdateMetadata without broker 1",
                        lambda b=broker: b.live_brokers() == [2, 3])
            meta = broker.metadata("t", 0)
            assert meta is not None and meta["offline_replicas"] == [1]
        assert scene.brokers[2].epoch == first_epoch

        # back: a new registration, told everything it hosts; not in the ISR yet
        await scene.brokers[1].register()
        back = scene.brokers[1]
        await until("the returning broker's LeaderAndIsr", lambda: back.leader_and_isr("t", 1))
        assert back.of(LEADER_AND_ISR)[-1]["broker_epoch"] == back.epoch
        assert back.of(LEADER_AND_ISR)[-1]["type"] == 2  # FULL: every partition it hosts
        assert (await state_of(scene.admin, "t", 0)).leader == 2  # type: ignore[union-attr]
        # the leader (here: the test) takes it back into the ISR and says so
        state = await state_of(scene.admin, "t", 0)
        assert state is not None
        await asyncio.to_thread(scene.admin.set_partition_state, "t", 0, 2, state.leader_epoch,
                                [2, 3, 1], state.controller_epoch, state.zk_version, None)
        await asyncio.to_thread(scene.admin.notify_isr_change, [("t", 0)])
        await until("UpdateMetadata with the grown ISR",
                    lambda: (scene.brokers[3].metadata("t", 0) or {}).get("isr") == [2, 3, 1])
        # the periodic preferred-leader check (every second here) moves leadership back
        restored = await until_state(scene.admin, "t", 0, lambda s: s.leader == 1,
                                     "the preferred leader back")
        assert restored.leader_epoch == state.leader_epoch + 1 and restored.isr == [2, 3, 1]
        await until("LeaderAndIsr naming broker 1 leader",
                    lambda: back.told("t", 0, 1))
        assert controller.is_active
    scene_test(body, store_factory)


def test_no_live_isr_member_leaves_the_partition_offline_unless_unclean(
        store_factory: Any) -> None:
    async def body(scene: Scene) -> None:
        await scene.start_brokers(1, 2, 3)
        await scene.create_topic("clean", {0: [1, 2]})
        await scene.create_topic("dirty", {0: [1, 2]},
                                 {"unclean.leader.election.enable": "true"})
        controller = await scene.controller(3)
        for topic in ("clean", "dirty"):
            await until_state(scene.admin, topic, 0, lambda s: s.leader == 1, "leader 1")
        await scene.brokers[2].die()
        for topic in ("clean", "dirty"):
            await until_state(scene.admin, topic, 0, lambda s: s.isr == [1], "ISR [1]")
        await scene.brokers[1].die()
        for topic in ("clean", "dirty"):
            offline = await until_state(scene.admin, topic, 0, lambda s: s.leader == -1,
                                        "no leader")
            assert offline.isr == [1] and offline.leader_epoch == 2  # the ISR keeps its last

        await scene.brokers[2].register()  # live, but was not in the ISR
        dirty = await until_state(scene.admin, "dirty", 0, lambda s: s.leader == 2,
                                  "an unclean leader")
        assert dirty.isr == [2] and dirty.leader_epoch == 3
        await until("broker 2 told it leads dirty",
                    lambda: scene.brokers[2].told("dirty", 0, 2))
        clean = await state_of(scene.admin, "clean", 0)
        assert clean is not None and (clean.leader, clean.isr, clean.leader_epoch) == (-1, [1], 2)

        await scene.brokers[1].register()  # the last ISR member: it leads again
        clean = await until_state(scene.admin, "clean", 0, lambda s: s.leader == 1, "leader 1")
        assert clean.isr == [1] and clean.leader_epoch == 3
        assert controller.is_active
    scene_test(body, store_factory)


def test_a_broker_that_registers_again_loses_leadership_first(store_factory: Any) -> None:
    async def body(scene: Scene) -> None:
        await scene.start_brokers(1, 2)
        await scene.create_topic("t", {0: [1, 2]})
        await scene.controller(2)
        await until_state(scene.admin, "t", 0, lambda s: s.leader == 1, "leader 1")
        broker = scene.brokers[1]
        old_epoch = broker.epoch
        # a new session registers as soon as the old one's registration goes: the
        # controller may see both in one broker change (a bounce) or one after the other,
        # and either way the old leader must not stay leader with its old epoch's state
        old_store = broker.store
        assert old_store is not None
        registering = asyncio.ensure_future(broker.register())
        await asyncio.sleep(0.1)
        await asyncio.to_thread(old_store.stop)
        await registering
        assert broker.epoch != old_epoch
        state = await until_state(scene.admin, "t", 0, lambda s: s.leader == 2,
                                  "leadership moved off the bounced broker")
        assert state.isr == [2]
        await until("LeaderAndIsr for the new registration",
                    lambda: any(b["broker_epoch"] == broker.epoch
                                for b in broker.of(LEADER_AND_ISR)))
    scene_test(body, store_factory)


def test_second_controller_takes_over_with_a_higher_epoch(store_factory: Any) -> None:
    async def body(scene: Scene) -> None:
        first, second, _ = await two_controllers(scene)
        assert not second.is_active
        epoch = first.epoch

        await asyncio.to_thread(first.store_for_test.stop)  # type: ignore[attr-defined]
        await until("the second controller", lambda: second.is_active)
        assert second.epoch > epoch
        await until("the first resigned", lambda: not first.is_active)
        controller_id = await asyncio.to_thread(scene.admin.controller_id)
        assert controller_id == 2
        broker = scene.brokers[2]
        await until("the new epoch's UpdateMetadata",
                    lambda: any(b["controller_epoch"] == second.epoch
                                for b in broker.of(UPDATE_METADATA)))
        # the new controller acts: broker 1 dies, broker 2 leads
        await scene.brokers[1].die()
        state = await until_state(scene.admin, "t", 0, lambda s: s.leader == 2, "leader 2")
        assert state.controller_epoch == second.epoch
    scene_test(body, store_factory)


def test_a_fenced_controller_cannot_write_and_resigns(store_factory: Any) -> None:
    async def body(scene: Scene) -> None:
        await scene.start_brokers(1, 2)
        await scene.create_topic("t", {0: [1, 2]})
        controller = await scene.controller(2)
        before = await until_state(scene.admin, "t", 0, lambda s: s.leader == 1, "leader 1")
        # another controller's election moves /controller_epoch on (as a successor would)
        newer, _ = await asyncio.to_thread(scene.admin.increment_controller_epoch)
        assert newer > controller.epoch
        await scene.brokers[1].die()  # the fenced controller tries to move leadership
        await until("the fenced controller resigned", lambda: not controller.is_active)
        after = await state_of(scene.admin, "t", 0)
        assert after == before  # its write was refused
        sent = len(scene.brokers[2].requests)
        await asyncio.sleep(0.2)
        assert len(scene.brokers[2].requests) == sent  # and it sends nothing more
    scene_test(body, store_factory)


def test_topic_deletion(store_factory: Any) -> None:
    async def body(scene: Scene) -> None:
        await scene.start_brokers(1, 2, 3)
        t_id = await scene.create_topic("gone", {0: [1, 2], 1: [2, 3]})
        await scene.create_topic("kept", {0: [3, 1]})
        await scene.controller(1)
        await until_state(scene.admin, "gone", 1, lambda s: s.leader == 2, "leader 2")
        await asyncio.to_thread(scene.admin.request_topic_deletion, "gone")
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while await asyncio.to_thread(scene.admin.topic, "gone") is not None:
            assert asyncio.get_running_loop().time() < deadline, "topic not deleted"
            await asyncio.sleep(0.02)
        for broker_id, partitions in ((1, [0]), (2, [0, 1]), (3, [1])):
            broker = scene.brokers[broker_id]
            stops = await until("StopReplica", lambda b=broker: b.of(STOP_REPLICA))
            (topic,) = stops[0]["topic_states"]
            assert topic["topic_name"] == "gone"
            assert [p["partition_index"] for p in topic["partition_states"]] == partitions
            assert all(p["delete_partition"] for p in topic["partition_states"])
            meta = await until("UpdateMetadata marking it deleted",
                               lambda b=broker: (b.metadata("gone", 0) or {}).get("leader") == -2)
            assert meta
            last = broker.of(UPDATE_METADATA)[-1]
            assert [t["topic_id"] for t in last["topic_states"]] == [t_id]
        assert await asyncio.to_thread(scene.admin.topic_names) == ["kept"]
        assert await asyncio.to_thread(scene.admin.partition_states, "gone") == {}
    scene_test(body, store_factory)


def test_elect_preferred_on_demand(store_factory: Any) -> None:
    async def body(scene: Scene) -> None:
        await scene.start_brokers(1, 2)
        await scene.create_topic("t", {0: [1, 2], 1: [2, 1]})
        controller = await scene.controller(1)
        await until_state(scene.admin, "t", 0, lambda s: s.leader == 1, "leader 1")
        state = await state_of(scene.admin, "t", 0)
        assert state is not None
        # leadership moved away by hand (as after a failover), ISR complete
        await asyncio.to_thread(scene.admin.set_partition_state, "t", 0, 2, state.leader_epoch + 1,
                                [1, 2], state.controller_epoch, state.zk_version, None)
        await asyncio.to_thread(scene.admin.notify_isr_change, [("t", 0)])
        await until("the controller saw the change",
                    lambda: (scene.brokers[1].metadata("t", 0) or {}).get("leader") == 2)
        assert codes(await controller.elect_leaders(PREFERRED, [("t", 1)])) == {
            ("t", 1): ELECTION_NOT_NEEDED}
        assert codes(await controller.elect_leaders(PREFERRED)) == {
            ("t", 0): NONE, ("t", 1): ELECTION_NOT_NEEDED}
        got = await state_of(scene.admin, "t", 0)
        assert got is not None and (got.leader, got.leader_epoch) == (1, state.leader_epoch + 2)
        await until("LeaderAndIsr naming the preferred leader",
                    lambda: scene.brokers[2].told("t", 0, 1))
        assert codes(await controller.elect_leaders(PREFERRED)) == {
            ("t", 0): ELECTION_NOT_NEEDED, ("t", 1): ELECTION_NOT_NEEDED}
    scene_test(body, store_factory)


def test_election_answers_per_partition(store_factory: Any) -> None:
    """Unknown partitions, a preferred replica outside the ISR, an unclean election of an
    offline partition (unclean.leader.election.enable is false) and of one led by a live
    broker, and a partition with no live replica at all."""
    async def body(scene: Scene) -> None:
        await scene.start_brokers(1, 2, 3)
        await scene.create_topic("t", {0: [1, 2], 1: [3]})
        controller = await scene.controller(1)
        state = await until_state(scene.admin, "t", 0, lambda s: s.leader == 1, "leader 1")
        await until_state(scene.admin, "t", 1, lambda s: s.leader == 3, "leader 3")
        assert await controller.elect_leaders(PREFERRED, [("t", 5), ("nope", 0)]) == {
            ("t", 5): (UNKNOWN_TOPIC_OR_PARTITION, "No such partition as t-5"),
            ("nope", 0): (UNKNOWN_TOPIC_OR_PARTITION, "No such topic as nope")}
        # broker 2 left the ISR, then the leader (1) dies: t-0 is offline, ISR [1]
        await asyncio.to_thread(scene.admin.set_partition_state, "t", 0, 1, state.leader_epoch,
                                [1], state.controller_epoch, state.zk_version, None)
        await asyncio.to_thread(scene.admin.notify_isr_change, [("t", 0)])
        await until("the controller saw the ISR shrink",
                    lambda: (scene.brokers[2].metadata("t", 0) or {}).get("isr") == [1])
        assert codes(await controller.elect_leaders(UNCLEAN, [("t", 0)])) == {
            ("t", 0): ELECTION_NOT_NEEDED}  # its leader is live
        await scene.brokers[1].die()
        offline = await until_state(scene.admin, "t", 0, lambda s: s.leader == -1, "offline")
        assert offline.isr == [1]
        assert await controller.elect_leaders(PREFERRED, [("t", 0)]) == {
            ("t", 0): (PREFERRED_LEADER_NOT_AVAILABLE, "The preferred leader was not available.")}
        assert codes(await controller.elect_leaders(UNCLEAN, [("t", 0)])) == {("t", 0): NONE}
        got = await state_of(scene.admin, "t", 0)
        assert got is not None and (got.leader, got.isr) == (2, [2])
        await until("LeaderAndIsr naming broker 2", lambda: scene.brokers[2].told("t", 0, 2))
        # no live replica left
        await scene.brokers[3].die()
        await until_state(scene.admin, "t", 1, lambda s: s.leader == -1, "t-1 offline")
        assert await controller.elect_leaders(UNCLEAN, [("t", 1)]) == {
            ("t", 1): (ELIGIBLE_LEADERS_NOT_AVAILABLE,
                       "Eligible topic partition leaders are not available.")}
    scene_test(body, store_factory)


def test_an_inactive_controller_does_not_elect(store_factory: Any) -> None:
    async def body(scene: Scene) -> None:
        first, second, _state = await two_controllers(scene)
        assert await second.elect_leaders(PREFERRED) is None
        assert codes(await first.elect_leaders(PREFERRED)) == {("t", 0): ELECTION_NOT_NEEDED}
    scene_test(body, store_factory)


def test_new_partitions_of_an_existing_topic(store_factory: Any) -> None:
    async def body(scene: Scene) -> None:
        await scene.start_brokers(1, 2, 3)
        t_id = await scene.create_topic("t", {0: [1, 2]})
        await scene.controller(1)
        await until_state(scene.admin, "t", 0, lambda s: s.leader == 1, "leader 1")
        # CreatePartitions: the assignment grows (broker 3 hosts only the new partition)
        await asyncio.to_thread(scene.admin.set_assignment, "t", t_id,
                                {0: [1, 2], 1: [2, 3], 2: [3, 1]})
        for p, replicas in ((1, [2, 3]), (2, [3, 1])):
            state = await until_state(scene.admin, "t", p, lambda s: True, "a state")
            assert (state.leader, state.leader_epoch, state.isr) == (replicas[0], 0, replicas)
        three = scene.brokers[3]
        for p in (1, 2):
            got = await until(f"LeaderAndIsr for t-{p}", lambda p=p: three.leader_and_isr("t", p))
            assert got["is_new"]
        assert three.leader_and_isr("t", 0) is None
        for broker in scene.brokers.values():
            await until("UpdateMetadata with the new partitions",
                        lambda b=broker: b.metadata("t", 2))
        old = await state_of(scene.admin, "t", 0)
        assert old is not None and old.leader_epoch == 0  # untouched
    scene_test(body, store_factory)


def test_isr_changes_reach_every_broker_whichever_controller_reads_first(
        store_factory: Any) -> None:
    # Every broker runs a Controller; notifications are consumed by their reader, so the
    # ones that were never elected must not read them.
    async def body(scene: Scene) -> None:
        active, waiting, state = await two_controllers(scene)
        others = [waiting, await scene.controller(2)]
        await isr_rounds(scene, state, 8)
        assert active.is_active and not any(c.is_active for c in others)
    scene_test(body, store_factory)


def test_an_isr_change_naming_a_dead_broker_is_repaired(store_factory: Any) -> None:
    # The leader grew the ISR just before the new member died: the broker change went by
    # with the older ISR; the notification that follows must not leave the dead one in.
    async def body(scene: Scene) -> None:
        await scene.start_brokers(1, 2, 3)
        await scene.create_topic("t", {0: [1, 2, 3]})
        await scene.controller(1)
        await until_state(scene.admin, "t", 0, lambda s: s.leader == 1, "leader 1")
        await scene.brokers[3].die()
        state = await until_state(scene.admin, "t", 0, lambda s: s.isr == [1, 2], "ISR [1, 2]")
        late = await asyncio.to_thread(
            scene.admin.set_partition_state, "t", 0, 1, state.leader_epoch, [1, 2, 3],
            state.controller_epoch, state.zk_version, None)
        await asyncio.to_thread(scene.admin.notify_isr_change, [("t", 0)])
        repaired = await until_state(scene.admin, "t", 0, lambda s: s.zk_version > late.zk_version,
                                     "the dead broker out of the ISR again")
        assert (repaired.leader, repaired.isr) == (1, [1, 2])
        assert repaired.leader_epoch == state.leader_epoch + 1
        await until("LeaderAndIsr with the repaired ISR",
                    lambda: (scene.brokers[2].leader_and_isr("t", 0) or {}).get("isr") == [1, 2]
                    and scene.brokers[2].leader_and_isr("t", 0)["leader_epoch"]  # type: ignore[index]
                    == repaired.leader_epoch)
    scene_test(body, store_factory)


def test_a_request_not_answered_in_time_is_sent_again(store_factory: Any) -> None:
    async def body(scene: Scene) -> None:
        await scene.start_brokers(1, 2)
        slow = scene.brokers[2]
        release = asyncio.Event()
        answer = slow._handle

        async def first_one_hangs(api_key: int, api_version: int, request: dict) -> dict:
            if not slow.requests:
                slow.requests.append((api_key, request))
                await release.wait()  # past controller.socket.timeout.ms
                return codec.response_defaults(api_key, api_version)
            return await answer(api_key, api_version, request)

        slow.server.handler = first_one_hangs
        await scene.create_topic("t", {0: [1, 2]})
        CountingClient.sent.clear()
        await scene.controller(1, client=CountingClient, controller_socket_timeout_ms=200)
        await until("the first request", lambda: slow.requests)
        await until("the copy sent again", lambda: CountingClient.sent.get(2, 0) >= 2)
        release.set()
        await until("both copies of the first request and the UpdateMetadata after it",
                    lambda: len(slow.requests) >= 3 and slow.of(UPDATE_METADATA))
        first = slow.requests[0]
        assert first[0] == LEADER_AND_ISR and slow.requests[1] == first  # the same again
        assert first[1]["broker_epoch"] == slow.epoch
        assert slow.requests[2][0] == UPDATE_METADATA  # in order: only after the answer
    scene_test(body, store_factory)


def test_a_replaced_controller_hands_isr_changes_to_its_successor(
        store_factory: Any, zk_connect: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controller_module, "ISR_HAND_BACK_S", 0.2)

    async def body(scene: Scene) -> None:
        old, new, state = await two_controllers(scene)
        # /controller is deleted while the old one's session lives on (an operator moving
        # the role): both run again, the other wins (the old one is made to lose), the old
        # one keeps its ISR change watch
        old.store_for_test.try_become_controller = lambda broker_id: False  # type: ignore
        raw = KazooClient(hosts=zk_connect)
        await asyncio.to_thread(raw.start, 30)
        try:
            await asyncio.to_thread(raw.delete, "/controller")
        finally:
            await asyncio.to_thread(raw.stop)
            await asyncio.to_thread(raw.close)
        await until("the successor", lambda: new.is_active and not old.is_active)
        assert new.epoch > old.epoch
        await isr_rounds(scene, state, 6)
    scene_test(body, store_factory)

"""Topic administration in cluster mode: any broker writes the change to ZooKeeper, the
controller carries it out (Kafka's AdminZkClient does the same).

- create: checked like a single node's (name, counts, configs), the replication factor
  against the live brokers, replicas placed round-robin (``placement.assign``, on
  distinct racks when every live broker has a ``broker.rack``), then
  ``/brokers/topics/<t>`` and ``/config/topics/<t>`` are written; the controller sees the
  topic, elects leaders and tells every broker. CreateTopics answers once this broker's
  metadata shows a leader for every partition (REQUEST_TIMED_OUT after the request's
  timeout: the topic exists, its leaders are not known here yet).
- delete: ``/admin/delete_topics/<t>``; the controller stops the replicas and removes it.
- new partitions: the assignment grows; the controller starts them.
- configs: ``/config/topics/<t>`` and a change notification every broker applies.
- leader elections (ElectLeaders): the controller elects (``Controller.elect_leaders``),
  there being no znode that carries an answer per partition: this broker's own controller
  when it is the active one, else the active one's over the control channel (an
  ElectLeaders v2 request to the address its registration publishes, answered with every
  partition's outcome, or NOT_CONTROLLER when it no longer is; then the controller named
  in ZooKeeper is asked again, until the request's timeout). The answer waits until this
  broker's metadata shows the leaders elected (as Kafka's ZooKeeper mode, whose
  DelayedElectLeader waits for its metadata cache), REQUEST_TIMED_OUT for those it does
  not show in time. ``ask_controller`` is that hand-over for any request the controller
  serves (ControlledShutdown too, ``cluster.controlled_shutdown``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pybroker.broker.topic_manager import check_partition_limit
from pybroker.errors import (
    ErrorCode,
    InvalidPartitionsError,
    KafkaError,
    UnknownTopicOrPartitionError,
)
from pybroker.metadata.interface import PREFERRED_ELECTION, ElectionResult, led_as_elected
from pybroker.net.protocol.typed import ElectLeadersRequest, ElectLeadersResponse

if TYPE_CHECKING:
    from pybroker.cluster.controller import Controller
    from pybroker.cluster.node import ClusterNode

log = logging.getLogger("pybroker.cluster.admin")

DEFAULT_WAIT_S = 30.0
ELECT_LEADERS, ELECT_LEADERS_VERSION = 43, 2
CONTROLLER_RETRY_S = 0.1  # pause before asking the controller again (none, or it moved)
# While a request waits on another broker's controller, how often ZooKeeper is asked
# whether it still is the controller: one that stopped answers nothing on the channel
CONTROLLER_CHECK_S = 0.5
ELECTION_TIMED_OUT = ElectionResult(ErrorCode.REQUEST_TIMED_OUT,
                                    "The election did not show in the metadata in time.")
TP = tuple[str, int]


def _live_ids(node: ClusterNode) -> list[int]:
    ids = sorted(node.metadata.brokers)
    return ids or [node.broker.broker_id]


async def check_new_topic(node: ClusterNode, name: str, partitions: int, replication_factor: int,
                          configs: dict[str, str | None]) -> tuple[int, int, dict[str, str]]:
    """(partitions, replication factor, overrides), defaults resolved, or a KafkaError."""
    exists = await asyncio.to_thread(node.store.topic, name) is not None
    return node.broker.topics.check_new(name, partitions, replication_factor, configs,
                                        live_brokers=len(_live_ids(node)), exists=exists)


async def create_topic(node: ClusterNode, name: str, partitions: int, replication_factor: int,
                       configs: dict[str, str | None],
                       assignment: dict[int, list[int]] | None = None,
                       wait_s: float = DEFAULT_WAIT_S) -> tuple[uuid.UUID, int, int, dict]:
    """Create ``name``; returns (topic id, partitions, replication factor, overrides)."""
    from pybroker.cluster.placement import assign

    if assignment is not None:
        partitions, replication_factor = len(assignment), len(assignment[0])
    partitions, replication_factor, overrides = await check_new_topic(
        node, name, partitions, replication_factor, configs)
    if assignment is None:
        assignment = assign(_live_ids(node), partitions, replication_factor,
                            racks=node.metadata.racks)
    topic_id = uuid.uuid4()
    await asyncio.to_thread(node.store.create_topic, name, topic_id, assignment, overrides)
    await wait_for_leaders(node, name, partitions, wait_s)
    return topic_id, partitions, replication_factor, overrides


async def wait_for_leaders(node: ClusterNode, name: str, partitions: int,
                           wait_s: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while not node.metadata.has_leaders(name, partitions):
        if loop.time() >= deadline:
            raise KafkaError(f"Topic {name} was created but its leaders are not known yet",
                             ErrorCode.REQUEST_TIMED_OUT)
        await asyncio.sleep(0.02)


async def delete_topic(node: ClusterNode, name: str) -> None:
    store = node.store
    if await asyncio.to_thread(store.topic, name) is None:
        raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
    await asyncio.to_thread(store.request_topic_deletion, name)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEFAULT_WAIT_S
    while node.metadata.topic(name) is not None and loop.time() < deadline:
        await asyncio.sleep(0.02)


async def add_partitions(node: ClusterNode, name: str, total: int) -> None:
    from pybroker.cluster.placement import arranged, assign

    store = node.store
    current = await asyncio.to_thread(store.topic, name)
    if current is None:
        raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
    count = len(current.partitions)
    if total <= count:
        raise InvalidPartitionsError(
            f"Topic currently has {count} partitions, {total} would not be an increase.")
    check_partition_limit(total)
    replication = len(current.partitions[0])
    live = arranged(_live_ids(node), node.metadata.racks)
    first_leader = current.partitions[0][0]
    # Kafka continues the leaders' round-robin from partition 0's leader
    start = live.index(first_leader) if first_leader in live else None
    added = assign(live, total - count, replication, start_index=start, start_partition=count,
                   racks=node.metadata.racks)
    assignment = {**current.partitions, **added}  # ``added`` is keyed from ``count`` on
    await asyncio.to_thread(store.set_assignment, name, current.topic_id, assignment)
    await wait_for_leaders(node, name, total, DEFAULT_WAIT_S)


async def elect_leaders(node: ClusterNode, election_type: int, partitions: list[TP] | None,
                        timeout_s: float) -> dict[TP, ElectionResult]:
    """``Metadata.elect_leaders`` in a cluster (the module docstring says how); a
    KafkaError: REQUEST_TIMED_OUT when no controller answered within ``timeout_s``, the
    controller's error code when it failed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while (results := await _elect_at_controller(node, election_type, partitions,
                                                 deadline - loop.time())) is None:
        if loop.time() >= deadline:
            raise KafkaError("No controller answered the election in time",
                             ErrorCode.REQUEST_TIMED_OUT)
        await asyncio.sleep(CONTROLLER_RETRY_S)
    cache = node.metadata
    elected = [tp for tp, result in results.items() if result.code == ErrorCode.NONE]

    def not_shown() -> list[TP]:
        return [tp for tp in elected if (info := cache.partition(*tp)) is None
                or not led_as_elected(election_type, info.leader, info.replicas, cache.brokers)]

    while (pending := not_shown()) and loop.time() < deadline:
        await asyncio.sleep(0.02)
    return {**results, **dict.fromkeys(pending, ELECTION_TIMED_OUT)}


async def _elect_at_controller(node: ClusterNode, election_type: int,
                               partitions: list[TP] | None, timeout_s: float
                               ) -> dict[TP, ElectionResult] | None:
    """The active controller's election; None when there is none to ask, or the one
    asked is no longer it or did not answer in ``timeout_s``; its error code as a
    KafkaError when it failed."""
    request: ElectLeadersRequest = {
        "election_type": election_type, "timeout_ms": int(max(timeout_s, 0) * 1000),
        "topic_partitions": None if partitions is None else [
            {"topic": topic, "partitions": indexes}
            for topic, indexes in _by_topic(partitions).items()]}
    answer = await ask_controller(node, ELECT_LEADERS, ELECT_LEADERS_VERSION, dict(request),
                                  serve_elect_leaders, timeout_s)
    if answer is None:
        return None
    if answer["error_code"] != ErrorCode.NONE:  # its failure (logged there)
        raise KafkaError("The controller failed the election", answer["error_code"])
    return {(t["topic"], p["partition_id"]): ElectionResult(p["error_code"], p["error_message"])
            for t in answer["replica_election_results"] for p in t["partition_result"]}


async def ask_controller(node: ClusterNode, api_key: int, api_version: int, request: dict,
                         serve: Callable[[Controller | None, Any], Awaitable[Any]],
                         timeout_s: float) -> dict | None:
    """The active controller's answer to ``request``: ``serve`` (what the control channel
    serves it with at the controller) on this broker's own controller when it is the
    active one, else the request over the control channel to the controller ZooKeeper
    names. None when there is none to ask, the one asked is no longer it (NOT_CONTROLLER,
    or ZooKeeper names another while it is asked) or it did not answer in ``timeout_s``."""
    from pybroker.cluster.channel import ControlClient

    answer: dict | None
    local = node.controller
    if local is not None and local.is_active:
        answer = dict(await serve(local, request))
    else:
        controller_id = await asyncio.to_thread(node.store.controller_id)
        if controller_id is None or controller_id == node.broker.broker_id:
            return None  # none yet, or ours is still taking over
        info = (await asyncio.to_thread(node.store.brokers)).get(controller_id)
        if info is None or timeout_s <= 0:
            return None
        try:
            client = ControlClient(controller_id, info.control)
        except Exception as exc:  # a registration without a usable control address
            log.warning("no control channel to controller %d (%r): %s", controller_id,
                        info.control, exc)
            return None
        try:
            answer = await _unless_controller_moves(
                node, controller_id, client.request(api_key, api_version, request, timeout_s))
        except (TimeoutError, ConnectionError):
            return None
        finally:
            client.close()
    if answer is None or answer["error_code"] == ErrorCode.NOT_CONTROLLER:  # it moved
        return None
    return answer


async def _unless_controller_moves(node: ClusterNode, controller_id: int,
                                   asked: Awaitable[dict]) -> dict | None:
    """The answer ``asked`` gets from controller ``controller_id``, or None as soon as
    ZooKeeper names another controller or none. A controller whose broker stopped or
    hangs answers nothing over the control channel (zmq queues the request), so without
    this the request would wait out ``controller.socket.timeout.ms`` for a controller that
    is gone; Kafka's client learns it from the connection closing."""
    waiting = asyncio.ensure_future(asked)
    try:
        while True:
            done, _ = await asyncio.wait((waiting,), timeout=CONTROLLER_CHECK_S)
            if done:
                return waiting.result()
            try:
                current = await asyncio.to_thread(node.store.controller_id)
            except Exception as exc:  # ZooKeeper unreachable: it cannot say, keep waiting
                log.debug("cannot check the controller: %s", exc)
                continue
            if current != controller_id:
                return None
    finally:
        waiting.cancel()


async def serve_elect_leaders(controller: Controller | None, request: ElectLeadersRequest
                              ) -> ElectLeadersResponse:
    """Another broker's ElectLeaders at this broker's controller (over the control
    channel): every partition's outcome, or NOT_CONTROLLER when it is not the active one."""
    named = request["topic_partitions"]
    partitions = None if named is None else [(t["topic"], p) for t in named
                                             for p in t["partitions"]]
    results = None if controller is None else await controller.elect_leaders(
        request.get("election_type", PREFERRED_ELECTION), partitions)
    if results is None:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NOT_CONTROLLER,
                "replica_election_results": []}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "replica_election_results": [
        {"topic": topic, "partition_result": [
            {"partition_id": p, "error_code": results[(topic, p)].code,
             "error_message": results[(topic, p)].message} for p in indexes]}
        for topic, indexes in _by_topic(list(results)).items()]}


def _by_topic(partitions: list[TP]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = defaultdict(list)
    for topic, index in partitions:
        grouped[topic].append(index)
    return grouped

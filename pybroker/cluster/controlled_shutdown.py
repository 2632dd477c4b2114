"""Controlled shutdown (Kafka's ``controlled.shutdown.enable``): a stopping broker hands
the partitions it leads to other in-sync replicas before it closes its listeners and ends
its ZooKeeper session, so none of them goes offline with it and clients writing to them
move on while it still answers.

The broker (``ClusterNode.controlled_shutdown``, the first step of ``Broker.shutdown``,
while every listener still serves) asks the active controller with ControlledShutdown v3
(its broker id and broker epoch) through ``admin.ask_controller``: its own controller
when it is the active one, else over the control channel. The controller
(``Controller.controlled_shutdown``, one event of its queue) moves leaderships and ISRs
and answers with the partitions it could not move (``remaining_partitions``: no other
live ISR member). Until that is empty the broker asks again (each attempt waits at most
``controller.socket.timeout.ms`` for an answer, and gives up on a controller as soon as
ZooKeeper names another: one that hangs or stopped answers nothing),
``controlled.shutdown.max.retries`` times in all, ``controlled.shutdown.retry.backoff.ms``
apart (Kafka's ``KafkaServer.controlledShutdown``), then shuts down anyway, logging what
it still leads.

Once answered, it waits (at most ``controller.socket.timeout.ms``) until the controller's
LeaderAndIsr has made it a follower of the partitions moved: from then on it answers
their producers and consumers NOT_LEADER_OR_FOLLOWER, and they go to the new leaders,
rather than finding the listener closed under them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from pybroker.cluster import admin
from pybroker.errors import ErrorCode
from pybroker.net.protocol.typed import ControlledShutdownRequest, ControlledShutdownResponse

if TYPE_CHECKING:
    from pybroker.cluster.controller import Controller
    from pybroker.cluster.node import ClusterNode

log = logging.getLogger("pybroker.cluster")

CONTROLLED_SHUTDOWN, CONTROLLED_SHUTDOWN_VERSION = 7, 3
LEADERSHIP_POLL_S = 0.02  # how often the wait for the controller's LeaderAndIsr looks
TP = tuple[str, int]


async def controlled_shutdown(node: ClusterNode) -> list[TP]:
    """Hand this broker's leaderships over (the module docstring says how); returns the
    partitions it still leads (empty: every replicated partition moved)."""
    config = node.config
    attempts = config["controlled.shutdown.max.retries"]
    timeout_s = config["controller.socket.timeout.ms"] / 1000
    request: ControlledShutdownRequest = {"broker_id": node.broker.broker_id,
                                          "broker_epoch": node.replicas.broker_epoch}
    remaining: list[TP] | None = None  # None: no controller has answered
    for attempt in range(1, attempts + 1):
        answer = None
        try:  # ZooKeeper unreachable, or a controller busy with a long event
            async with asyncio.timeout(timeout_s):
                answer = await admin.ask_controller(
                    node, CONTROLLED_SHUTDOWN, CONTROLLED_SHUTDOWN_VERSION, dict(request),
                    serve_controlled_shutdown, timeout_s)
        except TimeoutError:
            pass
        if answer is None:
            log.warning("controlled shutdown, attempt %d of %d: no controller answered",
                        attempt, attempts)
        elif answer["error_code"] != ErrorCode.NONE:
            log.warning("controlled shutdown, attempt %d of %d: the controller answered %s",
                        attempt, attempts, ErrorCode(answer["error_code"]).name)
        else:
            remaining = sorted((p["topic_name"], p["partition_index"])
                               for p in answer["remaining_partitions"])
            if not remaining:
                log.info("controlled shutdown: every leadership moved (attempt %d)", attempt)
                break
            log.warning("controlled shutdown, attempt %d of %d: no other in-sync replica "
                        "can lead %s", attempt, attempts, _names(remaining))
        if attempt < attempts:
            await asyncio.sleep(config["controlled.shutdown.retry.backoff.ms"] / 1000)
    if remaining is not None:
        await _until_moved(node, set(remaining), timeout_s)
    still_led = sorted(_replicated_leaderships(node))
    if still_led:
        log.warning("controlled shutdown failed after %d attempts; shutting down anyway, "
                    "still leading %s", attempts, _names(still_led))
    return still_led


async def serve_controlled_shutdown(controller: Controller | None,
                                    request: ControlledShutdownRequest
                                    ) -> ControlledShutdownResponse:
    """A stopping broker's ControlledShutdown at this broker's controller (the control
    channel's, or the broker's own): NOT_CONTROLLER when it is not the active one."""
    outcome = None if controller is None else await controller.controlled_shutdown(
        request["broker_id"], request.get("broker_epoch", -1))
    if outcome is None:
        return {"error_code": ErrorCode.NOT_CONTROLLER, "remaining_partitions": []}
    code, remaining = outcome
    return {"error_code": code, "remaining_partitions": [
        {"topic_name": topic, "partition_index": index} for topic, index in remaining]}


async def _until_moved(node: ClusterNode, still_led: set[TP], timeout_s: float) -> None:
    """Until this broker leads only ``still_led`` of its replicated partitions (the
    controller's LeaderAndIsr applied), at most ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while _replicated_leaderships(node) - still_led and loop.time() < deadline:
        await asyncio.sleep(LEADERSHIP_POLL_S)


def _replicated_leaderships(node: ClusterNode) -> set[TP]:
    return {(p.topic, p.index) for p in node.replicas.leaders() if len(p.replicas) > 1}


def _names(partitions: list[TP]) -> str:
    return ", ".join(f"{topic}-{index}" for topic, index in partitions)

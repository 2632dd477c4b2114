"""A broker handing ElectLeaders to the controller (``cluster.admin.elect_leaders``),
against a real ZooKeeper and a stand-in controller: a real ``ControlServer`` registered
as broker 1 and holding ``/controller``, answering as the test says. The broker asking is
the smallest thing ``admin`` reads of a ``ClusterNode``: its store, its own (inactive)
controller, its id and its metadata cache."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from pybroker.cluster import admin
from pybroker.cluster.channel import ControlServer
from pybroker.cluster.metadata_cache import MetadataCache
from pybroker.cluster.zk_store import ClusterStore
from pybroker.errors import ErrorCode, KafkaError
from pybroker.metadata.interface import UNCLEAN_ELECTION

PARTITIONS = [("t", 0), ("t", 1), ("u", 0)]


def answer(code: int, results: dict[tuple[str, int], int] | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "replica_election_results": [
        {"topic": t, "partition_result": [{"partition_id": p, "error_code": c,
                                           "error_message": None}]}
        for (t, p), c in (results or {}).items()]}


def hand_over(store_factory: Callable[..., ClusterStore], answers: list[dict],
              controller: bool = True, timeout_s: float = 5.0) -> tuple[Any, list[dict]]:
    """``admin.elect_leaders`` of PARTITIONS (unclean) from broker 2; the stand-in answers
    ``answers`` in turn (the last one again and again). Returns the outcome (or the
    KafkaError raised) and the requests the stand-in got."""
    got: list[dict] = []

    async def serve(api_key: int, api_version: int, body: dict) -> dict:
        assert (api_key, api_version) == (admin.ELECT_LEADERS, admin.ELECT_LEADERS_VERSION)
        got.append(body)
        return answers[min(len(got), len(answers)) - 1]

    async def main() -> Any:
        server = ControlServer("127.0.0.1", 0, serve)
        host, port = server.start()
        stand_in = store_factory()
        await asyncio.to_thread(stand_in.register_broker, 1, "127.0.0.1", 9001,
                                f"{host}:{port}")
        if controller:
            assert await asyncio.to_thread(stand_in.try_become_controller, 1)
        node = SimpleNamespace(store=store_factory(), controller=None,
                               broker=SimpleNamespace(broker_id=2), metadata=MetadataCache(2))
        try:
            return await admin.elect_leaders(node, UNCLEAN_ELECTION, PARTITIONS, timeout_s)
        except KafkaError as exc:
            return exc
        finally:
            await server.close()

    return asyncio.run(asyncio.wait_for(main(), 60)), got


def test_asked_again_when_the_controller_moved(store_factory):
    results = {("t", 0): ErrorCode.ELECTION_NOT_NEEDED, ("t", 1): ErrorCode.NONE,
               ("u", 0): ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE}
    outcome, got = hand_over(store_factory, [answer(ErrorCode.NOT_CONTROLLER),
                                             answer(ErrorCode.NONE, results)], timeout_s=1.0)
    assert len(got) == 2
    assert got[0]["election_type"] == UNCLEAN_ELECTION
    assert got[0]["topic_partitions"] == [{"topic": "t", "partitions": [0, 1]},
                                          {"topic": "u", "partitions": [0]}]
    # t-1 was elected, but this broker's metadata never showed it: timed out, as Kafka's
    # ZooKeeper mode answers
    assert {tp: r.code for tp, r in outcome.items()} == {
        **results, ("t", 1): ErrorCode.REQUEST_TIMED_OUT}


def test_a_failed_election_is_the_controllers_error(store_factory):
    outcome, got = hand_over(store_factory, [answer(ErrorCode.UNKNOWN_SERVER_ERROR)])
    assert len(got) == 1
    assert isinstance(outcome, KafkaError) and outcome.code == ErrorCode.UNKNOWN_SERVER_ERROR


@pytest.mark.parametrize("controller", [True, False], ids=["always moving", "none"])
def test_no_controller_answering_is_request_timed_out(store_factory, controller):
    outcome, _got = hand_over(store_factory, [answer(ErrorCode.NOT_CONTROLLER)],
                              controller=controller, timeout_s=0.5)
    assert isinstance(outcome, KafkaError) and outcome.code == ErrorCode.REQUEST_TIMED_OUT

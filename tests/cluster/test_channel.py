"""The control channel over real zmq sockets on loopback: framing, order, timeouts."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import zmq
import zmq.asyncio

from pybroker.cluster.channel import ControlClient, ControlServer
from pybroker.errors import ErrorCode

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6


def run(test: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(test(), 60))


def update_metadata(partitions: int = 1, epoch: int = 3) -> dict:
    topic_id = uuid.uuid4()
    return {
        "controller_id": 1, "controller_epoch": epoch, "broker_epoch": 77,
        "topic_states": [{"topic_name": "t", "topic_id": topic_id, "partition_states": [
            {"partition_index": p, "controller_epoch": epoch, "leader": 2, "leader_epoch": 5,
             "isr": [2, 3], "zk_version": 9, "replicas": [2, 3, 1], "offline_replicas": [1]}
            for p in range(partitions)]}],
        "live_brokers": [{"id": 2, "endpoints": [{"port": 9092, "host": "h2", "listener": "PLAINTEXT",
                                                  "security_protocol": 0}], "rack": None}],
    }


def stop_replica(topic: str) -> dict:
    return {"controller_id": 1, "controller_epoch": 1, "broker_epoch": 5, "topic_states": [
        {"topic_name": topic, "partition_states": [
            {"partition_index": 0, "leader_epoch": -2, "delete_partition": True}]}]}


def echo_stop_replica(body: dict) -> dict:
    t = body["topic_states"][0]
    return {"error_code": 0, "partition_errors": [
        {"topic_name": t["topic_name"], "partition_index": 0, "error_code": 0}]}


async def serving(handler: Callable[[int, int, dict], Awaitable[dict]]
                  ) -> tuple[ControlServer, ControlClient]:
    server = ControlServer("127.0.0.1", 0, handler)
    host, port = server.start()
    return server, ControlClient(2, f"{host}:{port}")


def test_round_trip_of_a_large_update_metadata() -> None:
    got: list[tuple[int, int, dict]] = []

    async def handler(key: int, version: int, body: dict) -> dict:
        got.append((key, version, body))
        return {"error_code": 0}

    async def main() -> None:
        server, client = await serving(handler)
        try:
            request = update_metadata(partitions=5000)  # a few hundred KB
            answer = await client.request(UPDATE_METADATA, 7, request, 10)
            assert answer == {"error_code": 0}
            (key, version, body), = got
            assert (key, version) == (UPDATE_METADATA, 7)
            assert body["controller_epoch"] == 3 and body["broker_epoch"] == 77
            states = body["topic_states"][0]["partition_states"]
            assert len(states) == 5000
            sent = request["topic_states"][0]["partition_states"][4999]
            assert {k: states[4999][k] for k in sent} == sent
            assert body["live_brokers"][0]["endpoints"][0]["host"] == "h2"
        finally:
            client.close()
            await server.close()
    run(main)


def test_handler_failure_answers_unknown_server_error() -> None:
    async def handler(key: int, version: int, body: dict) -> dict:
        raise RuntimeError("bug in the handler")

    async def main() -> None:
        server, client = await serving(handler)
        try:
            body = {"controller_id": 1, "controller_epoch": 1, "broker_epoch": 1, "type": 1,
                    "topic_states": [], "live_leaders": []}
            answer = await client.request(LEADER_AND_ISR, 5, body, 10)
            assert answer["error_code"] == ErrorCode.UNKNOWN_SERVER_ERROR
            assert answer["topics"] == []
        finally:
            client.close()
            await server.close()
    run(main)


def test_timeout_then_late_answer_is_dropped() -> None:
    release = asyncio.Event()

    async def handler(key: int, version: int, body: dict) -> dict:
        if body["topic_states"][0]["topic_name"] == "slow":
            await release.wait()
        return echo_stop_replica(body)

    async def main() -> None:
        server, client = await serving(handler)
        try:
            with pytest.raises(TimeoutError):
                await client.request(STOP_REPLICA, 3, stop_replica("slow"), 0.2)
            release.set()  # the slow answer now goes out: nobody waits for it
            answer = await client.request(STOP_REPLICA, 3, stop_replica("next"), 10)
            assert answer["partition_errors"][0]["topic_name"] == "next"
        finally:
            client.close()
            await server.close()
    run(main)


def test_concurrent_requests_get_their_own_answers_in_order() -> None:
    order: list[tuple[str, str]] = []
    first_started = asyncio.Event()
    release = asyncio.Event()

    async def handler(key: int, version: int, body: dict) -> dict:
        name = body["topic_states"][0]["topic_name"]
        order.append(("start", name))
        if name == "t0":
            first_started.set()
            await release.wait()
        order.append(("end", name))
        return echo_stop_replica(body)

    async def main() -> None:
        server, client = await serving(handler)
        try:
            requests = [asyncio.ensure_future(client.request(STOP_REPLICA, 3, stop_replica(f"t{i}"), 10))
                        for i in range(20)]
            await first_started.wait()
            await asyncio.sleep(0.05)  # give t1.. the chance to overtake (they must not)
            release.set()
            answers = await asyncio.gather(*requests)
            assert [a["partition_errors"][0]["topic_name"] for a in answers] == \
                [f"t{i}" for i in range(20)]
            assert order == [(what, f"t{i}") for i in range(20) for what in ("start", "end")]
        finally:
            client.close()
            await server.close()
    run(main)


def test_undecodable_frames_are_dropped_and_the_server_goes_on() -> None:
    got: list[int] = []

    async def handler(key: int, version: int, body: dict) -> dict:
        got.append(key)
        return {"error_code": 0}

    async def main() -> None:
        server, client = await serving(handler)
        raw = zmq.asyncio.Context.instance().socket(zmq.DEALER)
        raw.setsockopt(zmq.LINGER, 0)
        raw.connect(f"tcp://127.0.0.1:{server.port}")
        try:
            await raw.send(b"\x00")  # not even a header
            await raw.send(b"\x00\x06\x00\x07\x00\x00\x00\x01\x00\x00\x00\xff")  # truncated body
            await raw.send_multipart([b"two", b"parts"])
            answer = await client.request(UPDATE_METADATA, 7, update_metadata(), 10)
            assert answer == {"error_code": 0}
            assert got == [UPDATE_METADATA]
        finally:
            raw.close(0)
            client.close()
            await server.close()
    run(main)


def test_nobody_listening_times_out_and_close_does_not_hang() -> None:
    async def main() -> None:
        probe = ControlServer("127.0.0.1", 0, None)  # type: ignore[arg-type]
        _, port = probe.start()
        await probe.close()  # a port that was free a moment ago, now closed
        client = ControlClient(9, f"127.0.0.1:{port}")
        pending = asyncio.ensure_future(client.request(UPDATE_METADATA, 7, update_metadata(), 30))
        with pytest.raises(TimeoutError):
            await client.request(UPDATE_METADATA, 7, update_metadata(), 0.2)
        client.close()  # queued messages are thrown away (linger 0), waiters fail
        with pytest.raises(ConnectionError):
            await pending
    run(main)

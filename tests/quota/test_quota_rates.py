"""Quotas hold a client to its rate while an unthrottled client on the same broker keeps
its speed: producers under ``producer_byte_rate`` and consumers under
``consumer_byte_rate``, with real clients (confluent-kafka) and real broker processes.

These are limit checks, not benchmarks: the quota is small (1 MB/s) so the machine is never
what holds the throttled client, and the unthrottled client need only go well past it.
The broker measures with ``quota.window.num=2`` (Kafka's measure with 11 samples lets a
client far faster than its quota send ten windows' worth at once, then little until that
sample ages out, so over a few seconds its rate swings around the quota: see
pybroker.broker.quotas); the throttled client's rate is read after its first two seconds.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.admin.clients import create_topic, unique
from tests.conftest import BrokerProcess
from tests.quota.quota_clients import Meter, alter, consume_for, produce_for

QUOTA = 1_000_000  # bytes a second
RUN_SECONDS = 8.0
SETTLE_SECONDS = 2.0
QUOTA_SETTINGS = {"quota_window_num": 2, "quota_window_size_seconds": 1}


@pytest.fixture
def quota_broker(broker_factory: Any) -> BrokerProcess:
    return broker_factory(**QUOTA_SETTINGS)


def _slow_and_fast(job: Any, bootstrap: str, topic: str, kind: str) -> tuple[Meter, Meter]:
    """Run ``job`` as the client id ``slow-<kind>`` (the quota's) and ``fast-<kind>``
    together for ``RUN_SECONDS``; the rate of the slow one after ``SETTLE_SECONDS`` is
    within 10% of the quota. Returns both meters, reset to the run's start."""
    slow, fast, errors = Meter(), Meter(), []
    start = time.monotonic()
    until = start + RUN_SECONDS
    def run(client_id: str, meter: Meter) -> None:
        try:
            job(bootstrap, topic, client_id, until, meter, errors)
        except Exception as exc:  # a failed client fails the test, not just its thread
            errors.append(exc)
    threads = [threading.Thread(target=run, args=(f"{name}-{kind}", meter))
               for name, meter in (("slow", slow), ("fast", fast))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(RUN_SECONDS + 60)
    assert not errors
    held = slow.rate(start + SETTLE_SECONDS, until)
    assert 0.9 * QUOTA <= held <= 1.1 * QUOTA, held
    slow.start = fast.start = start
    return slow, fast


def test_producer_held_to_its_rate_while_another_keeps_its_speed(
        quota_broker: BrokerProcess) -> None:
    topic = unique("produce-quota")
    create_topic(quota_broker.bootstrap, topic)
    assert alter(quota_broker.bootstrap, {"client-id": "slow-producer"},
                 {"producer_byte_rate": QUOTA})["error_code"] == 0
    _, fast = _slow_and_fast(produce_for, quota_broker.bootstrap, topic, "producer")
    assert fast.rate(fast.start, fast.start + RUN_SECONDS) > 5 * QUOTA


def test_consumer_held_to_its_rate_while_another_keeps_its_speed(
        quota_broker: BrokerProcess) -> None:
    topic = unique("fetch-quota")
    create_topic(quota_broker.bootstrap, topic)
    loaded, errors = Meter(), []
    produce_for(quota_broker.bootstrap, topic, "loader", time.monotonic() + 30, loaded,
                errors, max_bytes=3 * int(RUN_SECONDS * QUOTA))
    assert not errors
    assert alter(quota_broker.bootstrap, {"client-id": "slow-consumer"},
                 {"consumer_byte_rate": QUOTA})["error_code"] == 0
    _, fast = _slow_and_fast(consume_for, quota_broker.bootstrap, topic, "consumer")
    assert fast.total == loaded.total  # it read everything, well past the quota
    assert fast.rate(fast.start, fast.last + 0.001) > 5 * QUOTA

"""RequestMemory: the broker-wide bound on bytes of requests held (queued.max.request.bytes).
Waiters are connection stand-ins that record when they are let read again."""

from __future__ import annotations

import asyncio

import pytest

from pybroker.net import request_memory
from pybroker.net.request_memory import RequestMemory


class Waiter:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def memory_granted(self) -> None:
        self.log.append(self.name)


def test_under_the_bound_everyone_reads_and_over_it_only_who_holds_nothing():
    async def main() -> None:
        memory = RequestMemory(100)
        log: list[str] = []
        a, b = Waiter("a", log), Waiter("b", log)
        memory.charge(99)
        assert memory.admit(a, holding=99)
        memory.charge(1)
        assert memory.over and memory.peak == 100
        assert memory.admit(b, holding=0)  # holds nothing: one read is always allowed
        assert not memory.admit(a, holding=100)
        assert memory.waiting == 1
    asyncio.run(main())


def test_released_memory_lets_waiters_read_in_arrival_order():
    async def main() -> None:
        memory = RequestMemory(100)
        log: list[str] = []
        waiters = [Waiter(n, log) for n in "abc"]
        memory.charge(150)
        for w in waiters:
            assert not memory.admit(w, holding=50)
        memory.release(40)  # still over: nobody
        assert log == []
        memory.release(20)  # under: every waiter may read once more
        assert log == ["a", "b", "c"] and memory.waiting == 0
    asyncio.run(main())


def test_a_forgotten_waiter_is_never_granted():
    async def main() -> None:
        memory = RequestMemory(10)
        log: list[str] = []
        a, b = Waiter("a", log), Waiter("b", log)
        memory.charge(10)
        assert not memory.admit(a, holding=5) and not memory.admit(b, holding=5)
        memory.forget(a)
        memory.release(10)
        assert log == ["b"]
    asyncio.run(main())


def test_the_breaker_lets_one_waiter_read_when_nothing_is_released(monkeypatch):
    """Partial frames of paused connections can hold the whole bound: then one waiter at a
    time reads anyway, so frames still complete."""
    monkeypatch.setattr(request_memory, "BREAKER_S", 0.01)

    async def main() -> None:
        memory = RequestMemory(10)
        log: list[str] = []
        memory.charge(10)
        for name in "ab":
            assert not memory.admit(Waiter(name, log), holding=5)
        await asyncio.sleep(0.05)
        assert log[:2] == ["a", "b"]
    asyncio.run(main())


def test_the_bound_must_be_positive():
    with pytest.raises(ValueError):
        RequestMemory(0)

"""The partitions of a coordinator's internal topic this broker leads (``__consumer_offsets``
for the group coordinator, ``__transaction_state`` for the transaction coordinator),
followed: a partition's state loads when this broker becomes its leader and unloads when
it stops leading (Kafka's ``CoordinatorRuntime`` / ``TransactionStateManager`` loading
and unloading a partition). The subclasses say what a load replays and what an unload
drops; this class says when, and answers which partitions are coordinated here.

The control plane (pybroker/metadata/) says which partitions are led here, in one of two
ways. Where leadership never moves (one node), ``lead_every_partition`` says every
partition is led here for good: the existing ones load, and one created later is new and
empty, so it is coordinated here at once. Where it moves (a cluster),
``leadership_changed`` (the broker's ``on_leadership_change`` listener) says which
partition this broker now leads or no longer leads; a partition it was told nothing of is
led elsewhere. Being told leader again (a new leader epoch) keeps what is loaded: this
broker was the partition's only writer all along, or it would have been told follower
between.

Partitions load one at a time (one lock), each as a replay of its log in slices of loop
time, so the loop is never held longer than one slice however many partitions this broker
takes over at once; requests for the state of a partition that loads are answered
COORDINATOR_LOAD_IN_PROGRESS meanwhile. The coordinator epoch of a partition is its
leader epoch when this broker took it.

Not thread-safe: every method runs on the broker's event loop thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING

from pybroker.errors import ErrorCode

if TYPE_CHECKING:
    from pybroker.broker.partition import Partition


class LedPartition:
    """A partition this broker was told it leads: loading, then loaded."""

    __slots__ = ("partition", "coordinator_epoch", "loading", "task")

    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self.coordinator_epoch = partition.leader_epoch
        self.loading = True
        self.task: asyncio.Task[None] | None = None


class LedPartitions:
    """See module doc. ``topic``: the internal topic; ``spawn`` runs a load as a
    background task the coordinator cancels when it stops. Subclasses implement
    ``_load`` and ``_unload``."""

    def __init__(self, topic: str,
                 spawn: Callable[[Coroutine[object, object, None]], asyncio.Task[None]]
                 ) -> None:
        self.topic = topic
        self._spawn = spawn
        self._led: dict[int, LedPartition] = {}
        # the answer for a partition this broker was told nothing of: coordinated here
        # (every partition is led here, or there is no such topic yet), or, once this
        # broker follows leadership, led elsewhere
        self._untold = ErrorCode.NONE
        self._load_lock = asyncio.Lock()

    def lead_every_partition(self, partitions: Iterable[Partition]) -> None:
        """Every partition is led here from now on: load the existing ones."""
        for partition in partitions:
            self.leadership_changed(partition, True)

    def follow_leadership(self) -> None:
        """Only the partitions ``leadership_changed`` says are led here are, from now on."""
        self._untold = ErrorCode.NOT_COORDINATOR

    def leadership_changed(self, partition: Partition, is_leader: bool) -> None:
        """The broker's ``on_leadership_change`` listener."""
        if partition.topic != self.topic:
            return
        index = partition.index
        if is_leader:
            if index in self._led:
                return
            led = self._led[index] = LedPartition(partition)
            led.task = self._spawn(self._load_one_at_a_time(index, led))
            return
        lost = self._led.pop(index, None)
        if lost is None:
            return
        if lost.task is not None and not lost.task.done():
            lost.task.cancel()
        self._unload(index)

    async def _load_one_at_a_time(self, index: int, led: LedPartition) -> None:
        async with self._load_lock:
            await self._load(index, led)

    async def _load(self, index: int, led: LedPartition) -> None:
        """Replay the partition's log up to its end of now, then serve its state
        (``loaded``), or give it up (``abandon``) when the log would not read or this
        broker stopped leading it (``_still_led``, to be checked after each pause: the
        log cannot change under the replay while it is led here)."""
        raise NotImplementedError

    def _unload(self, index: int) -> None:
        """Drop the state of a partition this broker no longer leads."""
        raise NotImplementedError

    def _still_led(self, index: int, led: LedPartition) -> bool:
        return led.partition.is_leader and self._led.get(index) is led

    def loaded(self, led: LedPartition) -> None:
        led.loading = False

    def abandon(self, index: int, led: LedPartition) -> None:
        """A load that did not finish: the partition's state answers NOT_COORDINATOR (its
        clients look for the coordinator again), not a load that would never end; what
        was installed goes."""
        if self._led.get(index) is led:
            del self._led[index]
            self._unload(index)

    def coordinator_error_of(self, index: int) -> ErrorCode:
        """NONE when the state of partition ``index`` is coordinated here now;
        NOT_COORDINATOR when another broker's, COORDINATOR_LOAD_IN_PROGRESS while it
        loads."""
        led = self._led.get(index)
        if led is None:
            return self._untold
        if not led.partition.is_leader:  # a follower already, not yet told
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if led.loading else ErrorCode.NONE

    def coordinator_epoch_of(self, index: int) -> int:
        """The coordinator epoch of partition ``index`` (0 where every partition is led
        here for good and this one was never told)."""
        led = self._led.get(index)
        return led.coordinator_epoch if led is not None else 0

    def loading(self) -> bool:
        """Whether a partition's state is still loading."""
        return any(led.loading for led in self._led.values())

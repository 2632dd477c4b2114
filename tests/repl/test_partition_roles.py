"""The leader's side of replication in ``Partition``, on a real log: follower positions,
the ISR and the high watermark (docs/REPLICATION.md, "Partition roles").

The test stands where the ReplicaManager does: ISR changes the partition proposes are
recorded, and applied with ``isr_changed`` as the manager does once its conditional
ZooKeeper write succeeded (or refused with None). Fetches are ``follower_fetched`` calls,
as the Fetch handler makes them. tests/cluster runs the whole path with real brokers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from pybroker._native.records import encode_batch, validate_batch
from pybroker.broker.partition import Partition
from pybroker.errors import ErrorCode
from pybroker.log.log import Log
from pybroker.log.log_config import LogConfig

LEADER, F2, F3 = 1, 2, 3
EPOCH = 5


class Leader:
    """Partition 0 of ``t`` led by broker 1 (replicas 1, 2, 3), its ISR proposals kept."""

    def __init__(self, directory: str, isr: list[int], min_insync: int = 2) -> None:
        self.log = Log(directory, LogConfig.from_properties(
            {"min.insync.replicas": min_insync}))
        self.partition = Partition("t", 0, self.log, broker_id=LEADER, is_leader=False)
        self.proposed: list[list[int]] = []
        self.partition.isr_listener = lambda _p, new_isr: self.proposed.append(new_isr)
        self.partition.become_leader(EPOCH, [LEADER, F2, F3], isr, zk_version=0)

    def append(self, count: int = 2) -> int:
        """Appends a batch as a produce does; returns the log end after it."""
        batch = bytearray(encode_batch([b"r"] * count))
        self.partition.append(memoryview(batch), validate_batch(batch))
        return self.log.log_end_offset

    def accept(self) -> None:
        """The last proposal written to ZooKeeper."""
        self.partition.isr_changed(self.proposed[-1], zk_version=len(self.proposed))

    @property
    def hw(self) -> int:
        return self.partition.high_watermark


@pytest.fixture
def leader(tmp_path: Any) -> Iterator[Any]:
    made: list[Leader] = []

    def make(isr: list[int], min_insync: int = 2) -> Leader:
        made.append(Leader(str(tmp_path / f"t-{len(made)}"), isr, min_insync))
        return made[-1]

    yield make
    for each in made:
        each.log.close()


def test_high_watermark_is_the_lowest_isr_position(leader):
    lead = leader([LEADER, F2, F3])
    end = lead.append(4)
    assert lead.hw == 0  # no follower has reported anything
    lead.partition.follower_fetched(F2, end)
    assert lead.hw == 0  # F3 is in the ISR too
    lead.partition.follower_fetched(F3, 2)
    assert lead.hw == 2
    lead.partition.follower_fetched(F3, end)
    assert lead.hw == end
    lead.partition.follower_fetched(F3, 1)  # an older fetch arriving late
    assert lead.hw == end


def test_a_fetch_outside_the_log_moves_nothing(leader):
    """A follower fetching past the leader's end (its tail not yet truncated) is answered
    OFFSET_OUT_OF_RANGE and must not count as having our records."""
    lead = leader([LEADER, F2])
    end = lead.append(4)
    lead.partition.follower_fetched(F2, end + 10)
    assert lead.hw == 0 and lead.partition.followers[F2].position == -1
    lead.partition.follower_fetched(F2, end)
    assert lead.hw == end


def test_isr_grows_once_the_follower_reaches_the_high_watermark(leader):
    lead = leader([LEADER, F2])
    end = lead.append(4)
    lead.partition.follower_fetched(F2, end)
    assert lead.hw == end
    lead.partition.follower_fetched(F3, end - 1)  # below the high watermark
    assert lead.proposed == []
    lead.partition.follower_fetched(F3, end)
    assert lead.proposed == [[LEADER, F2, F3]]
    lead.partition.follower_fetched(F3, end)  # pending: nothing proposed twice
    assert len(lead.proposed) == 1
    lead.accept()
    assert lead.partition.isr == [LEADER, F2, F3]


def test_a_follower_caught_up_during_another_isr_change_joins_at_its_next_fetch(leader):
    """Two new replicas catch up together (a reassignment adding both): the second's
    fetch comes while the first's ISR change is being written, and nothing is produced
    after: its next fetch, at the same offset, lets it in."""
    lead = leader([LEADER])
    end = lead.append(4)
    lead.partition.follower_fetched(F2, end)
    lead.partition.follower_fetched(F3, end)  # F2's change pending: not proposed
    assert lead.proposed == [[LEADER, F2]]
    lead.accept()
    lead.partition.follower_fetched(F3, end)
    assert lead.proposed[-1] == [LEADER, F2, F3]
    lead.accept()
    assert lead.partition.isr == [LEADER, F2, F3] and lead.hw == end


def test_isr_grows_only_past_where_the_leaders_epoch_began(leader, tmp_path):
    """A new leader's high watermark can trail what its predecessor committed: the
    follower must also reach the log end the leader had when elected (KAFKA-7128)."""
    lead = leader([LEADER, F2])
    lead.append(4)
    lead.append(4)  # 8 records; a follower told the high watermark 4 before the election
    lead.log.high_watermark = 4
    lead.partition.become_leader(EPOCH + 1, [LEADER, F2, F3], [LEADER, F2], zk_version=1)
    assert lead.partition.epoch_start_offset == 8
    lead.partition.follower_fetched(F3, 6)  # above the high watermark, below 8
    assert lead.proposed == []
    lead.partition.follower_fetched(F3, 8)
    assert lead.proposed == [[LEADER, F2, F3]]


def test_a_refused_isr_write_keeps_the_old_isr(leader):
    lead = leader([LEADER, F2])
    end = lead.append()
    lead.partition.follower_fetched(F2, end)
    lead.partition.follower_fetched(F3, end)
    lead.partition.isr_changed(None, zk_version=0)  # the controller moved on
    assert lead.partition.isr == [LEADER, F2] and not lead.partition.isr_pending


def test_isr_shrinks_by_a_follower_lagging_past_the_limit(leader):
    lead = leader([LEADER, F2, F3])
    end = lead.append()
    lead.partition.follower_fetched(F2, end)
    lead.partition.follower_fetched(F3, end)
    lead.append()
    now = lead.partition.followers[F2].last_caught_up_ms
    assert lead.partition.isr_lagging(1000, now + 500) == []
    lead.partition.follower_fetched(F2, lead.log.log_end_offset)  # F2 keeps up, F3 not
    assert lead.partition.isr_lagging(1000, now + 1500) == [F3]
    lead.partition.shrink_isr(1000, now + 500)
    assert lead.proposed == []
    lead.partition.shrink_isr(1000, now + 1500)
    assert lead.proposed == [[LEADER, F2]]
    lead.accept()
    # F2 alone left in the ISR besides the leader: the high watermark follows it
    assert lead.hw == lead.log.log_end_offset


def test_acks_all_waits_for_the_isr_and_is_told_why(leader):
    async def scenario() -> None:
        lead = leader([LEADER, F2, F3])
        end = lead.append()
        waiting = asyncio.ensure_future(lead.partition.wait_for_high_watermark(end, 30))
        await asyncio.sleep(0)
        lead.partition.follower_fetched(F2, end)
        await asyncio.sleep(0)
        assert not waiting.done()  # F3 is in the ISR and has not fetched it
        lead.partition.follower_fetched(F3, end)
        assert await waiting == ErrorCode.NONE

        end = lead.append()
        timed_out = await lead.partition.wait_for_high_watermark(end, 0.05)
        assert timed_out == ErrorCode.REQUEST_TIMED_OUT

        end = lead.append()
        deposed = asyncio.ensure_future(lead.partition.wait_for_high_watermark(end, 30))
        await asyncio.sleep(0)
        lead.partition.become_follower(F2, EPOCH + 1, [LEADER, F2, F3], [F2, F3], 1)
        assert await deposed == ErrorCode.NOT_LEADER_OR_FOLLOWER

        small = leader([LEADER], min_insync=2)  # ISR of one: committed when written ...
        end = small.append()
        # ... but below min.insync.replicas: committed, and said to be under-replicated
        code = await small.partition.wait_for_high_watermark(end, 30)
        assert code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND

    asyncio.run(scenario())


def test_acks_all_is_told_at_shutdown_rather_than_timing_out(leader):
    """A stopping broker reads no more follower fetches: its waiting acks=all appends,
    and those it still has to handle, are told to go to the next leader."""
    async def scenario() -> None:
        lead = leader([LEADER, F2])
        end = lead.append()
        waiting = asyncio.ensure_future(lead.partition.wait_for_high_watermark(end, 30))
        await asyncio.sleep(0)
        lead.partition.stop_waiting_for_replicas()
        assert await waiting == ErrorCode.NOT_LEADER_OR_FOLLOWER
        later = lead.append()
        code = await lead.partition.wait_for_high_watermark(later, 30)
        assert code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        lead.partition.follower_fetched(F2, later)  # (a fetch read before the drain)
        assert await lead.partition.wait_for_high_watermark(later, 30) == ErrorCode.NONE

    asyncio.run(scenario())


def test_a_new_leader_keeps_its_high_watermark(leader):
    lead = leader([LEADER, F2])
    end = lead.append(6)
    lead.partition.follower_fetched(F2, end)
    assert lead.hw == end
    lead.partition.become_follower(F2, EPOCH + 1, [LEADER, F2, F3], [LEADER, F2], 1)
    lead.partition.become_leader(EPOCH + 2, [LEADER, F2, F3], [LEADER, F2], 2)
    assert lead.hw == end  # no follower position yet: never backwards
    assert all(s.position == -1 for s in lead.partition.followers.values())


def test_a_new_leaders_epoch_starts_at_its_log_end_before_any_append(leader):
    """A follower that had an epoch this leader never saw (it appended in a leader's epoch
    this broker missed) learns where the leader's epoch below ended: truncation to there,
    not back to the high watermark."""
    lead = leader([LEADER, F2])
    end = lead.append(4)
    cache = lead.log.leader_epoch_cache
    assert cache.entries() == [(EPOCH, 0)]
    lead.partition.become_leader(EPOCH + 2, [LEADER, F2, F3], [LEADER, F2], zk_version=1)
    assert cache.entries() == [(EPOCH, 0), (EPOCH + 2, end)]
    assert cache.end_offset_for_epoch(EPOCH + 1, end) == (EPOCH, end)
    after = lead.append(2)
    assert cache.entries() == [(EPOCH, 0), (EPOCH + 2, end)]  # the append adds nothing
    assert cache.end_offset_for_epoch(EPOCH + 2, after) == (EPOCH + 2, after)

"""The generic pieces of state derived from a log: replay in slices of event-loop time,
and the follower chunks a state machine sees."""

from __future__ import annotations

import asyncio

from pybroker._native.records import (
    CONTROL_COMMIT,
    encode_batch,
    encode_control_batch,
    producer_batches,
)
from pybroker.log.log import Log
from pybroker.log.log_config import LogConfig
from pybroker.log.state_machine import replay_in_slices


def _follower_log(directory: str, batches: int) -> Log:
    plog = Log(directory)
    for i in range(batches):
        plog.append_as_follower(encode_batch([b"%d" % i, b"x"], base_offset=2 * i))
    return plog


def test_replay_in_slices_gives_the_loop_back_and_can_be_stopped(tmp_path):
    plog = _follower_log(str(tmp_path / "t-0"), 20)

    async def scenario(stop_after: int | None) -> tuple[int | None, list[int], int]:
        seen: list[int] = []
        turns = 0
        done = False

        async def other_client() -> None:
            nonlocal turns
            while not done:
                turns += 1
                await asyncio.sleep(0)

        other = asyncio.create_task(other_client())
        await asyncio.sleep(0)
        reached = await replay_in_slices(
            plog, 6, lambda info, data: seen.append(info.base_offset),
            None if stop_after is None else lambda: len(seen) < stop_after, slice_s=0.0)
        done = True
        await other
        return reached, seen, turns

    reached, seen, turns = asyncio.run(scenario(None))
    assert reached == 40 and seen == list(range(6, 40, 2))
    assert turns >= len(seen)  # a pause after every batch with slice_s=0
    reached, seen, _ = asyncio.run(scenario(stop_after=5))
    assert reached is None and seen == [6, 8, 10, 12, 14]
    plog.close()


def test_every_idempotent_batch_of_a_follower_chunk_reaches_producer_state(tmp_path):
    """A chunk from a plain producer and idempotent ones mixed, in any order."""
    plog = Log(str(tmp_path / "t-0"))
    chunk = encode_batch([b"anonymous"], base_offset=0) + encode_batch(
        [b"a", b"b"], base_offset=1, producer_id=9, producer_epoch=2, base_sequence=0) + \
        encode_batch([b"anonymous"], base_offset=3)
    plog.append_as_follower(chunk)
    assert plog.producer_state.check(9, 2, 0, 1) is not None  # a retry: known
    plog.append_as_follower(encode_batch([b"anonymous"] * 3, base_offset=4))
    assert set(plog.producer_state.producers) == {9}
    plog.close()


def test_producer_batches_are_the_batches_with_a_producer_id(tmp_path):
    """The native walk the state machines replay through, against the Python one."""
    plog = Log(str(tmp_path / "t-0"), LogConfig.from_properties({"segment.bytes": "400"}))
    offset = 0
    for i in range(40):
        idempotent = i % 3 != 0
        batch = encode_batch([b"v%d" % i] * (1 + i % 4), base_offset=offset,
                             producer_id=i % 2 if idempotent else -1,
                             producer_epoch=0 if idempotent else -1,
                             base_sequence=i if idempotent else -1)
        plog.append_as_follower(batch)
        offset = plog.log_end_offset
    assert len(plog.segments) > 3
    for start in (0, 7, 31, offset - 1, offset):
        expected = [(i.base_offset, i.producer_id, i.base_sequence)
                    for i, _ in plog.batches(start) if i.producer_id >= 0]
        got = [(i.base_offset, i.producer_id, i.base_sequence)
               for i in plog.producer_batches(start, read_bytes=150)]
        assert got == expected and (start > 0 or len(got) == 26)
    plog.close()


def test_producer_batches_include_control_batches_and_stop_at_a_torn_tail():
    """A transaction marker is returned with its type; a batch cut short ends the walk."""
    data = encode_batch([b"a"], base_offset=0, producer_id=3, producer_epoch=0,
                        base_sequence=0)
    data += encode_batch([b"b", b"c"], base_offset=1, producer_id=3, producer_epoch=0,
                         base_sequence=1, transactional=True)
    data += encode_control_batch(3, 0, CONTROL_COMMIT, 0, base_offset=3)
    whole = len(data)
    data += encode_batch([b"d"], base_offset=4, producer_id=3, producer_epoch=0,
                         base_sequence=3)
    found, next_offset = producer_batches(data[:whole + 30], 0)  # the last batch is torn
    assert [(i.base_offset, i.is_transactional, i.control_type) for i in found] == \
        [(0, False, -1), (1, True, -1), (3, True, CONTROL_COMMIT)]
    assert next_offset == 4
    found, next_offset = producer_batches(data, 2)  # starts inside the second batch
    assert [i.base_offset for i in found] == [1, 3, 4] and next_offset == 5

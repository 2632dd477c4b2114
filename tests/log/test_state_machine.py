"""The generic pieces of state derived from a log: replay in slices of event-loop time,
and the follower chunks a state machine sees."""

from __future__ import annotations

import asyncio

from pybroker._native.records import encode_batch
from pybroker.log.log import Log
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


def test_a_follower_chunk_starting_without_a_producer_id_still_reaches_producer_state(
        tmp_path):
    plog = Log(str(tmp_path / "t-0"))
    chunk = encode_batch([b"anonymous"], base_offset=0) + encode_batch(
        [b"a", b"b"], base_offset=1, producer_id=9, producer_epoch=2, base_sequence=0)
    plog.append_as_follower(chunk)
    assert plog.producer_state.check(9, 2, 0, 1) is not None  # a retry: known
    plog.append_as_follower(encode_batch([b"anonymous"] * 3, base_offset=3))
    assert set(plog.producer_state.producers) == {9}
    plog.close()

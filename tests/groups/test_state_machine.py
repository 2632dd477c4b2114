"""The group state machine, driven directly: no server, a clock the test moves.

Each test plays clients against ``GroupCoordinator`` in one event loop: JoinGroup and
SyncGroup are tasks that park until the rebalance moves on; ``poll(now)`` fires the
timers the test's clock has made due.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from pybroker.coordinator import (
    CoordinatorConfig,
    GroupCoordinator,
    GroupState,
    JoinResult,
    OffsetCommit,
)
from pybroker.coordinator.consumer_protocol import encode_subscription
from pybroker.errors import ErrorCode

SESSION_MS = 10_000
REBALANCE_MS = 30_000


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> float:
        return self.ms / 1000

    def advance(self, ms: int) -> int:
        self.ms += ms
        return self.ms


def run(test: Callable[[GroupCoordinator, Clock], Awaitable[None]],
        **config: Any) -> None:
    clock = Clock()
    # a new group answers its first member at once unless a test is about the delay
    config = {"initial_rebalance_delay_ms": 0, **config}
    coordinator = GroupCoordinator(config=CoordinatorConfig(**config), clock=clock)
    asyncio.run(test(coordinator, clock))


def join(c: GroupCoordinator, member_id: str = "", instance: str | None = None,
         protocols: list[tuple[str, bytes]] | None = None, group: str = "g",
         require_known: bool = False, session_ms: int = SESSION_MS,
         rebalance_ms: int = REBALANCE_MS) -> asyncio.Task[JoinResult]:
    return asyncio.ensure_future(c.join_group(
        group, member_id, instance, "client", "/127.0.0.1", session_ms, rebalance_ms,
        "consumer", protocols or [("range", encode_subscription(["t"]))], require_known))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def form_group(c: GroupCoordinator, n: int, group: str = "g") -> list[JoinResult]:
    """n members join and sync one generation; returns their join results."""
    tasks = [join(c, group=group) for _ in range(n)]
    await settle()
    results = [await t for t in tasks] if n == 1 else []
    if n > 1:
        # the first member completed a generation alone; the others arrive as a rebalance
        first = await tasks[0]
        rejoin = join(c, first.member_id, group=group)
        await settle()
        results = [await t for t in [rejoin, *tasks[1:]]]
    gen = results[0].generation
    leader = results[0].leader_id
    syncs = [asyncio.ensure_future(c.sync_group(
        group, gen, r.member_id, None, "consumer", r.protocol_name,
        {m: f"assign-{m}".encode() for m, _, _ in r.members} if r.member_id == leader else {}))
        for r in results]
    for s in syncs:
        assert (await s).error == ErrorCode.NONE
    return results


def test_first_member_gets_member_id_then_leads_generation_one() -> None:
    async def body(c: GroupCoordinator, clock: Clock) -> None:
        first = await join(c, require_known=True)
        assert first.error == ErrorCode.MEMBER_ID_REQUIRED
        assert first.member_id.startswith("client-")
        result = await join(c, first.member_id, require_known=True)
        assert result.error == ErrorCode.NONE
        assert (result.generation, result.leader_id) == (1, first.member_id)
        assert [m for m, _, _ in result.members] == [first.member_id]
        assert c.groups["g"].state == GroupState.COMPLETING_REBALANCE
        sync = await c.sync_group("g", 1, first.member_id, None, "consumer", "range",
                                  {first.member_id: b"a"})
        assert (sync.error, sync.assignment, sync.protocol_name) == (ErrorCode.NONE, b"a",
                                                                     "range")
        assert c.groups["g"].state == GroupState.STABLE
        assert c.heartbeat("g", first.member_id, None, 1) == ErrorCode.NONE
    run(body)


def test_protocol_chosen_by_votes_among_common_protocols() -> None:
    async def body(c: GroupCoordinator, clock: Clock) -> None:
        a = join(c, protocols=[("roundrobin", b""), ("range", b"")])
        b_ = join(c, protocols=[("sticky", b""), ("range", b""), ("roundrobin", b"")])
        await settle()
        ra = await a
        rejoin = join(c, ra.member_id, protocols=[("roundrobin", b""), ("range", b"")])
        await settle()
        results = [await rejoin, await b_]
        # common: range, roundrobin; a votes roundrobin, b votes range; tie -> leader's order
        assert {r.protocol_name for r in results} == {"roundrobin"}
        bad = await join(c, protocols=[("cooperative-sticky", b"")])
        assert bad.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    run(body)


def test_new_member_triggers_rebalance_and_leader_gets_all_members() -> None:
    async def body(c: GroupCoordinator, clock: Clock) -> None:
        (a,) = await form_group(c, 1)
        newcomer = join(c)
        await settle()
        assert not newcomer.done()
        assert c.groups["g"].state == GroupState.PREPARING_REBALANCE
        assert c.heartbeat("g", a.member_id, None, 1) == ErrorCode.REBALANCE_IN_PROGRESS
        # commits of the current generation are still accepted while preparing
        assert c.commit_offsets("g", a.member_id, None, 1, [OffsetCommit("t", 0, 5)]) \
            == {("t", 0): ErrorCode.NONE}
        rejoin = join(c, a.member_id)
        await settle()
        ra, rb = await rejoin, await newcomer
        assert ra.generation == rb.generation == 2
        assert ra.leader_id == a.member_id and len(ra.members) == 2 and rb.members == []
        follower_sync = asyncio.ensure_future(
            c.sync_group("g", 2, rb.member_id, None, None, None, {}))
        await settle()
        assert not follower_sync.done()  # parked until the leader's assignment
        assert c.commit_offsets("g", rb.member_id, None, 2, [OffsetCommit("t", 0, 6)]) \
            == {("t", 0): ErrorCode.REBALANCE_IN_PROGRESS}
        leader_sync = await c.sync_group("g", 2, a.member_id, None, None, None,
                                         {a.member_id: b"A", rb.member_id: b"B"})
        assert leader_sync.assignment == b"A"
        assert (await follower_sync).assignment == b"B"
    run(body)


def test_stale_generation_and_unknown_member_are_fenced() -> None:
    async def body(c: GroupCoordinator, clock: Clock) -> None:
        a, b = await form_group(c, 2)
        gen = a.generation
        commit = [OffsetCommit("t", 0, 10, metadata="m")]
        assert c.commit_offsets("g", a.member_id, None, gen - 1, commit) \
            == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
        assert c.commit_offsets("g", "nobody", None, gen, commit) \
            == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
        assert c.commit_offsets("g", "", None, -1, commit) \
            == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}  # anonymous into an active group
        assert c.heartbeat("g", a.member_id, None, gen + 1) == ErrorCode.ILLEGAL_GENERATION
        sync = await c.sync_group("g", gen - 1, a.member_id, None, None, None, {})
        assert sync.error == ErrorCode.ILLEGAL_GENERATION
        assert c.commit_offsets("g", a.member_id, None, gen, commit) \
            == {("t", 0): ErrorCode.NONE}
        fetched = c.fetch_offsets("g", [("t", 0), ("t", 1)])
        assert fetched[("t", 0)].offset == 10 and fetched[("t", 0)].metadata == "m"
        assert fetched[("t", 1)] is None
        assert c.commit_offsets("other", "", None, -1, commit) == {("t", 0): ErrorCode.NONE}
        assert c.commit_offsets("unknown", "m", None, 3, commit) \
            == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    run(body)


def test_session_timeout_expires_member_and_rebalances() -> None:
    async def body(c: GroupCoordinator, clock: Clock) -> None:
        a, b = await form_group(c, 2)
        for _ in range(3):  # a heartbeats, b is silent
            c.poll(clock.advance(SESSION_MS // 3))
            assert c.heartbeat("g", a.member_id, None, a.generation) == ErrorCode.NONE
        c.poll(clock.advance(SESSION_MS // 3))
        group = c.groups["g"]
        assert b.member_id not in group.members
        assert group.state == GroupState.PREPARING_REBALANCE
        assert c.heartbeat("g", b.member_id, None, b.generation) == ErrorCode.UNKNOWN_MEMBER_ID
        result = await join(c, a.member_id)
        assert result.generation == a.generation + 1 and len(result.members) == 1
    run(body)


def test_member_not_rejoining_within_rebalance_timeout_is_removed() -> None:
    async def body(c: GroupCoordinator, clock: Clock) -> None:
        a, b = await form_group(c, 2)
        rejoin = join(c, a.member_id)  # a asks for a rebalance; b keeps heartbeating only
        await settle()
        for step in (5000,) * (REBALANCE_MS // 5000 - 1) + (4999,):
            assert c.heartbeat("g", b.member_id, None, b.generation) \
                == ErrorCode.REBALANCE_IN_PROGRESS
            c.poll(clock.advance(step))
        assert not rejoin.done()  # a millisecond before the rebalance timeout
        c.poll(clock.advance(1))
        await settle()
        result = await rejoin
        assert result.error == ErrorCode.NONE and [m for m, _, _ in result.members] \
            == [a.member_id]
        assert b.member_id not in c.groups["g"].members
    run(body)


def test_member_not_syncing_within_rebalance_timeout_is_removed() -> None:
    async def body(c: GroupCoordinator, clock: Clock) -> None:
        (a,) = await form_group(c, 1)
        newcomer = join(c)
        rejoin = join(c, a.member_id)
        await settle()
        ra, rb = await rejoin, await newcomer
        leader = ra if ra.members else rb
        await c.sync_group("g", leader.generation, leader.member_id, None, None, None, {})
        other = rb if leader is ra else ra
        for _ in range(REBALANCE_MS // 5000):  # both heartbeat; only the leader synced
            for r in (leader, other):
                assert c.heartbeat("g", r.member_id, None, r.generation) == ErrorCode.NONE
            c.poll(clock.advance(5000))
        c.poll(clock.advance(1))
        assert other.member_id not in c.groups["g"].members
        assert c.groups["g"].state == GroupState.PREPARING_REBALANCE
    run(body)


def test_leave_rebalances_and_last_leave_empties_group() -> None:
    async def body(c: GroupCoordinator, clock: Clock) -> None:
        a, b = await form_group(c, 2)
        err, per_member = c.leave_group("g", [(b.member_id, None), ("ghost", None)])
        assert err == ErrorCode.NONE
        assert [e for _, _, e in per_member] == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID]
        assert c.groups["g"].state == GroupState.PREPARING_REBALANCE
        ra = await join(c, a.member_id)
        await c.sync_group("g", ra.generation, a.member_id, None, None, None, {})
        c.leave_group("g", [(a.member_id, None)])
        group = c.groups["g"]
        assert group.state == GroupState.EMPTY and group.generation == ra.generation + 1
        assert c.describe_group("g").state == "Empty"
    run(body)


def test_static_member_restart_keeps_assignment_without_rebalance() -> None:
    async def body(c: GroupCoordinator, clock: Clock) -> None:
        s1 = join(c, instance="host-1")
        await settle()
        a = await s1
        s2 = join(c, instance="host-2")
        rejoin = join(c, a.member_id, instance="host-1")
        await settle()
        ra, rb = await rejoin, await s2
        gen = ra.generation
        await asyncio.gather(
            c.sync_group("g", gen, ra.member_id, "host-1", None, None,
                         {ra.member_id: b"P0", rb.member_id: b"P1"}),
            c.sync_group("g", gen, rb.member_id, "host-2", None, None, {}))
        # host-2 restarts: a new process with no member id, same instance id
        restarted = await join(c, instance="host-2", require_known=True)
        assert restarted.error == ErrorCode.NONE and restarted.generation == gen
        assert restarted.member_id != rb.member_id
        assert c.groups["g"].state == GroupState.STABLE
        sync = await c.sync_group("g", gen, restarted.member_id, "host-2", None, None, {})
        assert sync.assignment == b"P1"
        # the old incarnation is fenced
        assert c.heartbeat("g", rb.member_id, "host-2", gen) == ErrorCode.FENCED_INSTANCE_ID
        assert c.commit_offsets("g", rb.member_id, "host-2", gen, [OffsetCommit("t", 0, 1)]) \
            == {("t", 0): ErrorCode.FENCED_INSTANCE_ID}
        # leaving by instance id alone (the admin client's way) works
        _, per_member = c.leave_group("g", [("", "host-2")])
        assert per_member[0][2] == ErrorCode.NONE
    run(body)


def test_session_timeout_bounds_and_group_id() -> None:
    async def body(c: GroupCoordinator, clock: Clock) -> None:
        assert (await join(c, session_ms=100)).error == ErrorCode.INVALID_SESSION_TIMEOUT
        assert (await join(c, group="")).error == ErrorCode.INVALID_GROUP_ID
        assert (await join(c, "someone")).error == ErrorCode.UNKNOWN_MEMBER_ID
    run(body)


def test_initial_rebalance_delay_gathers_members() -> None:
    async def body(c: GroupCoordinator, clock: Clock) -> None:
        tasks = [join(c) for _ in range(3)]
        await settle()
        assert not any(t.done() for t in tasks)
        c.poll(clock.advance(3000))
        await settle()
        results = [await t for t in tasks]
        assert {r.generation for r in results} == {1}
        assert sum(1 for r in results if r.members) == 1
    run(body, initial_rebalance_delay_ms=3000)


def test_admin_describe_list_delete_and_offset_delete() -> None:
    async def body(c: GroupCoordinator, clock: Clock) -> None:
        (a,) = await form_group(c, 1, group="busy")
        c.commit_offsets("busy", a.member_id, None, a.generation,
                         [OffsetCommit("t", 0, 3), OffsetCommit("u", 0, 4)])
        c.commit_offsets("idle", "", None, -1, [OffsetCommit("t", 0, 7)])
        described = c.describe_group("busy")
        assert described.state == "Stable" and described.protocol_name == "range"
        assert described.members[0].assignment == f"assign-{a.member_id}".encode()
        assert c.describe_group("nope").state == "Dead"
        assert sorted(c.list_groups()) == [("busy", "consumer", "Stable"),
                                           ("idle", "", "Empty")]
        assert c.list_groups(states=["empty"]) == [("idle", "", "Empty")]
        assert c.list_groups(types=["consumer"]) == []
        # the members subscribe to t: its offsets cannot go while they are there
        err, per_partition = c.delete_offsets("busy", [("t", 0), ("u", 0)])
        assert err == ErrorCode.NONE
        assert per_partition == {("t", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
                                 ("u", 0): ErrorCode.NONE}
        assert c.fetch_offsets("busy", None).keys() == {("t", 0)}
        assert c.delete_groups(["busy", "idle", "nope"]) == {
            "busy": ErrorCode.NON_EMPTY_GROUP, "idle": ErrorCode.NONE,
            "nope": ErrorCode.GROUP_ID_NOT_FOUND}
        assert "idle" not in c.groups
    run(body)


@pytest.mark.parametrize("standalone", [False, True])
def test_offsets_of_empty_group_expire_after_retention(standalone: bool) -> None:
    async def body(c: GroupCoordinator, clock: Clock) -> None:
        if standalone:
            c.commit_offsets("g", "", None, -1, [OffsetCommit("t", 0, 1)])
        else:
            (a,) = await form_group(c, 1)
            c.commit_offsets("g", a.member_id, None, a.generation, [OffsetCommit("t", 0, 1)])
            c.leave_group("g", [(a.member_id, None)])
        assert c.expire_offsets(clock.advance(59_000)) == 0
        assert c.expire_offsets(clock.advance(1_000)) == 1
        assert "g" not in c.groups
    run(body, offsets_retention_ms=60_000)


def test_config_from_broker_settings() -> None:
    from pybroker.config import BrokerConfig

    config = CoordinatorConfig.from_config(BrokerConfig.load(None, environ={}, overrides={
        "group.initial.rebalance.delay.ms": "3000", "offsets.retention.minutes": "2",
        "group.min.session.timeout.ms": "1000", "offsets.topic.num.partitions": "3"}))
    assert (config.initial_rebalance_delay_ms, config.offsets_retention_ms,
            config.min_session_timeout_ms, config.offsets_topic_num_partitions) == \
        (3000, 120_000, 1000, 3)
    assert CoordinatorConfig.from_config({}) == CoordinatorConfig()

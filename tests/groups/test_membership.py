"""Group membership with real consumers (confluent-kafka in subprocesses) and a real broker.

Rebalances are observed through the consumers' own assign/revoke callbacks; the broker's
log says why a member left. Session timeouts are 6 s so a killed member goes quickly.
"""

from __future__ import annotations

import signal
from typing import Any

from tests.groups.helpers import Consumers, create_topic, produce, wait_until

ALL6 = {("t6", p) for p in range(6)}


def _sizes(members: list[Any]) -> list[int]:
    return sorted(len(c.assignment()) for c in members)


def _covers(members: list[Any], partitions: set[tuple[str, int]]) -> bool:
    union: set[tuple[str, int]] = set()
    for c in members:
        owned = c.assignment()
        if owned & union:
            return False  # a partition owned twice: not settled yet
        union |= owned
    return union == partitions


def test_three_share_six_then_fourth_joins_then_killed_member_moves(
        broker_factory: Any, consumers: Any) -> None:
    broker = broker_factory()
    create_topic(broker.bootstrap, "t6", 6)
    group: Consumers = consumers(broker)
    members = [group.start("g-share", ["t6"]) for _ in range(3)]
    wait_until(lambda: _sizes(members) == [2, 2, 2] and _covers(members, ALL6),
               what="three members with two partitions each")

    members.append(group.start("g-share", ["t6"]))
    wait_until(lambda: _sizes(members) == [1, 1, 2, 2] and _covers(members, ALL6),
               what="the fourth member to get partitions")

    victim = next(c for c in members if len(c.assignment()) == 2)
    orphaned = victim.assignment()
    victim.kill(signal.SIGKILL)
    rest = [c for c in members if c is not victim]
    wait_until(lambda: _sizes(rest) == [2, 2, 2] and _covers(rest, ALL6),
               what="the killed member's partitions to move")
    assert orphaned <= set().union(*(c.assignment() for c in rest))
    # it was the session timeout, not a LeaveGroup, that removed the killed member
    assert "members removed (session timeout)" in broker.log_text()


def test_cooperative_sticky_rebalances_incrementally(broker_factory: Any,
                                                     consumers: Any) -> None:
    broker = broker_factory()
    create_topic(broker.bootstrap, "t6", 6)
    group: Consumers = consumers(broker)
    conf = {"partition_assignment_strategy": "cooperative-sticky"}
    first = group.start("g-coop", ["t6"], **conf)
    wait_until(lambda: first.assignment() == ALL6, what="the first member to own all")
    second = group.start("g-coop", ["t6"], **conf)
    wait_until(lambda: _sizes([first, second]) == [3, 3] and _covers([first, second], ALL6),
               what="an even split")
    revokes = [e for e in first.snapshot() if e["event"] == "revoke"]
    # only what moved was revoked, and the first member never stopped owning the rest
    assert revokes and all(e["incremental"] for e in revokes)
    revoked = {(t, p) for e in revokes for t, p in e["partitions"]}
    assert revoked == second.assignment()
    assert all(len(e["partitions"]) < 6 for e in revokes)


def test_static_member_restart_keeps_partitions_without_rebalance(
        broker_factory: Any, consumers: Any) -> None:
    broker = broker_factory()
    create_topic(broker.bootstrap, "t6", 6)
    group: Consumers = consumers(broker)
    conf = {"session_timeout_ms": 20000}
    a = group.start("g-static", ["t6"], group_instance_id="static-a", **conf)
    b = group.start("g-static", ["t6"], group_instance_id="static-b", **conf)
    wait_until(lambda: _sizes([a, b]) == [3, 3] and _covers([a, b], ALL6),
               what="two static members with three partitions each")
    before_b = b.assignment()
    events_a = len(a.snapshot())
    rebalances = broker.log_text().count("group g-static: rebalancing")

    b.kill(signal.SIGKILL)  # no LeaveGroup; a static member is kept for its session
    b2 = group.start("g-static", ["t6"], group_instance_id="static-b", **conf)
    wait_until(lambda: b2.assignment() == before_b, what="the restarted member's partitions")
    produce(broker.bootstrap, "t6", [f"after-{i}" for i in range(60)])
    wait_until(lambda: len(b2.messages()) > 0, what="the restarted member to consume")

    assert [e for e in a.snapshot()[events_a:] if e["event"] in ("assign", "revoke")] == []
    assert broker.log_text().count("group g-static: rebalancing") == rebalances

"""Properties of the reassignment planner (``pybroker.cluster.rebalance_plan``), over
assignments hypothesis makes up: clusters that grew (brokers holding nothing), shrank
(replicas on brokers that are gone), with and without racks.

Every plan keeps each partition's replication factor, never puts two replicas of a
partition on one broker, and uses only the brokers it was given. A rebalance spreads
replicas and preferred leaders within one of even (without racks: with exactly the least
number of moves possible), puts each partition on as many racks as it can, and leaves a
cluster that is already even alone. A drain empties its broker and moves nothing else.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pybroker.cluster.placement import assign
from pybroker.cluster.rebalance_plan import Assignment, Plan, PlanError, drain, rebalance


@st.composite
def clusters(draw: Any, racks: str = "none", min_factor: int = 1
             ) -> tuple[Assignment, dict[int, str | None]]:
    """(assignment, eligible brokers with their racks). The assignment was made over a
    set of brokers that overlaps the eligible ones: some may be new (hold nothing), some
    gone. ``racks``: "none", "even" (as many brokers in each rack) or "any". Replication
    factors from ``min_factor`` (as far as the brokers allow) to 3."""
    if racks == "even":
        rack_total = draw(st.integers(1, 3))
        per_rack = draw(st.integers(1, 3))
        brokers = list(range(1, rack_total * per_rack + 1))
        rack_of: dict[int, str | None] = {b: f"r{(b - 1) % rack_total}" for b in brokers}
    else:
        brokers = list(range(1, draw(st.integers(1, 7)) + 1))
        rack_of = {b: (f"r{draw(st.integers(0, 2))}" if racks == "any" else None)
                   for b in brokers}
    old = draw(st.sets(st.integers(1, 9), min_size=1, max_size=7))
    assignment: Assignment = {}
    for topic in range(draw(st.integers(1, 3))):
        most = min(3, len(brokers), len(old))
        factor = draw(st.integers(min(min_factor, most), most))
        for partition in range(draw(st.integers(1, 8))):
            replicas = draw(st.permutations(sorted(old)))[:factor]
            assignment[(f"t{topic}", partition)] = list(replicas)
    return assignment, rack_of


def check_valid(plan: Plan, brokers: dict[int, str | None]) -> None:
    assert set(plan.target) == set(plan.current)
    for partition, replicas in plan.target.items():
        assert len(replicas) == len(plan.current[partition])
        assert len(set(replicas)) == len(replicas)
        assert set(replicas) <= set(brokers)


def spread(replicas: list[int], rack_of: dict[int, str | None]) -> int:
    return len({rack_of[b] for b in replicas})


def spread_of_every_partition_is_best(plan: Plan, rack_of: dict[int, str | None]) -> bool:
    racks = len(set(rack_of.values()))
    return all(spread(r, rack_of) == min(len(r), racks) for r in plan.target.values())


def within_one(counts: dict[int, int], brokers: dict[int, str | None]) -> bool:
    values = [counts.get(b, 0) for b in brokers]
    return max(values) - min(values) <= 1


def least_moves(assignment: Assignment, brokers: dict[int, str | None]) -> int:
    """No plan reaching counts within one of even moves fewer replicas: each move lowers
    one broker's count by one, so the excess above the even share (rounded up) and the
    shortfall below it (rounded down) are both lower bounds."""
    counts = {b: 0 for b in brokers}
    for replicas in assignment.values():
        for b in replicas:
            counts[b] += 1
    total = sum(counts.values())
    low, high = total // len(brokers), -(-total // len(brokers))
    excess = sum(max(0, c - high) for c in counts.values())
    shortfall = sum(max(0, low - c) for c in counts.values())
    return max(excess, shortfall)


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_rebalance_without_racks_is_even_with_the_fewest_moves(cluster):
    assignment, brokers = cluster
    plan = rebalance(assignment, brokers)
    check_valid(plan, brokers)
    assert within_one(plan.replica_counts(plan.target), brokers)
    if all(set(replicas) <= set(brokers) for replicas in assignment.values()):
        assert plan.moves == least_moves(assignment, brokers)


@settings(max_examples=300, deadline=None)
@given(clusters(racks="even"))
def test_rebalance_over_even_racks_is_even_and_rack_aware(cluster):
    assignment, brokers = cluster
    plan = rebalance(assignment, brokers)
    check_valid(plan, brokers)
    assert spread_of_every_partition_is_best(plan, brokers)
    assert within_one(plan.replica_counts(plan.target), brokers)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["none", "even"]).flatmap(lambda racks: clusters(racks, 2)))
def test_rebalance_spreads_preferred_leaders(cluster):
    """Every partition with a follower: reorders alone even out the leaders. (A partition
    of one replica is led where it is; the planner spreads those, but a mix of them and
    others can leave leaders two apart rather than move more data.)"""
    assignment, brokers = cluster
    assume(all(len(replicas) >= 2 for replicas in assignment.values()))
    plan = rebalance(assignment, brokers)
    assert within_one(plan.leader_counts(plan.target), brokers)


@settings(max_examples=300, deadline=None)
@given(clusters(racks="any"))
def test_rebalance_over_uneven_racks_spreads_every_partition(cluster):
    assignment, brokers = cluster
    plan = rebalance(assignment, brokers)
    check_valid(plan, brokers)
    assert spread_of_every_partition_is_best(plan, brokers)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["none", "even", "any"]).flatmap(lambda racks: clusters(racks)))
def test_a_rebalanced_cluster_is_left_alone(cluster):
    assignment, brokers = cluster
    balanced = rebalance(assignment, brokers).target
    again = rebalance(balanced, brokers)
    assert again.changes == {} and again.moves == 0


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 6), st.integers(1, 30), st.integers(1, 3), st.integers(0, 5))
def test_kafka_placement_of_a_new_topic_is_left_alone(brokers, partitions, factor, start):
    """A topic as Kafka's placement lays it out over all brokers: nothing to do (when its
    layout is even, which Kafka's is for leaders, and for replicas when the partitions
    fill whole rounds)."""
    assume(factor <= brokers)
    layout = assign(range(1, brokers + 1), partitions, factor, start_index=start % brokers)
    assignment = {("t", p): replicas for p, replicas in layout.items()}
    live = {b: None for b in range(1, brokers + 1)}
    plan = rebalance(assignment, live)
    if within_one(plan.replica_counts(assignment), live):
        assert plan.changes == {}


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["none", "even", "any"]).flatmap(lambda racks: clusters(racks)),
       st.data())
def test_drain_empties_one_broker_and_moves_nothing_else(cluster, data):
    assignment, brokers = cluster
    live = rebalance(assignment, brokers).target  # no replica on a gone broker
    victim = data.draw(st.sampled_from(sorted(brokers)))
    assume(all(len(r) < len(brokers) for r in live.values()))
    plan = drain(live, brokers, victim)
    check_valid(plan, brokers)
    assert not any(victim in replicas for replicas in plan.target.values())
    held = sum(victim in replicas for replicas in live.values())
    assert plan.moves == held
    for partition, replicas in live.items():
        if victim not in replicas:
            assert plan.target[partition] == replicas
        else:  # the newcomer takes the drained broker's place, as leader too
            assert [b for b in plan.target[partition] if b in replicas] == \
                [b for b in replicas if b != victim]


def test_growing_from_three_to_four_brokers():
    """Six partitions of three replicas over brokers 1-3; broker 4 joins and takes its
    share: 18 replicas / 4 brokers, so 4 or 5 each, and at least one preferred leader."""
    assignment = {("t", p): [(p + i) % 3 + 1 for i in range(3)] for p in range(6)}
    plan = rebalance(assignment, {1: None, 2: None, 3: None, 4: None})
    assert plan.replica_counts(plan.target)[4] == 4
    assert plan.moves == 4
    assert sorted(plan.leader_counts(plan.target).values()) == [1, 1, 2, 2]


def test_racks_win_over_even_counts():
    """Broker 1 alone in its rack: every two-replica partition keeps a replica there, as
    Kafka's rack-aware placement does, however uneven that makes the counts."""
    racks = {1: "a", 2: "b", 3: "b", 4: "b"}
    assignment = {("t", p): [2, 3] for p in range(4)}
    plan = rebalance(assignment, racks)
    assert all(1 in replicas for replicas in plan.target.values())
    assert spread_of_every_partition_is_best(plan, racks)


def test_brokers_missing_a_rack_turn_racks_off():
    racks = {1: "a", 2: "a", 3: None}
    assignment = {("t", 0): [1, 2]}
    assert rebalance(assignment, racks).changes == {}


def test_a_replication_factor_above_the_brokers_left_is_refused():
    with pytest.raises(PlanError, match="t-0 has 3 replicas, more than the 2 brokers"):
        drain({("t", 0): [1, 2, 3]}, {1: None, 2: None, 3: None}, 3)


def test_the_plan_does_not_depend_on_hash_order():
    """``rebalance`` shows a plan and ``rebalance --execute`` makes it again in another
    process: string hashing differs between processes, the plan must not."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    script = ("from pybroker.cluster.placement import assign\n"
              "from pybroker.cluster.rebalance_plan import rebalance\n"
              "layout = assign(range(1, 4), 300, 3, start_index=0)\n"
              "assignment = {(f't{p % 7}', p): r for p, r in layout.items()}\n"
              "racks = {b: f'r{b % 2}' for b in range(1, 6)}\n"
              "print(sorted(rebalance(assignment, racks).target.items()))\n")
    plans = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONHASHSEED=str(seed),
                                     PYTHONPATH=ROOT)).stdout
             for seed in (1, 2, 3)}
    assert len(plans) == 1

"""Replica placement against Kafka's own worked example and its invariants."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.cluster.placement import arranged, assign
from pybroker.errors import InvalidPartitionsError, InvalidReplicationFactorError


def test_kafka_doc_example() -> None:
    # AdminUtils.assignReplicasToBrokers' doc comment: 5 brokers, 10 partitions, rf 3,
    # start index 0 (shift 0). Read down each broker's column.
    got = assign([0, 1, 2, 3, 4], 10, 3, start_index=0)
    assert got == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }


def test_ids_are_sorted_and_not_positions() -> None:
    assert assign([30, 10, 20], 3, 2, start_index=0) == {0: [10, 20], 1: [20, 30], 2: [30, 10]}


def test_new_partitions_continue_the_leaders_round_robin() -> None:
    # As Kafka's: the first replicas continue from start_partition; the followers' shift
    # restarts from start_index (it grows only at multiples of the broker count crossed).
    whole = assign([1, 2, 3, 4], 12, 3, start_index=2)
    tail = assign([1, 2, 3, 4], 5, 3, start_index=2, start_partition=7)
    assert sorted(tail) == [7, 8, 9, 10, 11]
    assert [tail[p][0] for p in tail] == [whole[p][0] for p in range(7, 12)]
    assert tail[7] == [2, 1, 3] and tail[8] == [3, 4, 1]  # shift 2, then 3 from p8 on


@pytest.mark.parametrize("brokers,partitions,rf", [(3, 6, 3), (5, 50, 3), (4, 7, 2), (1, 4, 1)])
def test_leadership_and_replicas_spread_evenly(brokers: int, partitions: int, rf: int) -> None:
    ids = list(range(1, brokers + 1))
    got = assign(ids, partitions, rf)  # random start: any start must spread evenly
    assert sorted(got) == list(range(partitions))
    for replicas in got.values():
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert set(replicas) <= set(ids)
    leaders = Counter(r[0] for r in got.values())
    hosted = Counter(b for r in got.values() for b in r)
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in ids) <= 1
    assert max(hosted.values()) - min(hosted.get(b, 0) for b in ids) <= rf


def test_followers_of_one_leader_differ_across_rounds() -> None:
    # the growing shift: broker 0's partitions do not all have the same followers
    got = assign([0, 1, 2, 3], 16, 2, start_index=0)
    assert len({tuple(r) for r in got.values() if r[0] == 0}) > 1


def test_invalid_arguments() -> None:
    with pytest.raises(InvalidReplicationFactorError):
        assign([1, 2], 3, 3)
    with pytest.raises(InvalidReplicationFactorError):
        assign([1, 2], 3, 0)
    with pytest.raises(InvalidReplicationFactorError):
        assign([], 1, 1)
    with pytest.raises(InvalidPartitionsError):
        assign([1, 2], 0, 1)


# Rack-aware placement ------------------------------------------------------------------

KAFKA_RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


def test_kafka_rack_aware_example() -> None:
    # AdminUtilsTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers
    assert arranged(KAFKA_RACKS, KAFKA_RACKS) == [0, 3, 1, 5, 4, 2]
    assert arranged([0, 1, 2, 3, 4], KAFKA_RACKS) == [0, 3, 1, 4, 2]
    assert assign(KAFKA_RACKS, 7, 3, start_index=0, racks=KAFKA_RACKS) == {
        0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0], 5: [2, 0, 3],
        6: [0, 4, 2]}


def test_some_brokers_without_a_rack_place_rack_unaware() -> None:
    racks = {1: "a", 2: None, 3: "b", 4: "a"}
    assert assign(racks, 9, 3, start_index=1, racks=racks) == \
        assign(racks, 9, 3, start_index=1)


@st.composite
def racked_layouts(draw: st.DrawFn) -> tuple[dict[int, str], int, int, int | None]:
    brokers = draw(st.integers(1, 9))
    racks = {b: draw(st.sampled_from("abcd")) for b in range(1, brokers + 1)}
    return (racks, draw(st.integers(1, 30)), draw(st.integers(1, brokers)),
            draw(st.none() | st.integers(0, brokers - 1)))


@given(racked_layouts())
@settings(max_examples=300, deadline=None)
def test_rack_aware_replicas_span_as_many_racks_as_they_can(
        layout: tuple[dict[int, str], int, int, int | None]) -> None:
    racks, partitions, rf, start = layout
    got = assign(racks, partitions, rf, start_index=start, racks=racks)
    assert sorted(got) == list(range(partitions))
    rack_count = len(set(racks.values()))
    order = arranged(racks, racks)
    for p, replicas in got.items():
        assert len(replicas) == rf == len(set(replicas))
        assert len({racks[b] for b in replicas}) == min(rf, rack_count)
        if start is not None:  # leaders go round-robin over the interleaved brokers
            assert replicas[0] == order[(p + start) % len(order)]
    leaders = Counter(r[0] for r in got.values())
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in racks) <= 1

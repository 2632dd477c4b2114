"""Replica placement: Kafka's ``AdminUtils.assignReplicasToBrokers``, rack-unaware and
rack-aware.

With brokers sorted by id and ``n`` of them, partition ``p``'s first replica is broker
``(p + start) % n``: first replicas (the preferred leaders) go round-robin, so leadership
spreads evenly. Its other replicas follow at a shift, ``1 + (shift + j) % (n - 1)`` places
after the first for the j-th follower, where ``shift`` starts at a random value and grows
by one every ``n`` partitions: partitions that share a leader do not all share the same
followers, so a dead broker's load spreads over the others instead of landing on one.
Example, five brokers, start and shift 0 (Kafka's own doc comment):

    broker-0  broker-1  broker-2  broker-3  broker-4
    p0        p1        p2        p3        p4       (1st replica)
    p5        p6        p7        p8        p9       (1st replica)
    p4        p0        p1        p2        p3       (2nd replica)
    p8        p9        p5        p6        p7       (2nd replica)

New partitions of an existing topic (CreatePartitions) continue the pattern with
``start_partition`` = the current partition count.

Rack-aware (Kafka's ``assignReplicasToBrokersRackAware``), when every broker has a
``broker.rack``: the same pattern over the brokers interleaved by rack (``arranged``:
racks sorted, the first broker of each, then the second of each, ...), so consecutive
brokers sit on distinct racks, and a follower candidate is skipped while it is on a rack
the partition already uses and some rack is unused, or already holds a replica while
some broker holds none: each partition's replicas lie on ``min(replication factor,
racks)`` racks. The followers' shift counts in whole rounds of racks. Where only some
brokers have a rack, placement is rack-unaware (Kafka's ZooKeeper-mode CreateTopics
refused that case unless told to ignore racks; pybroker places as if none had one).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping

from pybroker.errors import InvalidPartitionsError, InvalidReplicationFactorError


def arranged(broker_ids: Iterable[int],
             racks: Mapping[int, str | None] | None = None) -> list[int]:
    """The brokers in the order placement walks them: by id, or, when every one has a
    rack in ``racks``, interleaved by rack (Kafka's ``getRackAlternatedBrokerList``)."""
    brokers = sorted(set(broker_ids))
    by_rack: dict[str, list[int]] = {}
    for broker in brokers:
        rack = (racks or {}).get(broker)
        if rack is None:
            return brokers
        by_rack.setdefault(rack, []).append(broker)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    return [column[row] for row in range(max(map(len, columns), default=0))
            for column in columns if row < len(column)]


def assign(broker_ids: Iterable[int], partitions: int, replication_factor: int,
           start_index: int | None = None, start_partition: int = 0,
           racks: Mapping[int, str | None] | None = None) -> dict[int, list[int]]:
    """Replicas of partitions ``start_partition .. start_partition + partitions - 1``.

    ``start_index`` fixes both the first replica's start and the followers' initial shift
    (Kafka's ``fixedStartIndex``, a position in ``arranged``); None picks each at random,
    as Kafka does. ``racks``: each broker's ``broker.rack``; rack-aware when every broker
    has one.
    """
    brokers = arranged(broker_ids, racks)
    rack_of = {b: (racks or {}).get(b) for b in brokers}
    if None in rack_of.values():  # rack-unaware: as if every broker shared one rack
        rack_of = dict.fromkeys(brokers)
    rack_count = len(set(rack_of.values()))
    n = len(brokers)
    if replication_factor < 1:
        raise InvalidReplicationFactorError(
            f"replication factor must be at least 1, not {replication_factor}")
    if replication_factor > n:
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} larger than the {n} available brokers")
    if partitions < 1:
        raise InvalidPartitionsError(f"number of partitions must be at least 1, not {partitions}")
    start = start_index if start_index is not None else random.randrange(n)
    shift = start_index if start_index is not None else random.randrange(n)
    out: dict[int, list[int]] = {}
    partition = max(0, start_partition)
    for _ in range(partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [brokers[first]]
        used_racks = {rack_of[brokers[first]]}
        candidate = 0
        while len(replicas) < replication_factor:
            broker = brokers[(first + 1 + (shift * rack_count + candidate) % (n - 1)) % n]
            candidate += 1
            rack = rack_of[broker]
            if ((rack not in used_racks or len(used_racks) == rack_count)
                    and broker not in replicas):
                replicas.append(broker)
                used_racks.add(rack)
        out[partition] = replicas
        partition += 1
    return out

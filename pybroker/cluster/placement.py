"""Replica placement: Kafka's rack-unaware ``AdminUtils.assignReplicasToBrokers``.

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
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from pybroker.errors import InvalidPartitionsError, InvalidReplicationFactorError


def assign(broker_ids: Iterable[int], partitions: int, replication_factor: int,
           start_index: int | None = None, start_partition: int = 0) -> dict[int, list[int]]:
    """Replicas of partitions ``start_partition .. start_partition + partitions - 1``.

    ``start_index`` fixes both the first replica's start and the followers' initial shift
    (Kafka's ``fixedStartIndex``); None picks each at random, as Kafka does.
    """
    brokers = sorted(set(broker_ids))
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
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        out[partition] = replicas
        partition += 1
    return out

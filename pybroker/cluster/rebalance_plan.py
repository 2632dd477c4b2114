"""Reassignment plans for growing and shrinking a cluster: where each partition's replicas
should be, reached by moving as few replicas as possible.

A plan is pure: it reads the current assignment (replicas of each partition, the first
being the preferred leader) and the brokers that may hold replicas with their
``broker.rack``, and says the target replicas of every partition. ``pybroker cluster
rebalance|drain`` show it and hand its changes to AlterPartitionReassignments.

``rebalance`` goes in four steps, each moving only what the one before left wrong:

1. *evacuate*: a replica on a broker that may not hold one (drained, or gone) is replaced
   by the least loaded eligible broker not in the partition, on a rack the partition
   does not use yet where there is one;
2. *spread racks*: a partition whose replicas share a rack while another rack is free
   gets a replica moved there (Kafka's rack-aware placement: the replicas of a partition
   on ``min(replication factor, racks)`` distinct racks);
3. *even out replicas*: while a broker holds at least two replicas more than another, one
   of its replicas moves to the less loaded broker, unless that would put two replicas
   of the partition on one rack; where racks block every such move, along the shortest
   chain of moves that gets there (A's replica of p to B, B's of q to C). Without racks
   this ends with every count within one of even after exactly as many moves as the
   excess above the even share, or the shortfall below it (whichever is more): each move
   takes one from the fullest broker to the emptiest, and no plan can do with fewer.
   Which replica moves is chosen for the leaders' sake (``_move_cost``);
4. *even out leaders*: preferred leaders are spread by reordering replicas, which moves
   no data. A broker leading at least two partitions more than another hands leadership
   along the shortest chain of partitions (it leads one where B is a replica, B leads one
   where C is...) to it, so every broker on the chain but the ends keeps its count. When
   every partition has two replicas or more this ends within one of even; a partition of
   one replica is led where it lies, and the plan moves no data for leadership alone.

A cluster already even in all four senses gets an empty plan. ``drain`` is step 1 alone
with the drained broker ineligible: only its replicas move.

Racks count only when every eligible broker has one (as Kafka refuses a rack-aware
assignment over brokers of which some have no rack). Where racks are uneven (one broker
alone in its rack) rack spread wins over even counts, as in Kafka's placement.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Partition = tuple[str, int]
Assignment = dict[Partition, list[int]]


class PlanError(ValueError):
    """No plan satisfies the request (fewer eligible brokers than a replication factor)."""


@dataclass(frozen=True)
class Plan:
    """The current and target replicas of every partition planned (targets in preferred
    leader order)."""

    current: Assignment
    target: Assignment

    @property
    def changes(self) -> Assignment:
        """The partitions whose target differs from their current replicas (a reorder
        included), by partition."""
        return {p: self.target[p] for p in sorted(self.current)
                if self.target[p] != self.current[p]}

    def adding(self, partition: Partition) -> list[int]:
        return [b for b in self.target[partition] if b not in self.current[partition]]

    def removing(self, partition: Partition) -> list[int]:
        return [b for b in self.current[partition] if b not in self.target[partition]]

    @property
    def moves(self) -> int:
        """Replicas to copy to a new broker."""
        return sum(len(self.adding(p)) for p in self.current)

    def replica_counts(self, assignment: Assignment) -> dict[int, int]:
        counts: dict[int, int] = {}
        for replicas in assignment.values():
            for broker in replicas:
                counts[broker] = counts.get(broker, 0) + 1
        return counts

    def leader_counts(self, assignment: Assignment) -> dict[int, int]:
        counts: dict[int, int] = {}
        for replicas in assignment.values():
            if replicas:
                counts[replicas[0]] = counts.get(replicas[0], 0) + 1
        return counts


def rebalance(assignment: Mapping[Partition, list[int]],
              racks: Mapping[int, str | None]) -> Plan:
    """Spread the replicas and preferred leaders of ``assignment`` evenly over the brokers
    of ``racks`` (broker id -> ``broker.rack`` or None), moving off any other broker."""
    layout = _Layout(assignment, racks)
    layout.evacuate()
    layout.spread_racks()
    layout.even_out_replicas()
    layout.even_out_leaders()
    return Plan({p: list(r) for p, r in assignment.items()}, layout.replicas)


def drain(assignment: Mapping[Partition, list[int]], racks: Mapping[int, str | None],
          broker: int) -> Plan:
    """Move every replica off ``broker`` onto the other brokers of ``racks``; nothing else
    moves."""
    layout = _Layout(assignment, {b: r for b, r in racks.items() if b != broker})
    layout.evacuate()
    return Plan({p: list(r) for p, r in assignment.items()}, layout.replicas)


class _Layout:
    """A target assignment being built, with each eligible broker's replica and leader
    counts kept up to date."""

    def __init__(self, assignment: Mapping[Partition, list[int]],
                 racks: Mapping[int, str | None]) -> None:
        self.replicas: Assignment = {p: list(r) for p, r in sorted(assignment.items())}
        self.brokers = sorted(racks)
        self.rack_aware = bool(racks) and all(rack is not None for rack in racks.values())
        self.rack_of: dict[int, str | None] = dict(racks) if self.rack_aware \
            else {b: None for b in racks}
        self.rack_total = len(set(self.rack_of.values())) if self.rack_aware else 0
        self.count = {b: 0 for b in self.brokers}
        self.leaders = {b: 0 for b in self.brokers}
        # partitions of one replica, on each broker: leaders no reorder can change
        self.sole = {b: 0 for b in self.brokers}
        # the partitions each broker holds, and leads: dicts as ordered sets, so that
        # walking them is in an order the input decides (a plan shown and the plan run
        # by --execute are the same), not in hash order
        self.holding: dict[int, dict[Partition, None]] = {b: {} for b in self.brokers}
        self.leading: dict[int, dict[Partition, None]] = {b: {} for b in self.brokers}
        # (high, low) pairs no replica can move between; one stays so until a move
        # touches a partition of either broker
        self.blocked: set[tuple[int, int]] = set()
        for partition, replicas in self.replicas.items():
            if len(replicas) == 1 and replicas[0] in self.sole:
                self.sole[replicas[0]] += 1
            for broker in replicas:
                if broker in self.count:
                    self.count[broker] += 1
                    self.holding[broker][partition] = None
            if replicas and replicas[0] in self.leaders:
                self.leaders[replicas[0]] += 1
                self.leading[replicas[0]][partition] = None

    # -- racks ---------------------------------------------------------------------------

    def spread(self, replicas: Iterable[int]) -> int:
        """Distinct racks among ``replicas`` (0 without racks)."""
        return len(self.racks_used(replicas)) if self.rack_aware else 0

    def wanted_spread(self, replicas: list[int]) -> int:
        return min(len(replicas), self.rack_total)

    def racks_used(self, replicas: Iterable[int]) -> set[str | None]:
        return {self.rack_of[b] for b in replicas if b in self.rack_of}

    # -- changes -------------------------------------------------------------------------

    def replace(self, partition: Partition, old: int, new: int) -> None:
        replicas = self.replicas[partition]
        index = replicas.index(old)
        replicas[index] = new
        touched = {old, *replicas}
        self.blocked = {pair for pair in self.blocked if not touched.intersection(pair)}
        if old in self.count:
            self.count[old] -= 1
            del self.holding[old][partition]
            if index == 0:
                self.leaders[old] -= 1
                del self.leading[old][partition]
        self.count[new] += 1
        self.holding[new][partition] = None
        if index == 0:
            self.leaders[new] += 1
            self.leading[new][partition] = None
        if len(replicas) == 1:
            self.sole[new] += 1
            if old in self.sole:
                self.sole[old] -= 1

    def lead(self, partition: Partition, broker: int) -> None:
        """Make ``broker`` (a replica) the partition's preferred leader, swapping places
        with the one it replaces."""
        replicas = self.replicas[partition]
        index = replicas.index(broker)
        self.leaders[replicas[0]] -= 1
        del self.leading[replicas[0]][partition]
        self.leaders[broker] += 1
        self.leading[broker][partition] = None
        replicas[0], replicas[index] = broker, replicas[0]

    # -- steps ---------------------------------------------------------------------------

    def evacuate(self) -> None:
        for partition, replicas in self.replicas.items():
            for index, broker in enumerate(list(replicas)):
                if broker in self.count:
                    continue
                others = [b for b in replicas if b != broker]
                candidates = [b for b in self.brokers if b not in replicas]
                if not candidates:
                    topic, number = partition
                    raise PlanError(f"{topic}-{number} has {len(replicas)} replicas, more "
                                    f"than the {len(self.brokers)} brokers that may hold "
                                    "them")
                used = self.racks_used(others)

                def fitness(b: int, leading: bool = index == 0,
                            used: set[str | None] = used) -> tuple[bool, int, int, int]:
                    return (self.rack_aware and self.rack_of[b] in used, self.count[b],
                            self.leaders[b] if leading else 0, b)

                self.replace(partition, broker, min(candidates, key=fitness))

    def spread_racks(self) -> None:
        if not self.rack_aware:
            return
        for partition, replicas in self.replicas.items():
            while self.spread(replicas) < self.wanted_spread(replicas):
                used = self.racks_used(replicas)
                shared = [b for b in replicas
                          if sum(self.rack_of[o] == self.rack_of[b] for o in replicas) > 1]
                # a follower of the fullest broker goes
                old = max(shared, key=lambda b: (replicas[0] != b, self.count[b], -b))
                new = min((b for b in self.brokers if self.rack_of[b] not in used),
                          key=lambda b: (self.count[b], b))
                self.replace(partition, old, new)

    def even_out_replicas(self) -> None:
        while self._move_one_replica() or self._move_along_a_chain():
            pass

    def _move_one_replica(self) -> bool:
        pairs = sorted(((high, low) for high in self.brokers for low in self.brokers
                        if self.count[high] - self.count[low] >= 2),
                       key=lambda pair: (-self.count[pair[0]], self.count[pair[1]], pair))
        for high, low in pairs:
            if (high, low) in self.blocked:
                continue
            partition = self._replica_to_move(high, low)
            if partition is not None:
                self.replace(partition, high, low)
                return True
            self.blocked.add((high, low))
        return False

    def _replica_to_move(self, high: int, low: int) -> Partition | None:
        """The first of ``high``'s partitions that may move to ``low`` at the lowest
        ``_move_cost``, or None."""
        best: tuple[int, Partition] | None = None
        # nothing beats a follower unless the partitions of one replica need evening
        good_enough = 0 if self.sole[high] - self.sole[low] >= 2 else 1
        holding = self.holding[low]
        for partition in self.holding[high]:
            if partition in holding \
                    or not self._keeps_spread(self.replicas[partition], high, low):
                continue
            cost = self._move_cost(partition, high, low)
            if best is None or cost < best[0]:
                best = (cost, partition)
                if cost <= good_enough:
                    break
        return None if best is None else best[1]

    def _move_along_a_chain(self) -> bool:
        """Where racks block every direct move (the emptiest broker's rack is already in
        each partition of the fullest), the shortest chain of moves from a broker to one
        holding at least two replicas fewer: A's replica of p to B, B's of q to C, ...
        Every broker on the chain but the ends keeps its count."""
        for start in sorted(self.brokers, key=lambda b: (-self.count[b], b)):
            came_from: dict[int, tuple[int, Partition]] = {}
            queue = deque([start])
            while queue:
                broker = queue.popleft()
                if self.count[broker] <= self.count[start] - 2:
                    for partition, old, new in self._chain(came_from, start, broker):
                        self.replace(partition, old, new)
                    return True
                on_chain = {p for p, _, _ in self._chain(came_from, start, broker)}
                for partition in self.holding[broker]:
                    if partition in on_chain:
                        continue
                    replicas = self.replicas[partition]
                    for other in self.brokers:
                        if other != start and other not in came_from \
                                and other not in replicas \
                                and self._keeps_spread(replicas, broker, other):
                            came_from[other] = (broker, partition)
                            queue.append(other)
        return False

    @staticmethod
    def _chain(came_from: dict[int, tuple[int, Partition]], start: int,
               end: int) -> list[tuple[Partition, int, int]]:
        """(partition, from, to) of each move on the way from ``start`` to ``end``."""
        moves = []
        while end != start:
            previous, partition = came_from[end]
            moves.append((partition, previous, end))
            end = previous
        return moves[::-1]

    def _move_cost(self, partition: Partition, high: int, low: int) -> int:
        """Which of ``high``'s replicas to move to ``low`` first (lowest). A partition of one
        replica is led wherever it is, so these are spread like the replicas: one of them
        while ``high`` holds at least two more than ``low``. Then a follower, so that the
        leader counts stay as they are; then the leader of a partition with other
        replicas, whose leadership step 4 may hand to one of them; another partition of
        one replica last."""
        replicas = self.replicas[partition]
        if len(replicas) == 1:
            return 0 if self.sole[high] - self.sole[low] >= 2 else 3
        return 1 if replicas[0] != high else 2

    def _keeps_spread(self, replicas: list[int], old: int, new: int) -> bool:
        """Whether ``new`` may take ``old``'s place without the partition losing a rack:
        it brings a rack the others lack, or ``old``'s rack stays with another."""
        if not self.rack_aware or self.rack_of[old] == self.rack_of[new]:
            return True
        others = {self.rack_of[b] for b in replicas if b != old}
        return self.rack_of[new] not in others or self.rack_of[old] in others

    def even_out_leaders(self) -> None:
        while self._hand_over_one_leadership():
            pass

    def _hand_over_one_leadership(self) -> bool:
        for start in sorted(self.brokers, key=lambda b: (-self.leaders[b], b)):
            chain = self._leadership_chain(start)
            if chain:
                for partition, broker in chain:
                    self.lead(partition, broker)
                return True
        return False

    def _leadership_chain(self, start: int) -> list[tuple[Partition, int]]:
        """The shortest chain of hand-overs from ``start`` to a broker leading at least two
        partitions fewer: (partition, its new preferred leader) in order; empty if none."""
        came_from: dict[int, tuple[int, Partition]] = {}
        queue = deque([start])
        others = len(self.brokers) - 1
        while queue and len(came_from) < others:
            broker = queue.popleft()
            for partition in self.leading[broker]:
                for follower in self.replicas[partition][1:]:
                    if follower == start or follower in came_from:
                        continue
                    came_from[follower] = (broker, partition)
                    if self.leaders[follower] <= self.leaders[start] - 2:
                        return [(p, new) for p, _, new
                                in self._chain(came_from, start, follower)]
                    queue.append(follower)
                if len(came_from) == others:
                    break  # every broker reached, none leading few enough
        return []

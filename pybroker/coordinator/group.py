"""A classic consumer group: its state, generation, members and committed offsets.

States and the transitions allowed between them (Kafka's classic group protocol)::

    Empty ──join──> PreparingRebalance ──all joined / join timeout──> CompletingRebalance
      ^                 ^      │                                           │
      │                 │      └──no member left──> Empty                  │ leader's SyncGroup
      │                 └──── member joins, leaves, expires ──── Stable <──┘
      └── (any) ──> Dead (deleted, or emptied and every offset expired)

The generation id goes up by one each time a rebalance completes; requests carrying another
generation are fenced with ILLEGAL_GENERATION. The protocol decisions (who is leader, which
assignor wins) live here; the timing and the replies live in ``Membership``.

Not thread-safe: owned by the coordinator, used only on the event loop thread.
"""

from __future__ import annotations

import enum
from collections import Counter
from typing import NamedTuple

from pybroker.coordinator.member import Member
from pybroker.errors import ErrorCode


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                                     GroupState.EMPTY},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.DEAD: {GroupState.STABLE, GroupState.PREPARING_REBALANCE,
                      GroupState.COMPLETING_REBALANCE, GroupState.EMPTY, GroupState.DEAD},
}


class OffsetAndMetadata(NamedTuple):
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1


class Group:
    __slots__ = ("group_id", "state", "state_timestamp", "generation", "protocol_type",
                 "protocol_name", "leader_id", "members", "static_members",
                 "pending_members", "pending_sync", "join_not_before", "join_deadline",
                 "sync_deadline", "offsets")

    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.state_timestamp = now_ms
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        # member ids handed out with MEMBER_ID_REQUIRED, with the time they must rejoin by
        self.pending_members: dict[str, int] = {}
        # members of the current generation that have not sent SyncGroup yet
        self.pending_sync: set[str] = set()
        self.join_not_before = 0  # initial rebalance delay of a group that was empty
        self.join_deadline = 0    # rebalance timeout of the current PreparingRebalance
        self.sync_deadline = 0
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}

    def __repr__(self) -> str:
        return (f"Group({self.group_id!r}, {self.state.value}, gen={self.generation}, "
                f"members={len(self.members)})")

    # state -----------------------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(f"group {self.group_id}: illegal transition "
                               f"{self.state.value} -> {state.value}")
        self.state = state
        self.state_timestamp = now_ms

    def can_rebalance(self) -> bool:
        return self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                              GroupState.EMPTY)

    # membership ------------------------------------------------------------------------

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None \
                and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, new_member_id: str) -> Member:
        """A static member came back with a new member id: same member, new id."""
        old_id = self.static_members[instance_id]
        member = self.members.pop(old_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[instance_id] = new_member_id
        if self.leader_id == old_id:
            self.leader_id = new_member_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_member_id)
        return member

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def validate_member(self, member_id: str, instance_id: str | None) -> ErrorCode:
        """NONE if the request comes from the current holder of this identity, else why not."""
        if instance_id is not None:
            known = self.static_members.get(instance_id)
            if known is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            return ErrorCode.NONE if known == member_id else ErrorCode.FENCED_INSTANCE_ID
        return ErrorCode.NONE if member_id in self.members else ErrorCode.UNKNOWN_MEMBER_ID

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def max_rebalance_timeout(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # protocol selection ----------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {name for name, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Each member votes for its first protocol that all members support; most votes
        wins, ties going to the leader's preference order."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise RuntimeError(f"group {self.group_id}: no protocol common to all members")
        votes = Counter(m.vote(candidates) for m in self.members.values())
        leader = self.members.get(self.leader_id or "")
        order = leader.protocol_names() if leader else sorted(candidates)
        rank = {name: i for i, name in enumerate(order)}
        return max(votes, key=lambda name: (votes[name], -rank.get(name, len(rank))))

    def init_next_generation(self, now_ms: int) -> None:
        self.generation += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)

    # what the group is subscribed to ---------------------------------------------------

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members of a consumer group subscribe to, None if unknown."""
        from pybroker.coordinator.consumer_protocol import subscription_topics

        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = subscription_topics(member.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics

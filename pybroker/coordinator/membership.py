"""Group membership: JoinGroup, SyncGroup, Heartbeat and LeaveGroup, their timers, and
the group state machine they drive (``Group``, pybroker/coordinator/group.py).

JoinGroup and SyncGroup are long polls: the caller awaits a future that ``Membership``
resolves when the rebalance moves on (all members joined, the leader's assignment
arrived, a timeout fired). Nothing else waits.

Timing: each member has a heartbeat deadline and each rebalance a join (and then a sync)
deadline. Whenever one is set, ``(deadline, group)`` goes on a heap; ``poll(now)``
(the coordinator's tick, or a test's clock) pops what is due and re-checks those groups
only, so the cost of timers is proportional to what expires, not to the number of groups.

Persistence: a group's metadata (generation, protocol, leader, members with their
subscriptions and assignments) is written to ``__consumer_offsets`` when a generation
completes, when the leader's assignment arrives and when a static member takes over its
old id. The leader's SyncGroup and a static takeover are answered once the record is
committed (``CoordinatorLog.replicated``); a group whose record never got there rebalances.
``restore`` rebuilds a group from its last record when its partition loads.

Every call here is for a group this broker coordinates: the ``GroupCoordinator`` answers
the others (and every call while it shuts down) before they get here. The semantics follow
Kafka's classic ``GroupCoordinator``; departures are noted inline. Not thread-safe: every
method runs on the broker's event loop thread.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import uuid
from collections.abc import Callable, Coroutine, Iterable
from typing import NamedTuple, TypeVar

from pybroker.coordinator import internal_topic
from pybroker.coordinator import offset_store as records
from pybroker.coordinator.config import CoordinatorConfig
from pybroker.coordinator.group import Group, GroupState
from pybroker.coordinator.member import NEW_MEMBER_JOIN_TIMEOUT_MS, Member
from pybroker.errors import ErrorCode, KafkaError

log = logging.getLogger("pybroker.coordinator")
T = TypeVar("T")

# a JoinGroup's member fields: client id, client host, rebalance and session timeouts (ms),
# protocol type, (protocol name, metadata) in the member's order of preference
_JoinSpec = tuple[str, str, int, int, str, list[tuple[str, bytes]]]


class JoinResult(NamedTuple):
    error: ErrorCode
    member_id: str
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: list[tuple[str, str | None, bytes]] = []  # for the leader only
    skip_assignment: bool = False


class SyncResult(NamedTuple):
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class MemberDescription(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


class GroupDescription(NamedTuple):
    error: ErrorCode
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    members: list[MemberDescription]


class Membership:
    """See module doc. ``groups`` is the coordinator's (shared with the committed offsets
    and the partition loads); ``spawn`` runs a background task the coordinator cancels
    when it stops."""

    def __init__(self, groups: dict[str, Group], store: internal_topic.CoordinatorLog,
                 config: CoordinatorConfig, now_ms: Callable[[], int],
                 spawn: Callable[[Coroutine[object, object, None]], asyncio.Task[None]]
                 ) -> None:
        self.groups = groups
        self._store = store
        self.config = config
        self._now_ms = now_ms
        self._spawn = spawn
        self._timers: list[tuple[int, int, str]] = []
        self._seq = itertools.count()

    def restore(self, group: Group, record: records.GroupRecord, now: int) -> None:
        """Give ``group`` the members and generation of its last metadata record: Stable
        with fresh session deadlines if it has members, so they see no rebalance."""
        group.generation = record.generation
        group.protocol_type = record.protocol_type or None
        group.protocol_name = record.protocol
        group.state_timestamp = record.state_timestamp if record.state_timestamp >= 0 else now
        for m in record.members:
            member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.rebalance_timeout_ms, m.session_timeout_ms,
                            record.protocol_type, [(record.protocol or "", m.subscription)])
            member.assignment = m.assignment
            member.heartbeat_deadline = now + m.session_timeout_ms
            group.add(member)
            self._schedule(group, member.heartbeat_deadline)
        group.protocol_type = record.protocol_type or None
        group.leader_id = record.leader if record.leader in group.members \
            else next(iter(group.members), None)
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY

    @staticmethod
    def release(group: Group) -> None:
        """Answer the group's parked JoinGroup/SyncGroup with NOT_COORDINATOR: it is not
        coordinated here any more, its clients find the coordinator again and rejoin."""
        for member in group.members.values():
            member.complete_join(JoinResult(ErrorCode.NOT_COORDINATOR, member.member_id))
            member.complete_sync(SyncResult(ErrorCode.NOT_COORDINATOR))

    # timers ----------------------------------------------------------------------------

    def _schedule(self, group: Group, deadline: int) -> None:
        heapq.heappush(self._timers, (deadline, next(self._seq), group.group_id))

    def poll(self, now: int) -> None:
        """Run the timers due at ``now`` (ms): session expirations, rebalance deadlines."""
        due: dict[str, None] = {}
        while self._timers and self._timers[0][0] <= now:
            due[heapq.heappop(self._timers)[2]] = None
        for group_id in due:
            group = self.groups.get(group_id)
            if group is not None:
                self._check_group(group, now)

    def _check_group(self, group: Group, now: int) -> None:
        for member_id, deadline in list(group.pending_members.items()):
            if deadline <= now:
                del group.pending_members[member_id]
        expired = [m for m in group.members.values() if not m.should_keep_alive(now)]
        if expired:
            self._remove_members(group, expired, "session timeout", now)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            if now >= group.join_deadline:
                self._complete_join(group, now)
            else:
                self._try_complete_join(group, now)
        if group.pending_sync and now >= group.sync_deadline \
                and group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            late = [group.members[m] for m in group.pending_sync if m in group.members]
            self._remove_members(group, late, "no SyncGroup within the rebalance timeout", now)

    # JoinGroup -------------------------------------------------------------------------

    def join_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                   client_id: str, client_host: str, session_timeout_ms: int,
                   rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]],
                   require_known_member_id: bool = True) -> asyncio.Future[JoinResult]:
        """The future of the member's answer: done at once, or parked until the rebalance
        completes. A caller that stops waiting (its client went away) leaves it parked:
        the member still counts as joining, as in Kafka, and is removed if it never
        syncs."""
        now = self._now_ms()
        if rebalance_timeout_ms < 0:  # JoinGroup v0 has none: it was the session timeout
            rebalance_timeout_ms = session_timeout_ms
        if not (self.config.min_session_timeout_ms <= session_timeout_ms
                <= self.config.max_session_timeout_ms):
            return answered(JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id))
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return answered(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
            group = self.groups[group_id] = Group(group_id, now)
        if group.is_in(GroupState.DEAD):
            return answered(JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id))
        if not group.supports_protocols(protocol_type, protocols):
            return answered(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
        is_known = member_id in group.members or member_id in group.pending_members
        if not is_known and len(group.members) >= self.config.max_group_size \
                and group_instance_id not in group.static_members:
            return answered(JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id))

        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        spec = (client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                protocol_type, protocols)
        if not member_id:
            self._join_new_member(group, future, group_instance_id,
                                  require_known_member_id, spec, now)
        else:
            self._join_known_member(group, future, member_id, group_instance_id, spec, now)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group, now)
        return future

    def _join_new_member(self, group: Group, future: asyncio.Future[JoinResult],
                         instance_id: str | None, require_known: bool, spec: _JoinSpec,
                         now: int) -> None:
        client_id, _, _, session_timeout_ms, _, _ = spec
        new_id = f"{client_id}-{uuid.uuid4()}"
        if instance_id is not None:
            if instance_id in group.static_members:
                self._rejoin_static_member(group, future, instance_id, new_id, spec, now)
            else:
                self._add_member_and_rebalance(group, future, new_id, instance_id, spec, now)
        elif require_known:
            # KIP-394: hand out the id first, so a client that times out and retries the
            # join does not leave a ghost member holding the rebalance up.
            group.pending_members[new_id] = now + session_timeout_ms
            self._schedule(group, now + session_timeout_ms)
            future.set_result(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, new_id))
        else:
            self._add_member_and_rebalance(group, future, new_id, None, spec, now)

    def _join_known_member(self, group: Group, future: asyncio.Future[JoinResult],
                           member_id: str, instance_id: str | None, spec: _JoinSpec,
                           now: int) -> None:
        if member_id in group.pending_members:
            if instance_id is not None:
                future.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
                return
            del group.pending_members[member_id]
            self._add_member_and_rebalance(group, future, member_id, None, spec, now)
            return
        error = group.validate_member(member_id, instance_id)
        if error:
            future.set_result(JoinResult(error, member_id))
            return
        member = group.members[member_id]
        protocols = spec[5]
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, future, spec, now)
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            if member.matches(protocols):  # a retried join: answer it again
                future.set_result(self._join_result(group, member))
            else:
                self._update_member_and_rebalance(group, member, future, spec, now)
        elif group.is_in(GroupState.STABLE):
            if member_id == group.leader_id or not member.matches(protocols):
                # the leader rejoins to rebalance (e.g. the topic metadata changed)
                self._update_member_and_rebalance(group, member, future, spec, now)
            else:
                future.set_result(self._join_result(group, member))
        else:
            future.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        is_leader = member.member_id == group.leader_id
        members = [(m.member_id, m.group_instance_id, m.metadata(group.protocol_name or ""))
                   for m in group.members.values()] if is_leader else []
        return JoinResult(ErrorCode.NONE, member.member_id, group.generation,
                          group.protocol_type, group.protocol_name, group.leader_id or "",
                          members)

    def _add_member_and_rebalance(self, group: Group, future: asyncio.Future[JoinResult],
                                  member_id: str, instance_id: str | None,
                                  spec: _JoinSpec, now: int) -> None:
        client_id, client_host, rebalance_ms, session_ms, protocol_type, protocols = spec
        member = Member(member_id, instance_id, client_id, client_host, rebalance_ms,
                        session_ms, protocol_type, list(protocols))
        member.is_new = True
        member.join_future = future
        member.heartbeat_deadline = now + NEW_MEMBER_JOIN_TIMEOUT_MS
        group.add(member)
        self._schedule(group, member.heartbeat_deadline)
        self._maybe_prepare_rebalance(group, f"{member_id} joined", now)

    def _update_member_and_rebalance(self, group: Group, member: Member,
                                     future: asyncio.Future[JoinResult],
                                     spec: _JoinSpec, now: int) -> None:
        _, _, member.rebalance_timeout_ms, member.session_timeout_ms, _, protocols = spec
        member.protocols = list(protocols)
        # a join retried on a new connection replaces the parked one
        member.complete_join(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        member.join_future = future
        self._maybe_prepare_rebalance(group, f"{member.member_id} rejoined", now)

    def _rejoin_static_member(self, group: Group, future: asyncio.Future[JoinResult],
                              instance_id: str, new_id: str, spec: _JoinSpec,
                              now: int) -> None:
        """A known group.instance.id joins with no member id: it restarted. It takes over
        its old member (fencing the old id); a Stable group keeps its assignment."""
        _, _, rebalance_ms, session_ms, _, protocols = spec
        old_id = group.static_members[instance_id]
        old = group.members[old_id]
        old.complete_join(JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id))
        old.complete_sync(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        leader_before = group.leader_id or ""
        saved = (old.protocols, old.rebalance_timeout_ms, old.session_timeout_ms)
        member = group.replace_static_member(instance_id, new_id)
        member.protocols = list(protocols)
        member.rebalance_timeout_ms, member.session_timeout_ms = rebalance_ms, session_ms
        member.heartbeat_deadline = now + session_ms
        self._schedule(group, member.heartbeat_deadline)
        if group.is_in(GroupState.STABLE) and group.select_protocol() == group.protocol_name:
            def revert() -> None:
                group.replace_static_member(instance_id, old_id)
                member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = saved

            try:
                written = self._store_group(group, now)
            except KafkaError as exc:
                revert()
                future.set_result(JoinResult(internal_topic.store_error(exc), ""))
                return
            # The old leader id is returned so that a restarted leader does not compute an
            # assignment a Stable group would never distribute.
            answer = JoinResult(ErrorCode.NONE, new_id, group.generation, group.protocol_type,
                                group.protocol_name, leader_before, [])
            if written is None or written.committed():
                future.set_result(answer)
            else:
                self._spawn(self._answer_static_rejoin(group, instance_id, new_id, written,
                                                       future, answer, revert))
            return
        member.join_future = future
        self._maybe_prepare_rebalance(group, f"static member {instance_id} rejoined", now)

    async def _answer_static_rejoin(self, group: Group, instance_id: str, new_id: str,
                                    written: internal_topic.Written,
                                    future: asyncio.Future[JoinResult], answer: JoinResult,
                                    revert: Callable[[], None]) -> None:
        """A static member's takeover is answered once its record is committed; refused,
        it is undone if nothing has moved the group on since."""
        error = await self._store.replicated(written)
        if error and self.groups.get(group.group_id) is group \
                and group.static_members.get(instance_id) == new_id:
            revert()
        if not future.done():
            future.set_result(JoinResult(error, "") if error else answer)

    # rebalance -------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: Group, reason: str, now: int) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason, now)

    def _prepare_rebalance(self, group: Group, reason: str, now: int) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        group.pending_sync.clear()
        was_empty = group.is_in(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE, now)
        rebalance_ms = group.max_rebalance_timeout()
        if was_empty:
            delay = self.config.initial_rebalance_delay_ms
            group.join_not_before = now + delay
            group.join_deadline = now + max(rebalance_ms, delay)
            self._schedule(group, group.join_not_before)
        else:
            group.join_not_before = 0
            group.join_deadline = now + rebalance_ms
        self._schedule(group, group.join_deadline)
        log.info("group %s: rebalancing generation %d (%s)", group.group_id,
                 group.generation, reason)
        self._try_complete_join(group, now)

    def _try_complete_join(self, group: Group, now: int) -> None:
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.all_members_joined() \
                and now >= group.join_not_before:
            self._complete_join(group, now)

    def _complete_join(self, group: Group, now: int) -> None:
        # dynamic members that did not rejoin in time are gone (max.poll.interval.ms);
        # static ones stay until their session expires
        gone = [m for m in group.not_yet_rejoined() if not m.is_static]
        for member in gone:
            self._drop(group, member, ErrorCode.UNKNOWN_MEMBER_ID)
        if gone:
            log.info("group %s: %d members did not rejoin in time", group.group_id, len(gone))
        if group.members and not self._elect_joined_leader(group):
            # only static members that have not rejoined remain: wait for them
            group.join_deadline = now + group.max_rebalance_timeout()
            self._schedule(group, group.join_deadline)
            return
        group.init_next_generation(now)
        if group.is_in(GroupState.EMPTY):
            self._store_group_or_log(group, now)
            return
        for member in group.members.values():
            member.complete_join(self._join_result(group, member))
            member.is_new = False
            member.heartbeat_deadline = now + member.session_timeout_ms
            self._schedule(group, member.heartbeat_deadline)
        group.pending_sync = set(group.members)
        group.sync_deadline = now + group.max_rebalance_timeout()
        self._schedule(group, group.sync_deadline)
        log.info("group %s: generation %d, protocol %s, leader %s, %d members",
                 group.group_id, group.generation, group.protocol_name, group.leader_id,
                 len(group.members))

    @staticmethod
    def _elect_joined_leader(group: Group) -> bool:
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.awaiting_join:
            return True
        for member in group.members.values():
            if member.awaiting_join:
                group.leader_id = member.member_id
                return True
        return False

    @staticmethod
    def _propagate_assignment_error(group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            member.complete_sync(SyncResult(error))

    def _drop(self, group: Group, member: Member, error: ErrorCode) -> None:
        member.complete_join(JoinResult(error, member.member_id))
        member.complete_sync(SyncResult(error))
        group.remove(member.member_id)

    def _remove_members(self, group: Group, members: Iterable[Member], reason: str,
                        now: int) -> None:
        removed = 0
        for member in members:
            if group.members.get(member.member_id) is member:
                self._drop(group, member, ErrorCode.UNKNOWN_MEMBER_ID)
                removed += 1
        if not removed:
            return
        log.info("group %s: %d members removed (%s)", group.group_id, removed, reason)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason, now)
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group, now)

    # SyncGroup, Heartbeat, LeaveGroup --------------------------------------------------

    def sync_group(self, group_id: str, generation: int, member_id: str,
                   group_instance_id: str | None, protocol_type: str | None,
                   protocol_name: str | None,
                   assignments: dict[str, bytes]) -> asyncio.Future[SyncResult]:
        """The future of the member's answer: done at once, or parked until the leader's
        assignment is stored."""
        now = self._now_ms()
        group = self.groups.get(group_id)
        if group is None:
            return answered(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        if group.is_in(GroupState.DEAD):
            return answered(SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        error = group.validate_member(member_id, group_instance_id)
        if error:
            return answered(SyncResult(error))
        if generation != group.generation:
            return answered(SyncResult(ErrorCode.ILLEGAL_GENERATION))
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return answered(SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        if group.is_in(GroupState.EMPTY):
            return answered(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return answered(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member = group.members[member_id]
        member.heartbeat_deadline = now + member.session_timeout_ms
        self._schedule(group, member.heartbeat_deadline)
        group.pending_sync.discard(member_id)
        if group.is_in(GroupState.STABLE):
            return answered(SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name,
                              member.assignment))
        # CompletingRebalance: park until the leader's assignment arrives
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        member.complete_sync(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.sync_future = future
        if member_id == group.leader_id:
            for mid, m in group.members.items():
                m.assignment = bytes(assignments.get(mid, b""))
            try:
                written = self._store_group(group, now)
            except KafkaError as exc:
                self._assignment_failed(group, internal_topic.store_error(exc), now)
            else:
                if written is None or written.committed():
                    self._assignment_stored(group, now)
                else:
                    self._spawn(self._await_assignment(group, group.generation, written))
        return future

    def _assignment_stored(self, group: Group, now: int) -> None:
        group.transition_to(GroupState.STABLE, now)
        for m in group.members.values():
            m.complete_sync(SyncResult(ErrorCode.NONE, group.protocol_type,
                                       group.protocol_name, m.assignment))
        log.info("group %s: generation %d stable", group.group_id, group.generation)

    def _assignment_failed(self, group: Group, error: ErrorCode, now: int) -> None:
        self._propagate_assignment_error(group, error)
        self._prepare_rebalance(group, "storing the assignment failed", now)

    async def _await_assignment(self, group: Group, generation: int,
                                written: internal_topic.Written) -> None:
        """The group turns Stable (and the syncs are answered) once its assignment is
        committed, unless the rebalance moved on meanwhile."""
        error = await self._store.replicated(written)
        if self.groups.get(group.group_id) is not group or group.generation != generation \
                or not group.is_in(GroupState.COMPLETING_REBALANCE):
            return
        if error:
            self._assignment_failed(group, error, self._now_ms())
        else:
            self._assignment_stored(group, self._now_ms())

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None,
                  generation: int) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(member_id, group_instance_id)
        if error:
            return error
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_in(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        member = group.members[member_id]
        member.heartbeat_deadline = self._now_ms() + member.session_timeout_ms
        self._schedule(group, member.heartbeat_deadline)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]
                    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """``leaving`` is ``(member_id, group_instance_id)``; a static member may be named
        by its instance id alone (member id ""). Returns the group error and one per member."""
        now = self._now_ms()
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [(m, i, ErrorCode.UNKNOWN_MEMBER_ID) for m, i in leaving]
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        results: list[tuple[str, str | None, ErrorCode]] = []
        for member_id, instance_id in leaving:
            if member_id in group.pending_members and instance_id is None:
                del group.pending_members[member_id]
                self._try_complete_join(group, now)
                results.append((member_id, instance_id, ErrorCode.NONE))
                continue
            if not member_id and instance_id is not None:
                member_id = group.static_members.get(instance_id, "")
            error = group.validate_member(member_id, instance_id)
            if not error:
                self._remove_members(group, [group.members[member_id]], "left", now)
            results.append((member_id, instance_id, error))
        return ErrorCode.NONE, results


    def describe_group(self, group_id: str) -> GroupDescription:
        group = self.groups.get(group_id)
        if group is None:
            return GroupDescription(ErrorCode.NONE, group_id, GroupState.DEAD.value, "", "", [])
        stable = group.is_in(GroupState.STABLE)
        protocol = (group.protocol_name or "") if stable else ""
        members = [MemberDescription(m.member_id, m.group_instance_id, m.client_id,
                                     m.client_host,
                                     m.metadata(protocol) if stable else b"",
                                     m.assignment if stable else b"")
                   for m in group.members.values()]
        return GroupDescription(ErrorCode.NONE, group_id, group.state.value,
                                group.protocol_type or "", protocol, members)


    def _store_group(self, group: Group, now: int) -> internal_topic.Written | None:
        protocol = group.protocol_name
        record = records.GroupRecord(
            group.protocol_type or "", group.generation, protocol, group.leader_id,
            group.state_timestamp,
            [records.MemberRecord(m.member_id, m.group_instance_id, m.client_id,
                                  m.client_host, m.rebalance_timeout_ms, m.session_timeout_ms,
                                  m.metadata(protocol or ""), m.assignment)
             for m in group.members.values()])
        return self._store.append(group.group_id, [(records.group_key(group.group_id),
                                                    records.group_value(record))], now)

    def _store_group_or_log(self, group: Group, now: int) -> None:
        try:
            self._store_group(group, now)
        except KafkaError as exc:
            log.warning("group %s: storing metadata failed: %s", group.group_id, exc)

    # OffsetCommit ----------------------------------------------------------------------

    def admit_commit(self, group_id: str, member_id: str, instance_id: str | None,
                     generation: int, now: int, transactional: bool = False
                     ) -> tuple[Group | None, ErrorCode]:
        """May this member commit into the group now? The group (created without members
        for a commit outside any generation), or the error every partition gets. A
        commit proves the member is alive, as a heartbeat does. A transactional commit
        (TxnOffsetCommit) may come from outside the group's members (its versions before
        3 name none) and during a rebalance, and creates the group it names, as Kafka's."""
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0 and not transactional:  # a member of a group not known here
                return None, ErrorCode.ILLEGAL_GENERATION
            group = Group(group_id, now)  # offsets-only group
        error = self._validate_commit(group, member_id, instance_id, generation, transactional)
        if error:
            return None, error
        self.groups.setdefault(group_id, group)
        member = group.members.get(member_id)
        if member is not None:
            member.heartbeat_deadline = now + member.session_timeout_ms
            self._schedule(group, member.heartbeat_deadline)
        return group, ErrorCode.NONE

    @staticmethod
    def _validate_commit(group: Group, member_id: str, instance_id: str | None,
                         generation: int, transactional: bool) -> ErrorCode:
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.is_in(GroupState.EMPTY):
            return ErrorCode.NONE  # admin client or a consumer assigning partitions itself
        if generation >= 0 or member_id or instance_id is not None:
            error = group.validate_member(member_id, instance_id)
            if error:
                return error
            if generation != group.generation:
                return ErrorCode.ILLEGAL_GENERATION
        elif not transactional:
            return ErrorCode.UNKNOWN_MEMBER_ID  # anonymous commit into an active group
        if group.is_in(GroupState.COMPLETING_REBALANCE) and not transactional:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE


def answered(result: T) -> asyncio.Future[T]:
    """A request answered without parking: a future that is already done."""
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    future.set_result(result)
    return future

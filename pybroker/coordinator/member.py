"""One member of a classic consumer group, as the coordinator tracks it.

A member is created by JoinGroup and lives until it leaves, misses its session timeout or
fails to rejoin within the rebalance timeout. While a JoinGroup or SyncGroup of the member
is parked (long poll), ``join_future`` / ``sync_future`` hold the asyncio future its handler
awaits; the coordinator resolves it when the rebalance moves on.

Not thread-safe: owned by the coordinator, used only on the event loop thread.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pybroker.coordinator.membership import JoinResult, SyncResult

# A member that joined and has not yet been answered is kept for this long even without
# heartbeats, so a client that disappears in the middle of its first join does not hold
# the group in PreparingRebalance forever (Kafka's NewMemberJoinTimeoutMs).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


class Member:
    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host",
                 "rebalance_timeout_ms", "session_timeout_ms", "protocol_type",
                 "protocols", "assignment", "join_future", "sync_future",
                 "heartbeat_deadline", "is_new")

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str,
                 client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                 protocol_type: str, protocols: list[tuple[str, bytes]]) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        # (name, metadata) in the member's order of preference
        self.protocols = protocols
        self.assignment = b""
        self.join_future: asyncio.Future[JoinResult] | None = None
        self.sync_future: asyncio.Future[SyncResult] | None = None
        self.heartbeat_deadline = 0
        self.is_new = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None and not self.join_future.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None and not self.sync_future.done()

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def vote(self, candidates: set[str]) -> str:
        """The first of this member's protocols that every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols, in the same order, with the same metadata."""
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def should_keep_alive(self, now_ms: int) -> bool:
        """Whether the session is alive at ``now_ms``.

        A member parked in JoinGroup is covered by the join deadline instead (new members get
        a bounded grace), one parked in SyncGroup by the sync deadline; the others must
        heartbeat within their session timeout.
        """
        if self.awaiting_join:
            return not self.is_new or now_ms < self.heartbeat_deadline
        if self.awaiting_sync:
            return True
        return now_ms < self.heartbeat_deadline

    def complete_join(self, result: JoinResult) -> None:
        future, self.join_future = self.join_future, None
        if future is not None and not future.done():
            future.set_result(result)

    def complete_sync(self, result: SyncResult) -> None:
        future, self.sync_future = self.sync_future, None
        if future is not None and not future.done():
            future.set_result(result)

"""KIP-951 leader discovery: a Produce or Fetch refused because this broker does not lead a
partition (or leads it in a newer epoch) names the partition's current leader, and the
response lists those leaders' endpoints, so the client goes there without first asking
Metadata again. One collector per response; the control plane answers who leads
(``Metadata.current_leader``), and where it leads every partition it names nobody, so
nothing is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pybroker._native.wire import CurrentLeader, NodeEndpoint
    from pybroker.metadata import Metadata


class LeaderHints:
    def __init__(self, metadata: Metadata, listener: str) -> None:
        """``listener``: the client's (the endpoints named are on it)."""
        self._metadata = metadata
        self._listener = listener
        self._endpoints: dict[int, NodeEndpoint] = {}

    def current_leader(self, topic: str, partition: int) -> CurrentLeader | None:
        """``(leader_id, leader_epoch)`` for a refused partition, its leader's endpoint
        kept for :meth:`node_endpoints`; None when no leader is known."""
        leader = self._metadata.current_leader(topic, partition)
        if leader is None:
            return None
        endpoint = self._metadata.endpoint(leader.leader_id, self._listener) \
            if leader.endpoint is not None else None
        if endpoint is not None:
            self._endpoints[leader.leader_id] = (leader.leader_id, endpoint.host,
                                                 endpoint.port,
                                                 self._metadata.rack(leader.leader_id))
        return leader.leader_id, leader.leader_epoch

    def node_endpoints(self) -> list[NodeEndpoint] | None:
        """The endpoints of the leaders named so far, None for none."""
        return list(self._endpoints.values()) or None

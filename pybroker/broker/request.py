"""What a request handler gets besides the request body."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from pybroker.errors import ErrorCode, KafkaError
from pybroker.security.acl import ANONYMOUS, AclOperation, ResourceType

if TYPE_CHECKING:
    from pybroker.broker.broker import Broker
    from pybroker.broker.quotas import MutationQuota
    from pybroker.metadata import Endpoint
    from pybroker.net.connection import Connection


T = TypeVar("T")

# the error refusing an operation on a resource of each type
AUTHORIZATION_FAILED = {
    ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str
    # the frame the request was decoded from; ``records`` fields are views into it
    frame: Any = None
    # the client's connection: a handler that parks the request awaits through
    # ``conn.wait(future)``, which gives up as soon as the client is gone (PeerGone)
    conn: Connection | None = None
    # a broker's request that no request_percentage quota counts (Kafka's exempt ones:
    # followers' fetches, transaction markers)
    quota_exempt: bool = False

    @property
    def principal(self) -> str:
        """The client's principal (``User:name``), its connection's."""
        return self.conn.principal if self.conn is not None else ANONYMOUS

    @property
    def host(self) -> str:
        """The client's address, as ACLs name hosts."""
        return self.peer.rpartition(":")[0] or self.peer

    def authorize(self, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        """Whether the client may do ``operation`` on the resource: always, without an
        authorizer (``authorizer.class.name`` unset)."""
        authorizer = self.broker.authorizer
        return authorizer is None or authorizer.authorize(
            self.principal, self.host, operation, resource_type, name)

    def authorize_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether the client may do ``operation`` on some resource of the type."""
        authorizer = self.broker.authorizer
        return authorizer is None or authorizer.authorize_any(
            self.principal, self.host, operation, resource_type)

    def refusal(self, operation: AclOperation, resource_type: ResourceType,
                name: str) -> KafkaError | None:
        """The resource type's authorization error unless the client may do
        ``operation`` on the resource; None when it may."""
        if self.authorize(operation, resource_type, name):
            return None
        return KafkaError(f"{operation.name} on {resource_type.name} {name!r} is not "
                          f"authorized", AUTHORIZATION_FAILED[resource_type])

    def require(self, operation: AclOperation, resource_type: ResourceType,
                name: str) -> None:
        """Raise ``refusal``'s error (a whole-request error) unless the client may do
        ``operation`` on the resource."""
        refused = self.refusal(operation, resource_type, name)
        if refused is not None:
            raise refused

    def authorized(self, operation: AclOperation, resource_type: ResourceType,
                   names: Iterable[str]) -> set[str]:
        """The names among ``names`` the client may do ``operation`` on."""
        authorizer = self.broker.authorizer
        if authorizer is None:
            return set(names)
        principal, host = self.principal, self.host
        return {name for name in names
                if authorizer.authorize(principal, host, operation, resource_type, name)}

    @property
    def listener(self) -> str:
        """The name of the listener the client connected on: the brokers' endpoints a
        response names are that listener's (Kafka's rule). A request without a
        connection is the inter-broker listener's."""
        conn = self.conn
        return conn.listener.name if conn is not None else self.broker.inter_broker_listener

    def endpoint(self, broker_id: int) -> Endpoint | None:
        """Broker ``broker_id``'s address on this client's listener (None: not live, or
        no such listener)."""
        return self.broker.metadata.endpoint(broker_id, self.listener)

    def live_endpoints(self) -> list[Endpoint]:
        """The live brokers on this client's listener; this broker alone while the
        control plane knows of none yet (clients ask again)."""
        broker = self.broker
        live = [endpoint for b in broker.metadata.live_brokers()
                if (endpoint := self.endpoint(b.broker_id)) is not None]
        if live:
            return live
        from pybroker.metadata import Endpoint
        host, port = broker.listener_endpoints.get(self.listener, broker.advertised)
        return [Endpoint(broker.broker_id, host, port)]

    async def park(self, waited: asyncio.Future[T]) -> T:
        """Await ``waited`` (a long poll's wake-up, a parked group join) unless the client
        goes away first: then ``PeerGone`` ends the request without an answer and
        ``waited`` is left as it is."""
        if self.conn is None:
            return await waited
        return await self.conn.wait(waited)

    def record_quota(self, key: str, value: float, unrecord_if_throttled: bool = False
                     ) -> int:
        """Count ``value`` against the client's quota of ``key``
        (``ClientQuotas.record``); the throttle time it earns, in ms, for the response's
        ``throttle_time_ms``, for which the connection is muted (``Connection.throttle``)."""
        conn = self.conn
        if conn is None:
            return 0
        ms = self.broker.quotas.record(key, self.principal, self.client_id, value,
                                       unrecord_if_throttled)
        conn.throttle(ms)
        return ms

    def mutation_quota(self, strict_since: int) -> MutationQuota:
        """This request's controller mutation quota (KIP-599), strict from API version
        ``strict_since`` (``pybroker.broker.quotas``)."""
        return self.broker.quotas.mutation_quota(self.principal, self.client_id,
                                                 self.api_version >= strict_since)

    def mutation_throttle(self, quota: MutationQuota) -> int:
        """The throttle time ``quota`` earned, in ms, for the response's
        ``throttle_time_ms``, for which the connection is muted."""
        ms = quota.throttle_ms()
        if ms and self.conn is not None:
            self.conn.throttle(ms)
        return ms


class Encoded(NamedTuple):
    """A response the handler encoded itself: the whole frame as bytes and FileRegions."""

    parts: list[Any]

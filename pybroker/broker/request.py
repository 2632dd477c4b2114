"""What a request handler gets besides the request body."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

if TYPE_CHECKING:
    from pybroker.broker.broker import Broker
    from pybroker.net.connection import Connection


T = TypeVar("T")


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

    async def park(self, waited: asyncio.Future[T]) -> T:
        """Await ``waited`` (a long poll's wake-up, a parked group join) unless the client
        goes away first: then ``PeerGone`` ends the request without an answer and
        ``waited`` is left as it is."""
        if self.conn is None:
            return await waited
        return await self.conn.wait(waited)


class Encoded(NamedTuple):
    """A response the handler encoded itself: the whole frame as bytes and FileRegions."""

    parts: list[Any]

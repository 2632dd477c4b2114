"""What a request handler gets besides the request body."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from pybroker.broker.broker import Broker


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


class Encoded(NamedTuple):
    """A response the handler encoded itself: the whole frame as bytes and FileRegions."""

    parts: list[Any]

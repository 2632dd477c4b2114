"""ApiVersions (key 18): the APIs and versions this broker serves.

A version outside 0-4 never reaches this handler: the dispatcher answers it in v0 with
UNSUPPORTED_VERSION and the same list, so the client can pick a version (KIP-511).
"""

from __future__ import annotations

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.net.protocol.typed import ApiVersionsRequest


@handler(api_key=18, versions=(0, 4))
async def api_versions(ctx: RequestContext, request: ApiVersionsRequest) -> dict:
    return ctx.broker.api_versions_body()

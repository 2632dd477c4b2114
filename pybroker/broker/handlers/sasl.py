"""SaslHandshake (17) and SaslAuthenticate (36) as the broker answers them: after the
connection is authenticated, or on a listener without SASL. Both are ILLEGAL_SASL_STATE,
with Kafka 4.1's words. Authentication itself happens before a request reaches the
broker's dispatch, in the connection's authenticator (:mod:`pybroker.security.sasl`),
which serves the same versions.
"""

from __future__ import annotations

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode
from pybroker.net.protocol.typed import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)


@handler(api_key=17, versions=(0, 1))
async def sasl_handshake(ctx: RequestContext,
                         request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}


@handler(api_key=36, versions=(0, 2))
async def sasl_authenticate(ctx: RequestContext,
                            request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE,
            "error_message": "SaslAuthenticate request received after successful "
                             "authentication", "auth_bytes": b"", "session_lifetime_ms": 0}

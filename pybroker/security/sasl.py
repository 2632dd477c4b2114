"""SASL authentication of the connections of SASL_PLAINTEXT and SASL_SSL listeners, as
Kafka's ``SaslServerAuthenticator``: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER
(:mod:`pybroker.security.oauthbearer`), and re-authentication (KIP-368).

Each connection of a SASL listener dispatches through its own :class:`SaslAuthenticator`
(chosen when the connection is accepted: connections of other listeners never pay for
it). Until the client is authenticated only these are served, in this order:

1. ApiVersions (answered by the broker, as on any listener), any number of times;
2. SaslHandshake v0-1 naming a mechanism of ``sasl.enabled.mechanisms``; another
   mechanism is answered UNSUPPORTED_SASL_MECHANISM with the enabled ones, and the
   connection closes;
3. SaslAuthenticate v0-2 carrying the mechanism's tokens (PLAIN: one; SCRAM: two). After
   a v0 handshake the tokens come without Kafka's framing: each frame is a raw token and
   each answer a size-prefixed raw token (Kafka still serves that, for old clients).

Anything else closes the connection with a log line, and so does a frame larger than
``sasl.server.max.receive.size`` (Kafka's 512 KiB) before authentication. Wrong
credentials are answered SASL_AUTHENTICATION_FAILED with Kafka's message, then the
connection closes (one log line) after ``connection.failed.authentication.delay.ms``
(Kafka's 100 ms). On success the connection's principal is ``User:<name>`` and, with no
re-authentication (``connections.max.reauth.ms=0``, the default), the connection
switches to the broker's own dispatch: an authenticated connection costs what a
plaintext one does.

Re-authentication. With ``connections.max.reauth.ms`` set, a client that speaks
SaslAuthenticate v1+ is told ``session_lifetime_ms`` (at most its OAUTHBEARER token's
remaining life); its connection keeps this
dispatch, which closes it at its first request (other than a new SaslHandshake) after the
session expired, and takes a SaslHandshake + SaslAuthenticate mid-connection as the
re-authentication: same mechanism (else ILLEGAL_SASL_STATE and close), same
principal (else SASL_AUTHENTICATION_FAILED and close), and a new session. A client of SaslAuthenticate v0 cannot re-authenticate and
gets no session limit, as in Kafka.

PLAIN's users and passwords come from the PLAIN module's ``user_<name>="<password>"``
options of the listener's JAAS configuration (:mod:`pybroker.security.jaas`,
:func:`sasl_settings`); SCRAM checks the users' stored credentials
(:class:`pybroker.security.credentials.ScramCredentials`); OAUTHBEARER asks the
listener's token validator.

Not thread-safe: the event loop thread only.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import struct
import time
from collections.abc import Generator, Sequence
from typing import Any, NamedTuple

from pybroker.errors import ErrorCode, KafkaError
from pybroker.net.connection import CloseConnection, Connection, Dispatch
from pybroker.net.protocol import codec
from pybroker.net.protocol.codec import parse_request_header
from pybroker.security.credentials import ScramCredentials
from pybroker.security.jaas import PLAIN_LOGIN_MODULE, JaasError, parse_jaas
from pybroker.security.oauthbearer import (
    OAUTHBEARER,
    InvalidToken,
    TokenValidator,
    bearer_token,
    load_validator,
)
from pybroker.security.scram import MECHANISM_CODES, ScramClient, ScramError, ScramServer

log = logging.getLogger("pybroker.security")

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, *MECHANISM_CODES, OAUTHBEARER)
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
_SIZE = struct.Struct(">i")
_API_KEY = struct.Struct(">h")


class SaslSettings(NamedTuple):
    """One SASL listener's authentication settings."""

    mechanisms: tuple[str, ...]  # sasl.enabled.mechanisms, in configured order
    plain_users: dict[str, str]  # PLAIN's user -> password
    reauth_ms: int  # connections.max.reauth.ms (0: no re-authentication)
    max_receive: int  # sasl.server.max.receive.size: largest frame before authentication
    failure_delay_ms: int  # connection.failed.authentication.delay.ms
    validator: TokenValidator | None = None  # OAUTHBEARER's, when enabled


def jaas_text(config: Any, listener: str, mechanism: str) -> str | None:
    """The JAAS configuration for ``mechanism`` on ``listener``: Kafka's
    ``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (both in lower case), else
    the broker-wide ``sasl.jaas.config`` (pybroker's addition)."""
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    value = config.extra.get(key)
    return value if value is not None else config["sasl.jaas.config"]


def enabled_mechanisms(config: Any, listener: str) -> tuple[str, ...]:
    """``listener.name.<listener>.sasl.enabled.mechanisms``, else
    ``sasl.enabled.mechanisms``; refused (ValueError) when one is not served here."""
    text = config.extra.get(f"listener.name.{listener.lower()}.sasl.enabled.mechanisms")
    if text is None:
        text = config["sasl.enabled.mechanisms"]
    mechanisms = tuple(dict.fromkeys(m.strip().upper() for m in text.split(",")
                                     if m.strip()))
    unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
    if unsupported or not mechanisms:
        raise ValueError(f"listener {listener}: sasl.enabled.mechanisms "
                         f"{', '.join(unsupported) or '(none)'}: pybroker serves "
                         f"{', '.join(SUPPORTED_MECHANISMS)}")
    return mechanisms


def sasl_settings(config: Any, listener: str) -> SaslSettings:
    """A SASL listener's settings from the broker's (a ``BrokerConfig``); settings errors
    raise ValueError, stopping the start."""
    mechanisms = enabled_mechanisms(config, listener)
    plain_users: dict[str, str] = {}
    if PLAIN in mechanisms:
        text = jaas_text(config, listener, PLAIN)
        if not text:
            raise ValueError(f"listener {listener}: PLAIN needs the users in "
                             f"listener.name.{listener.lower()}.plain.sasl.jaas.config")
        jaas = parse_jaas(text)
        if jaas.login_module != PLAIN_LOGIN_MODULE:
            raise JaasError(f"listener {listener}: PLAIN's JAAS login module must be "
                            f"{PLAIN_LOGIN_MODULE}, not {jaas.login_module}")
        plain_users = jaas.plain_users()
    validator = None
    if OAUTHBEARER in mechanisms:
        text = jaas_text(config, listener, OAUTHBEARER)
        validator = load_validator(
            config.extra.get(f"listener.name.{listener.lower()}.oauthbearer."
                             "sasl.server.callback.handler.class"),
            parse_jaas(text).options if text else {})
    return SaslSettings(mechanisms, plain_users, config["connections.max.reauth.ms"],
                        config["sasl.server.max.receive.size"],
                        config["connection.failed.authentication.delay.ms"], validator)


class SaslClientSettings(NamedTuple):
    """What this broker sends when it connects to another's SASL inter-broker listener."""

    mechanism: str
    username: str
    password: str


def inter_broker_sasl(config: Any, listener: str) -> SaslClientSettings:
    """The inter-broker client's settings (the inter-broker listener being a SASL one):
    ``sasl.mechanism.inter.broker.protocol``, and the ``username`` and ``password`` options
    of that mechanism's JAAS string on the listener, as Kafka takes them."""
    mechanism = config["sasl.mechanism.inter.broker.protocol"].strip().upper()
    if mechanism not in enabled_mechanisms(config, listener):
        raise ValueError(f"sasl.mechanism.inter.broker.protocol {mechanism} is not enabled "
                         f"on the inter-broker listener {listener}")
    text = jaas_text(config, listener, mechanism)
    options = parse_jaas(text).options if text else {}
    if "username" not in options or "password" not in options:
        raise ValueError(f"the inter-broker listener {listener} needs username and password "
                         f"in listener.name.{listener.lower()}.{mechanism.lower()}"
                         ".sasl.jaas.config")
    return SaslClientSettings(mechanism, options["username"], options["password"])


def client_tokens(settings: SaslClientSettings) -> Generator[bytes, bytes, None]:
    """The client's side of an exchange: yields each token to send and is sent the
    server's answer to it; raises :class:`ScramError` when the server is not proven."""
    if settings.mechanism == PLAIN:
        yield f"\0{settings.username}\0{settings.password}".encode()
        return
    client = ScramClient(settings.mechanism, settings.username, settings.password)
    server_first = yield client.first()
    server_final = yield client.final(server_first)
    client.verify(server_final)


class SaslRefused(ConnectionError):
    """The broker refused this client's SASL handshake or credentials, or did not prove
    it knows them (SCRAM's server signature)."""


def client_requests(settings: SaslClientSettings) -> Generator[tuple[int, int, dict], dict, None]:
    """A client's authentication on a new connection, whatever carries it (the peer
    connections' event loop, the blocking client): yields ``(api key, version, body)`` of
    each request, SaslHandshake v1 then SaslAuthenticate v2 until the mechanism is done,
    and is sent each decoded answer; raises :class:`SaslRefused`."""
    answer = yield SASL_HANDSHAKE, 1, {"mechanism": settings.mechanism}
    if answer["error_code"]:
        raise SaslRefused(f"SASL handshake refused ({answer['error_code']}, "
                          f"enabled: {answer['mechanisms']})")
    tokens = client_tokens(settings)
    try:
        token = next(tokens)
        while True:
            answer = yield SASL_AUTHENTICATE, 2, {"auth_bytes": token}
            if answer["error_code"]:
                raise SaslRefused(f"SASL authentication as {settings.username} refused: "
                                  f"{answer['error_message']}")
            token = tokens.send(bytes(answer["auth_bytes"]))
    except StopIteration:
        return
    except ScramError as exc:
        raise SaslRefused(str(exc)) from None


class SaslFailed(Exception):
    """Refused credentials: ``message`` is what the client is told (None: Kafka's
    "invalid credentials" message), ``detail`` what the broker's log line adds."""

    def __init__(self, message: str | None, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


class _Plain:
    """PLAIN (RFC 4616): one token ``[authzid] NUL user NUL password``, checked against
    the listener's JAAS users (Kafka's ``PlainSaslServer`` and its messages)."""

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.username: str | None = None
        self.done = False

    def step(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got "
                             f"{len(parts)}")
        try:
            authzid, user, password = (part.decode() for part in parts)
        except UnicodeDecodeError:
            raise SaslFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise SaslFailed("Authentication failed: username not specified")
        if not password:
            raise SaslFailed("Authentication failed: password not specified")
        if authzid and authzid != user:
            raise SaslFailed("Authentication failed: Client requested an authorization id "
                             "that is different from username")
        expected = self._users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslFailed("Authentication failed: Invalid username or password",
                             f"user {user!r}")
        self.username, self.done = user, True
        return b""


class _OAuthBearer:
    """OAUTHBEARER: one client message carrying the token, checked by the listener's
    validator (:mod:`pybroker.security.oauthbearer`)."""

    def __init__(self, validator: TokenValidator) -> None:
        self._validator = validator
        self.username: str | None = None
        self.expires_ms: int | None = None
        self.done = False

    def step(self, token: bytes) -> bytes:
        try:
            validated = self._validator.validate(bearer_token(token))
        except InvalidToken as exc:
            raise SaslFailed(f"Authentication failed: {exc}") from None
        except Exception as exc:  # the validator's bug: refused, logged with the cause
            raise SaslFailed("Authentication failed", f"validator failed: {exc!r}") from None
        self.username, self.expires_ms = validated.principal_name, validated.expires_ms
        self.done = True
        return b""


class _Scram:
    """SCRAM's two steps over :class:`~pybroker.security.scram.ScramServer`."""

    def __init__(self, mechanism: str, credentials: ScramCredentials) -> None:
        self._server = ScramServer(mechanism, lambda user: credentials.lookup(user, mechanism))
        self._mechanism = mechanism
        self._first = True
        self.username: str | None = None
        self.done = False

    def step(self, token: bytes) -> bytes:
        try:
            if self._first:
                self._first = False
                return self._server.first(token)
            out = self._server.final(token)
        except ScramError as exc:
            user = self._server.username
            raise SaslFailed(None, str(exc) if user is None else f"user {user!r}: {exc}") \
                from None
        self.username, self.done = self._server.username, True
        return out


class SaslServer:
    """A SASL listener's side of authentication: each accepted connection dispatches
    through an authenticator of its own (:meth:`accept`)."""

    def __init__(self, listener: str, settings: SaslSettings, credentials: ScramCredentials,
                 dispatch: Dispatch) -> None:
        self.listener = listener
        self.settings = settings
        self.credentials = credentials
        self.dispatch = dispatch  # the broker's: what an authenticated request goes to

    def accept(self, conn: Connection) -> None:
        """A new connection of the listener (before it is read): it dispatches through an
        authenticator of its own and takes frames of at most
        ``sasl.server.max.receive.size`` until the client is authenticated."""
        authenticator = SaslAuthenticator(self, conn.max_frame)
        conn.switch_dispatch(authenticator.dispatch)
        conn.max_frame = min(conn.max_frame, self.settings.max_receive)

    def mechanism(self, name: str) -> Exchange:
        if name == PLAIN:
            return _Plain(self.settings.plain_users)
        if name == OAUTHBEARER:
            assert self.settings.validator is not None  # set when OAUTHBEARER is enabled
            return _OAuthBearer(self.settings.validator)
        return _Scram(name, self.credentials)


Exchange = _Plain | _Scram | _OAuthBearer

# states of a SaslAuthenticator
_HANDSHAKE, _AUTHENTICATE, _RAW, _AUTHENTICATED = range(4)


class SaslAuthenticator:
    """One connection's authentication state machine (see the module's docstring)."""

    __slots__ = ("_server", "_max_frame", "_state", "_mechanism", "_exchange", "_principal",
                 "_expires", "_reauthenticating")

    def __init__(self, server: SaslServer, max_frame: int) -> None:
        self._server = server
        self._max_frame = max_frame  # the connection's once the client is authenticated
        self._state = _HANDSHAKE
        self._mechanism = ""
        self._exchange: Exchange | None = None
        self._principal: str | None = None  # set once authenticated
        self._expires: float | None = None  # monotonic end of the session, if any
        self._reauthenticating = False

    async def dispatch(self, conn: Connection, frame: Any) -> Sequence[Any] | None:
        if self._state == _AUTHENTICATED:
            # only while re-authentication is on (else the connection dispatches to the
            # broker directly): an expired session takes nothing but a new handshake
            if len(frame) >= 2 and _API_KEY.unpack_from(frame)[0] == SASL_HANDSHAKE:
                self._reauthenticating = True
                self._state = _HANDSHAKE
            elif self._expires is not None and time.monotonic() >= self._expires:
                raise CloseConnection(f"SASL session of {self._principal} expired "
                                      "without re-authentication", reported=True)
            else:
                return await self._server.dispatch(conn, frame)
        if self._state == _RAW:
            return await self._raw_token(conn, bytes(frame))
        try:
            api_key, version, correlation_id, client_id, header_size = \
                parse_request_header(frame)
        except KafkaError as exc:
            raise CloseConnection(f"unreadable request header during SASL "
                                  f"authentication: {exc}") from None
        if api_key == API_VERSIONS and self._state == _HANDSHAKE \
                and not self._reauthenticating:
            return await self._server.dispatch(conn, frame)
        expected = SASL_HANDSHAKE if self._state == _HANDSHAKE else SASL_AUTHENTICATE
        if api_key != expected:
            reason = (f"unexpected {codec.api_name(api_key) or api_key} request from client "
                      f"{client_id!r} during SASL {self._phase()}")
            if self._state == _AUTHENTICATE:  # Kafka answers it ILLEGAL_SASL_STATE, then closes
                await self._refuse(conn, api_key, version, correlation_id, reason)
            raise CloseConnection(reason)
        low, high = (0, 1) if api_key == SASL_HANDSHAKE else (0, 2)
        if not low <= version <= high:
            raise CloseConnection(f"{codec.api_name(api_key)} v{version} is not served")
        try:
            request = codec.decode_request(api_key, version, frame, header_size)
        except KafkaError as exc:
            raise CloseConnection(f"malformed {codec.api_name(api_key)}: {exc}") from None
        if api_key == SASL_HANDSHAKE:
            return await self._handshake(conn, version, correlation_id, request["mechanism"])
        return await self._authenticate(conn, version, correlation_id,
                                        bytes(request["auth_bytes"]))

    @staticmethod
    async def _refuse(conn: Connection, api_key: int, version: int, correlation_id: int,
                      reason: str) -> None:
        """Answer a request with its whole-request ILLEGAL_SASL_STATE where its response
        has a top-level error code."""
        try:
            body = codec.error_response(api_key, version, ErrorCode.ILLEGAL_SASL_STATE, reason)
        except KafkaError:  # an API or version the codec does not know
            return
        if body is not None:
            await _send(conn, api_key, version, correlation_id, body)

    def _phase(self) -> str:
        return "re-authentication" if self._reauthenticating else "authentication"

    async def _handshake(self, conn: Connection, version: int, correlation_id: int,
                         mechanism: str) -> Sequence[Any]:
        enabled = list(self._server.settings.mechanisms)
        if mechanism not in enabled:
            await _send(conn, SASL_HANDSHAKE, version, correlation_id, {
                "error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": enabled})
            raise CloseConnection(f"SASL mechanism {mechanism!r} is not enabled on listener "
                                  f"{self._server.listener} ({', '.join(enabled)})")
        if self._reauthenticating and mechanism != self._mechanism:
            await _send(conn, SASL_HANDSHAKE, version, correlation_id, {
                "error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": enabled})
            raise CloseConnection(f"re-authentication with {mechanism}, not "
                                  f"{self._mechanism}")
        self._mechanism = mechanism
        self._exchange = self._server.mechanism(mechanism)
        self._state = _RAW if version == 0 else _AUTHENTICATE
        return _encode(SASL_HANDSHAKE, version, correlation_id,
                       {"error_code": ErrorCode.NONE, "mechanisms": enabled})

    async def _authenticate(self, conn: Connection, version: int, correlation_id: int,
                            token: bytes) -> Sequence[Any]:
        exchange = self._exchange
        assert exchange is not None
        try:
            out = exchange.step(token)
            if exchange.done:
                self._succeeded(conn, exchange, version >= 1)
        except SaslFailed as exc:
            await _send(conn, SASL_AUTHENTICATE, version, correlation_id, {
                "error_code": ErrorCode.SASL_AUTHENTICATION_FAILED,
                "error_message": self._message(exc), "auth_bytes": b"",
                "session_lifetime_ms": 0})
            raise await self._failed(exc) from None
        lifetime = 0
        if exchange.done and self._expires is not None:
            lifetime = max(1, int((self._expires - time.monotonic()) * 1000))
        return _encode(SASL_AUTHENTICATE, version, correlation_id, {
            "error_code": ErrorCode.NONE, "error_message": "", "auth_bytes": out,
            "session_lifetime_ms": lifetime})

    async def _raw_token(self, conn: Connection, token: bytes) -> Sequence[Any]:
        exchange = self._exchange
        assert exchange is not None
        try:
            out = exchange.step(token)
            if exchange.done:
                self._succeeded(conn, exchange, False)
        except SaslFailed as exc:
            raise await self._failed(exc) from None
        return [_SIZE.pack(len(out)) + out]

    async def _failed(self, failed: SaslFailed) -> CloseConnection:
        """What closes a connection whose credentials were refused, once
        ``connection.failed.authentication.delay.ms`` has passed (Kafka's KIP-306: it slows
        down guessing, and the client reads the refusal before the close)."""
        delay_ms = self._server.settings.failure_delay_ms
        if delay_ms > 0:
            await asyncio.sleep(delay_ms / 1000)
        return CloseConnection(self._failure(failed))

    def _message(self, failed: SaslFailed) -> str:
        """What the client is told (Kafka's words)."""
        return failed.message or (f"Authentication failed during {self._phase()} due to "
                                  f"invalid credentials with SASL mechanism {self._mechanism}")

    def _failure(self, failed: SaslFailed) -> str:
        """The connection's one log line of a refused authentication."""
        detail = f" ({failed.detail})" if failed.detail else ""
        return (f"failed {self._phase()} with {self._mechanism} on listener "
                f"{self._server.listener}: {self._message(failed)}{detail}")

    def _succeeded(self, conn: Connection, exchange: Exchange,
                   can_reauthenticate: bool) -> None:
        principal = f"User:{exchange.username}"
        if self._reauthenticating and principal != self._principal:
            message = (f"Cannot change principals during re-authentication from "
                       f"{self._principal}: {principal}")
            raise SaslFailed(message)
        self._principal = conn.principal = principal
        conn.max_frame = self._max_frame
        self._state = _AUTHENTICATED
        self._reauthenticating = False
        self._exchange = None
        reauth_ms = self._server.settings.reauth_ms
        if reauth_ms > 0 and can_reauthenticate:
            lifetime_ms = float(reauth_ms)
            token_expiry = getattr(exchange, "expires_ms", None)
            if token_expiry is not None:  # a session ends with its token, as in Kafka
                lifetime_ms = min(lifetime_ms, max(1.0, token_expiry - time.time() * 1000))
            self._expires = time.monotonic() + lifetime_ms / 1000
        else:  # nothing left to check: the broker's dispatch from now on
            self._expires = None
            conn.switch_dispatch(self._server.dispatch)


def _encode(api_key: int, version: int, correlation_id: int, body: dict) -> Sequence[Any]:
    out = codec.encode_response(api_key, version, correlation_id, body)
    return (out,) if isinstance(out, bytes) else out


async def _send(conn: Connection, api_key: int, version: int, correlation_id: int,
                body: dict) -> None:
    """Answer now: the connection closes right after (a refusal)."""
    await conn.write(_encode(api_key, version, correlation_id, body))


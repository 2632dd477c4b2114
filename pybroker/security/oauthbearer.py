"""SASL/OAUTHBEARER (RFC 7628, KIP-255) on the server side, with a pluggable validator.

The client sends one message: ``n,,`` then ``\\x01``-separated ``key=value`` pairs, one of
them ``auth=Bearer <token>``, and a closing ``\\x01``. The listener's validator decides
what the token is worth: a principal (``User:<name>``) and an expiry, or a refusal.

Validators. By default Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler``: an
unsecured JWS (header ``{"alg":"none"}``, empty signature) whose ``sub`` claim names the
user and whose ``exp`` (seconds) is not past; options from the JAAS string of
OAUTHBEARER on the listener, as Kafka's: ``unsecuredValidatorPrincipalClaimName`` (default
``sub``), ``unsecuredValidatorScopeClaimName`` (``scope``),
``unsecuredValidatorRequiredScope`` (space-separated scopes the token must carry) and
``unsecuredValidatorAllowableClockSkewMs``. For development and tests only: anybody can
write such a token. Production sets
``listener.name.<listener>.oauthbearer.sasl.server.callback.handler.class`` to a Python
class (``package.module.ClassName``) built with the JAAS options (a dict) whose
``validate(token) -> ValidatedToken`` raises :class:`InvalidToken` to refuse, e.g. one
that checks signatures against the identity provider's keys. Kafka's Java class names
other than the unsecured validator stop the start.
"""

from __future__ import annotations

import base64
import importlib
import json
import time
from typing import Any, NamedTuple, Protocol

UNSECURED_VALIDATOR = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                       "OAuthBearerUnsecuredValidatorCallbackHandler")
OAUTHBEARER = "OAUTHBEARER"


class InvalidToken(Exception):
    """A refused token; the message says why (logged, and the client is told)."""


class ValidatedToken(NamedTuple):
    principal_name: str  # the user: the connection becomes User:<principal_name>
    expires_ms: int | None  # wall-clock milliseconds, None: does not expire


class TokenValidator(Protocol):
    def validate(self, token: str) -> ValidatedToken: ...


def _b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


class UnsecuredJwtValidator:
    """Kafka's unsecured validator (module doc)."""

    def __init__(self, options: dict[str, str]) -> None:
        self._principal_claim = options.get("unsecuredValidatorPrincipalClaimName", "sub")
        self._scope_claim = options.get("unsecuredValidatorScopeClaimName", "scope")
        self._required = set(options.get("unsecuredValidatorRequiredScope", "").split())
        self._skew_ms = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0"))

    def validate(self, token: str) -> ValidatedToken:
        parts = token.split(".")
        if len(parts) != 3 or parts[2]:
            raise InvalidToken("not an unsecured JWS (header.claims. with no signature)")
        try:
            header, claims = json.loads(_b64url(parts[0])), json.loads(_b64url(parts[1]))
        except ValueError:
            raise InvalidToken("the token's header or claims are not base64url JSON") \
                from None
        if not isinstance(header, dict) or header.get("alg") != "none":
            raise InvalidToken("the token's header is not {\"alg\":\"none\"}")
        if not isinstance(claims, dict):
            raise InvalidToken("the token's claims are not a JSON object")
        principal = claims.get(self._principal_claim)
        if not isinstance(principal, str) or not principal:
            raise InvalidToken(f"no {self._principal_claim!r} claim")
        expires = claims.get("exp")
        if not isinstance(expires, (int, float)):
            raise InvalidToken("no 'exp' claim")
        expires_ms = int(expires * 1000)
        if expires_ms + self._skew_ms <= time.time() * 1000:
            raise InvalidToken("the token expired")
        scope = claims.get(self._scope_claim, [])
        scopes = set(scope.split() if isinstance(scope, str) else scope)
        if not self._required <= scopes:
            raise InvalidToken(f"the token lacks the scopes "
                               f"{' '.join(sorted(self._required - scopes))}")
        return ValidatedToken(principal, expires_ms)


def load_validator(class_name: str | None, options: dict[str, str]) -> TokenValidator:
    """The listener's validator: Kafka's unsecured one (unset or its Java name), else the
    Python class ``package.module.ClassName`` built with ``options``. ValueError when it
    cannot be loaded (the start stops)."""
    if not class_name or class_name == UNSECURED_VALIDATOR:
        return UnsecuredJwtValidator(options)
    module_name, _, name = class_name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"OAUTHBEARER validator {class_name!r} cannot be loaded: {exc}") \
            from None
    validator: Any = cls(options)
    if not callable(getattr(validator, "validate", None)):
        raise ValueError(f"OAUTHBEARER validator {class_name!r} has no validate(token)")
    return validator


def bearer_token(message: bytes) -> str:
    """The token of a client's initial response (RFC 7628 section 3.1); InvalidToken when
    the message is not one."""
    try:
        text = message.decode()
    except UnicodeDecodeError:
        raise InvalidToken("the client message is not UTF-8") from None
    gs2, sep, rest = text.partition("\x01")
    if not sep or not gs2.startswith(("n,", "y,")) or not rest.endswith("\x01\x01") \
            and rest != "\x01":
        raise InvalidToken("malformed OAUTHBEARER client message")
    for pair in rest.split("\x01"):
        key, _, value = pair.partition("=")
        if key == "auth":
            scheme, _, token = value.partition(" ")
            if scheme.lower() != "bearer" or not token:
                raise InvalidToken("the auth value is not 'Bearer <token>'")
            return token.strip()
    raise InvalidToken("no auth=Bearer in the client message")

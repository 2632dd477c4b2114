"""A pluggable OAUTHBEARER validator for the tests: a token ``<secret>:<user>`` is
accepted when the secret is the JAAS option ``secret``; it expires in an hour."""

from __future__ import annotations

import time

from pybroker.security.oauthbearer import InvalidToken, ValidatedToken


class SharedSecretValidator:
    def __init__(self, options: dict[str, str]) -> None:
        self._secret = options["secret"]

    def validate(self, token: str) -> ValidatedToken:
        secret, _, user = token.partition(":")
        if secret != self._secret or not user:
            raise InvalidToken("unknown secret")
        return ValidatedToken(user, int(time.time() * 1000) + 3_600_000)

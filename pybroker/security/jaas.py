"""Kafka's JAAS configuration strings (``sasl.jaas.config``), which carry SASL users and
passwords::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

One login module (a class name), its control flag (``required``, ``requisite``,
``sufficient``, ``optional``), options ``name=value`` (the value quoted with ``"``, where
``\\"`` and ``\\\\`` escape, or a bare word), and a closing ``;``. On the broker the PLAIN
module's ``user_<name>="<password>"`` options are the users PLAIN accepts; ``username`` and
``password`` are what the broker itself sends when it connects to another broker.
"""

from __future__ import annotations

import re
from typing import NamedTuple

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=)|(;))', re.DOTALL)


class JaasError(ValueError):
    pass


class JaasConfig(NamedTuple):
    login_module: str
    flag: str
    options: dict[str, str]

    def plain_users(self) -> dict[str, str]:
        """The PLAIN users and passwords a broker accepts (``user_<name>`` options)."""
        return {key[len("user_"):]: value for key, value in self.options.items()
                if key.startswith("user_") and len(key) > len("user_")}


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise JaasError(f"unexpected {text[pos:pos + 10]!r}")
        quoted, word, equals, end = match.groups()
        if quoted is not None:
            out.append(("value", re.sub(r"\\(.)", r"\1", quoted)))
        elif word is not None:
            out.append(("word", word))
        else:
            out.append(("=" if equals else ";", equals or end))
        pos = match.end()
    return out


def parse_jaas(text: str, key: str = "sasl.jaas.config") -> JaasConfig:
    """The one login module of a JAAS configuration string (``key`` names it in
    errors)."""
    try:
        tokens = _tokens(text)
        if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "word":
            raise JaasError("expected '<LoginModule> <flag> [name=value ...];'")
        module, flag = tokens[0][1], tokens[1][1].lower()
        if flag not in _FLAGS:
            raise JaasError(f"unknown control flag {tokens[1][1]!r}")
        options: dict[str, str] = {}
        rest = tokens[2:]
        while rest and rest[0][0] != ";":
            if len(rest) < 3 or rest[0][0] != "word" or rest[1][0] != "=" \
                    or rest[2][0] not in ("word", "value"):
                raise JaasError("expected name=value")
            options[rest[0][1]] = rest[2][1]
            rest = rest[3:]
        if not rest:
            raise JaasError("missing ';' at the end")
        if rest[1:]:
            raise JaasError("holds more than one login module, should be 1")
    except JaasError as exc:
        raise JaasError(f"{key}: {exc}") from None
    return JaasConfig(module, flag, options)

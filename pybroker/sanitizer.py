"""Kafka's ``Sanitizer``: how a user or client id becomes one name in ZooKeeper paths and
metric names.

Java's ``URLEncoder`` (UTF-8) keeps letters, digits and ``.-*_``, writes a space as ``+``,
and percent-encodes everything else; Kafka then writes ``+`` as ``%20`` and ``*`` as
``%2A``. Python's ``quote`` differs only in keeping ``~``, so that is escaped here. SCRAM
credentials and client quotas of one user must land under the same znode, so both use
this one function.
"""

from __future__ import annotations

import urllib.parse


def sanitize(name: str) -> str:
    return urllib.parse.quote(name, safe="*-._").replace("*", "%2A").replace("~", "%7E")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)

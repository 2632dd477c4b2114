"""Refused requests are logged once per client and API; the refusal log's memory is
bounded: an LRU of the clients and APIs already reported."""

from __future__ import annotations

import logging
import struct

from pybroker.broker.refusals import RefusalLog
from tests.broker.wire_client import WireClient


def test_reported_pairs_are_capped_least_recently_refused_first(caplog) -> None:
    refusals = RefusalLog(capacity=3)
    caplog.set_level(logging.INFO, logger="pybroker.broker")

    def refuse(client: str, api_key: int = 0, port: int = 1) -> int:
        before = len(caplog.records)
        refusals.refused(client, f"10.0.0.1:{port}", api_key, "Produce", "unsupported")
        return len(caplog.records) - before

    assert [refuse(c) for c in ("a", "b", "c")] == [1, 1, 1]
    assert refuse("a", port=2) == 0  # same client on another connection: already told
    assert refuse("a", api_key=3) == 1  # another API of the same client
    assert refuse("c") == 0
    for n in range(10_000):
        refuse(f"flood-{n}")
    assert len(refusals) == 3
    assert refuse("a") == 1  # pushed out by newer clients: reported again


def test_unreadable_headers_are_logged_once_per_host(broker) -> None:
    # A header too short to hold an API key, version and correlation id: no client id to
    # name, so the host is the client; a scanner hitting the port again adds no line.
    for _ in range(3):
        with WireClient(broker.bootstrap) as bad:
            bad.raw(struct.pack(">i", 3) + b"\x00\x03\x00")
            assert bad.closed_by_peer()
    with WireClient(broker.bootstrap) as good:
        assert good.request(18, 0, {})["error_code"] == 0
    lines = [line for line in broker.log_text().splitlines()
             if "unreadable request header" in line]
    assert len(lines) == 1, lines
    assert " INFO " in lines[0] and "refused" in lines[0], lines

"""build_produce_response agrees with the generic codec byte for byte, v3-v11."""

from __future__ import annotations

import random

import pytest

from pybroker._native.wire import build_produce_response
from pybroker.errors import UnsupportedVersionError
from pybroker.net.protocol import decode_response, encode_response, read_response_header


def _random_topics(rnd: random.Random):
    topics = []
    for t in range(rnd.randint(0, 3)):
        parts = []
        for index in range(rnd.randint(0, 4)):
            parts.append((index, rnd.choice([0, 2, 10, 87]), rnd.randint(-1, 2**62),
                          rnd.choice([-1, rnd.randint(0, 2**42)]), rnd.randint(-1, 2**40),
                          rnd.choice([None, "", "batch too large", "ünïcode"])))
        topics.append((f"topic-{t}-{rnd.random()}", parts))
    return topics


def _generic_body(throttle, topics):
    return {"throttle_time_ms": throttle, "responses": [
        {"name": name, "partition_responses": [
            {"index": p[0], "error_code": p[1], "base_offset": p[2],
             "log_append_time_ms": p[3], "log_start_offset": p[4], "record_errors": [],
             "error_message": p[5]} for p in parts]}
        for name, parts in topics]}


@pytest.mark.parametrize("version", range(3, 12))
def test_agrees_with_codec(version):
    rnd = random.Random(version)
    for _ in range(30):
        topics = _random_topics(rnd)
        throttle, correlation_id = rnd.randint(0, 1000), rnd.randint(-2**31, 2**31 - 1)
        fast = build_produce_response(version, correlation_id, throttle, topics)
        generic = encode_response(0, version, correlation_id, _generic_body(throttle, topics))
        assert isinstance(fast, bytes)
        assert fast == generic
        assert int.from_bytes(fast[:4], "big") == len(fast) - 4
        got_id, size = read_response_header(0, version, fast[4:])
        decoded = decode_response(0, version, fast[4:], size)
        assert got_id == correlation_id
        assert [(r["name"], [p["base_offset"] for p in r["partition_responses"]])
                for r in decoded["responses"]] == [(n, [p[2] for p in ps]) for n, ps in topics]


def test_rejects_versions_without_fast_path():
    for version in (2, 12):
        with pytest.raises(UnsupportedVersionError):
            build_produce_response(version, 1, 0, [])
    with pytest.raises(ValueError):
        build_produce_response(3, 1, 0, [("t", [(0, 0, 1)])])  # a short partition tuple

"""build_produce_response agrees with the generic codec byte for byte, v3-v11, with and
without KIP-467's record errors and KIP-951's leader hints."""

from __future__ import annotations

import random

import pytest

from pybroker._native.wire import build_produce_response
from pybroker.errors import UnsupportedVersionError
from pybroker.net.protocol import decode_response, encode_response, read_response_header


def _random_topics(rnd: random.Random, extras: bool):
    """Partitions; with ``extras`` some carry record errors and a current leader (the
    default (-1, -1) among them, which neither encoder writes)."""
    topics = []
    for t in range(rnd.randint(0, 3)):
        parts = []
        for index in range(rnd.randint(0, 4)):
            record_errors = leader = None
            if extras:
                record_errors = rnd.choice([None, [], [(rnd.randint(0, 99), None)],
                                            [(0, "no key"), (7, "ünïcode")]])
                leader = rnd.choice([None, (-1, -1), (rnd.randint(0, 9), rnd.randint(0, 99))])
            parts.append((index, rnd.choice([0, 2, 6, 10, 87]), rnd.randint(-1, 2**62),
                          rnd.choice([-1, rnd.randint(0, 2**42)]), rnd.randint(-1, 2**40),
                          rnd.choice([None, "", "batch too large", "ünïcode"]),
                          record_errors, leader))
        topics.append((f"topic-{t}-{rnd.random()}", parts))
    return topics


def _random_endpoints(rnd: random.Random):
    return rnd.choice([None, [], [(1, "localhost", 9092, None)],
                       [(2, "b2.example", 19092, "rack-ü"), (3, "10.0.0.3", 9093, None)]])


def _generic_body(throttle, topics, endpoints=None):
    return {"throttle_time_ms": throttle, "node_endpoints": [
        {"node_id": n, "host": h, "port": p, "rack": r} for n, h, p, r in endpoints or ()],
        "responses": [
        {"name": name, "partition_responses": [
            {"index": p[0], "error_code": p[1], "base_offset": p[2],
             "log_append_time_ms": p[3], "log_start_offset": p[4],
             "record_errors": [{"batch_index": i, "batch_index_error_message": m}
                               for i, m in p[6] or ()],
             "error_message": p[5],
             "current_leader": {"leader_id": p[7][0], "leader_epoch": p[7][1]}
             if p[7] else {"leader_id": -1, "leader_epoch": -1}} for p in parts]}
        for name, parts in topics]}


@pytest.mark.parametrize("extras", [False, True], ids=["plain", "errors-and-leaders"])
@pytest.mark.parametrize("version", range(3, 12))
def test_agrees_with_codec(version, extras):
    rnd = random.Random(version)
    for _ in range(30):
        topics = _random_topics(rnd, extras)
        endpoints = _random_endpoints(rnd) if extras else None
        throttle, correlation_id = rnd.randint(0, 1000), rnd.randint(-2**31, 2**31 - 1)
        fast = build_produce_response(version, correlation_id, throttle, topics, endpoints)
        generic = encode_response(0, version, correlation_id,
                                  _generic_body(throttle, topics, endpoints))
        assert isinstance(fast, bytes)
        assert fast == generic
        assert int.from_bytes(fast[:4], "big") == len(fast) - 4
        got_id, size = read_response_header(0, version, fast[4:])
        decoded = decode_response(0, version, fast[4:], size)
        assert got_id == correlation_id
        assert [(r["name"], [p["base_offset"] for p in r["partition_responses"]])
                for r in decoded["responses"]] == [(n, [p[2] for p in ps]) for n, ps in topics]
        if version >= 10 and extras:
            assert [(e["node_id"], e["host"], e["port"], e["rack"])
                    for e in decoded["node_endpoints"]] == list(endpoints or ())
            assert [tuple(p["current_leader"].values()) for r in decoded["responses"]
                    for p in r["partition_responses"]] == [
                p[7] or (-1, -1) for _, ps in topics for p in ps]


def test_leader_hints_golden():
    """The tagged fields' bytes, spelt out: v10, one partition refused with a leader."""
    fast = build_produce_response(10, 7, 0, [("t", [(0, 6, -1, -1, -1, None, None, (2, 5))])],
                                  [(2, "h", 9, None)])
    partition_tags = b"\x01" + b"\x00\x09" + (2).to_bytes(4, "big") + (5).to_bytes(4, "big") \
        + b"\x00"
    endpoint = (2).to_bytes(4, "big") + b"\x02h" + (9).to_bytes(4, "big") + b"\x00\x00"
    top_tags = b"\x01\x00" + bytes([1 + len(endpoint)]) + b"\x02" + endpoint
    topic_tags, throttle = b"\x00", b"\x00\x00\x00\x00"
    assert fast.endswith(partition_tags + topic_tags + throttle + top_tags)


def test_rejects_versions_without_fast_path():
    for version in (2, 12):
        with pytest.raises(UnsupportedVersionError):
            build_produce_response(version, 1, 0, [])
    with pytest.raises(ValueError):
        build_produce_response(3, 1, 0, [("t", [(0, 0, 1)])])  # a short partition tuple

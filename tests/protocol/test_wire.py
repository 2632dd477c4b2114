"""The Cython fast paths agree with the generic codec byte for byte."""

from __future__ import annotations

import os
import random
import uuid

import pytest

from pybroker._native.wire import build_fetch, parse_produce, read_uvarint
from pybroker.errors import InvalidRequestError, UnsupportedVersionError
from pybroker.file_region import FileRegion
from pybroker.net.protocol import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    messages,
    read_request_header,
    read_response_header,
)
from tests.protocol.samples import plain, sample


def _generic_produce(req: dict):
    return (req["transactional_id"], req["acks"], req["timeout_ms"],
            [(t["name"], [(p["index"], p["records"]) for p in t["partition_data"]])
             for t in req["topic_data"]])


@pytest.mark.parametrize("version", range(3, 12))
def test_parse_produce_agrees_with_codec(version):
    for seed in range(20):
        body = sample(0, version, False, seed)
        frame = bytearray(encode_request(0, version, seed, body))
        buf = memoryview(frame)[4:]
        header = read_request_header(buf)
        fast = parse_produce(buf, header.header_size, version)
        generic = _generic_produce(decode_request(0, version, buf, header.header_size))
        assert plain(fast) == plain(generic)
        for _, parts in fast[3]:
            for _, records in parts:
                if records is not None:
                    assert isinstance(records, memoryview) and records.obj is frame  # no copy


def test_parse_produce_rejects_bad_input():
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 30000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b"x" * 64}]}]}
    for version in (3, 9):
        frame = encode_request(0, version, 1, body)
        buf = memoryview(frame)[4:]
        start = read_request_header(buf).header_size
        assert parse_produce(buf, start, version)[3][0][1][0][1] == b"x" * 64
        for end in range(start, len(buf)):
            with pytest.raises(InvalidRequestError):
                parse_produce(buf[:end], start, version)
        with pytest.raises(InvalidRequestError):
            parse_produce(buf, len(buf) + 1, version)
    with pytest.raises(UnsupportedVersionError):
        parse_produce(b"", 0, 2)
    # a non-flexible topic name that is null
    with pytest.raises(InvalidRequestError):
        parse_produce(b"\xff\xff" + b"\x00\x01" + b"\x00" * 4 + b"\x00\x00\x00\x01\xff\xff", 0, 3)


@pytest.fixture
def segment_file(tmp_path):
    data = os.urandom(64 * 1024)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    yield fd, data
    os.close(fd)


def _materialize(segments) -> bytes:
    return b"".join(os.pread(s.fd, s.length, s.position) if isinstance(s, FileRegion) else s
                    for s in segments)


def _random_fetch(version: int, fd: int, rnd: random.Random):
    topics = []
    for _ in range(rnd.randint(0, 3)):
        topic = uuid.UUID(int=rnd.getrandbits(128)) if version >= 13 else f"topic-{rnd.random()}"
        parts = []
        for index in range(rnd.randint(0, 3)):
            kind = rnd.choice(["none", "bytes", "region", "mixed", "empty"])
            records = {
                "none": None,
                "bytes": os.urandom(rnd.randint(0, 200)),
                "region": FileRegion(fd, rnd.randint(0, 1000), rnd.randint(0, 5000)),
                "mixed": [FileRegion(fd, 0, 61), b"tail", FileRegion(fd, 9000, 100)],
                "empty": [],
            }[kind]
            aborted = rnd.choice([None, [], [(rnd.randint(0, 2**40), rnd.randint(0, 99))]])
            leader = rnd.choice([None, (-1, -1), (rnd.randint(0, 9), rnd.randint(0, 99))])
            parts.append((index, rnd.choice([0, 1, 6, 74]), rnd.randint(-1, 2**40),
                          rnd.randint(-1, 2**40), rnd.randint(-1, 2**40), aborted, records,
                          leader))
        topics.append((topic, parts))
    return topics


def _random_endpoints(rnd: random.Random):
    return rnd.choice([None, [], [(1, "localhost", 9092, None)],
                       [(2, "b2.example", 19092, "rack-ü"), (3, "10.0.0.3", 9093, None)]])


def _generic_body(version, throttle, error, session, topics, endpoints=None):
    return {
        "throttle_time_ms": throttle, "error_code": error, "session_id": session,
        "node_endpoints": [{"node_id": n, "host": h, "port": p, "rack": r}
                           for n, h, p, r in endpoints or ()],
        "responses": [{
            ("topic_id" if version >= 13 else "topic"): topic,
            "partitions": [{
                "partition_index": p[0], "error_code": p[1], "high_watermark": p[2],
                "last_stable_offset": p[3], "log_start_offset": p[4],
                "aborted_transactions": None if p[5] is None else [
                    {"producer_id": a, "first_offset": b} for a, b in p[5]],
                "current_leader": {"leader_id": p[7][0], "leader_epoch": p[7][1]}
                if p[7] else {"leader_id": -1, "leader_epoch": -1},
                "records": p[6]} for p in parts]}
            for topic, parts in topics]}


@pytest.mark.parametrize("version", range(4, messages.APIS[1].versions[1] + 1))
def test_build_fetch_agrees_with_codec(version, segment_file):
    fd, data = segment_file
    rnd = random.Random(version)
    for _ in range(20):
        topics = _random_fetch(version, fd, rnd)
        throttle, error, session = rnd.randint(0, 100), rnd.choice([0, 70]), rnd.randint(0, 9)
        endpoints = _random_endpoints(rnd)
        segments, total = build_fetch(version, 42, throttle, error, session, topics, endpoints)
        generic = encode_response(1, version, 42, _generic_body(version, throttle, error,
                                                                 session, topics, endpoints))
        generic = generic if isinstance(generic, list) else [generic]
        assert [type(s) for s in segments] == [type(s) for s in generic]
        assert all(isinstance(s, (bytes, FileRegion)) for s in segments)
        wire = _materialize(segments)
        assert wire == _materialize(generic)
        assert total == len(wire) == int.from_bytes(wire[:4], "big") + 4
        correlation_id, size = read_response_header(1, version, wire[4:])
        decoded = decode_response(1, version, wire[4:], size)
        assert correlation_id == 42 and len(decoded["responses"]) == len(topics)
        if version >= 16:
            assert [(e["node_id"], e["host"], e["port"], e["rack"])
                    for e in decoded["node_endpoints"]] == list(endpoints or ())
        if version >= 12:
            assert [tuple(p["current_leader"].values()) for r in decoded["responses"]
                    for p in r["partitions"]] == [
                p[7] or (-1, -1) for _, ps in topics for p in ps]


def test_build_fetch_region_is_not_copied(segment_file):
    fd, _ = segment_file
    region = FileRegion(fd, 0, 65536)
    segments, total = build_fetch(11, 1, 0, 0, 0, [("t", [(0, 0, 5, 5, 0, None, region, None)])])
    assert segments[1] is region and len(segments) == 2
    assert total == len(segments[0]) + 65536
    with pytest.raises(UnsupportedVersionError):
        build_fetch(3, 1, 0, 0, 0, [])


@pytest.mark.parametrize("encoded,value", [
    (b"\x00", 0), (b"\x01", 1), (b"\x7f", 127), (b"\x80\x01", 128), (b"\xac\x02", 300),
    (b"\xff\xff\x03", 65535), (b"\xff\xff\xff\xff\x07", 2**31 - 1),
])
def test_uvarint_golden(encoded, value):
    assert read_uvarint(encoded + b"\xee", 0, len(encoded)) == (value, len(encoded))


@pytest.mark.parametrize("encoded", [
    b"", b"\x80", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x01",
])
def test_uvarint_rejects(encoded):
    with pytest.raises(InvalidRequestError):
        read_uvarint(encoded + b"\x01", 0, len(encoded))  # the byte past `end` is not read

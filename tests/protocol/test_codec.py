"""The generic codec: generated table freshness, round trips of every API version, headers,
defaults, zero-copy records and file-region segments."""

from __future__ import annotations

import os
import struct

import pytest

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
    response_defaults,
    supported_versions,
    with_defaults,
)
from tests.protocol.samples import all_versions, plain, sample

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPECS = os.path.join(REPO, "..", "shared", "kafka-message-specs")
VERSIONS = list(all_versions())


def test_generated_table_is_up_to_date():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "gen_protocol", os.path.join(REPO, "tools", "gen_protocol.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert os.path.isdir(SPECS), f"message specs expected at {SPECS}"
    for relpath, text in gen.outputs(SPECS).items():
        with open(os.path.join(REPO, relpath)) as f:
            assert f.read() == text, f"{relpath} is stale: run python3 tools/gen_protocol.py"


def test_table_covers_the_apis_the_broker_needs():
    versions = {k: (lo, hi) for k, lo, hi in supported_versions()}
    assert versions[0] == (0, 11)  # Produce
    assert versions[1][1] >= 16  # Fetch
    assert versions[18] == (0, 4)  # ApiVersions
    assert versions[3][1] >= 12  # Metadata
    assert len(versions) == len(messages.APIS)


def _frame_body(frame: bytes) -> bytes:
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    return frame[4:]


@pytest.mark.parametrize("api_key,version", VERSIONS)
def test_request_round_trip(api_key, version):
    for seed in range(3):
        body = sample(api_key, version, False, seed)
        frame = encode_request(api_key, version, 1234 + seed, body, client_id="cid")
        buf = _frame_body(frame)
        header = read_request_header(buf)
        assert (header.api_key, header.api_version, header.correlation_id) == \
            (api_key, version, 1234 + seed)
        assert header.client_id == (None if api_key == 7 and version == 0 else "cid")
        decoded = decode_request(api_key, version, buf, header.header_size)
        assert plain(decoded) == body
        # a strict prefix of a body never decodes: every field is mandatory
        if len(buf) > header.header_size:
            with pytest.raises(InvalidRequestError):
                decode_request(api_key, version, buf[:-1], header.header_size)


@pytest.mark.parametrize("api_key,version", VERSIONS)
def test_response_round_trip(api_key, version):
    for seed in range(3):
        body = sample(api_key, version, True, seed)
        frame = encode_response(api_key, version, 99, body)
        buf = _frame_body(frame)
        correlation_id, size = read_response_header(api_key, version, buf)
        assert correlation_id == 99
        assert plain(decode_response(api_key, version, buf, size)) == body


def test_header_versions():
    # Metadata v9+ is flexible: request header v2 carries tagged fields after client id
    frame = encode_request(3, 12, 5, {"topics": None,
                                      "include_topic_authorized_operations": False},
                           client_id=None)
    header = read_request_header(frame[4:])
    assert header.client_id is None
    assert frame[4:][header.header_size - 1] == 0  # the header's empty tagged fields
    # ControlledShutdown v0 has no client id at all (request header v0)
    frame = encode_request(7, 0, 5, {"broker_id": 3})
    assert read_request_header(frame[4:]).header_size == 8
    # ApiVersions answers always use response header v0, even at v3+ (KIP-511)
    frame = encode_response(18, 3, 77, response_defaults(18, 3))
    assert frame[4:8] == struct.pack(">i", 77) and frame[8:10] == b"\x00\x00"  # error code
    # flexible responses use header v1: correlation id then empty tagged fields
    frame = encode_response(3, 9, 77, response_defaults(3, 9))
    assert frame[8] == 0


def test_unknown_api_and_version():
    frame = encode_request(18, 3, 1, {"client_software_name": "", "client_software_version": ""})
    raw = bytearray(frame[4:])
    raw[2:4] = struct.pack(">h", 99)  # ApiVersions v99: header still readable (v2)
    header = read_request_header(bytes(raw))
    assert (header.api_version, header.correlation_id, header.client_id) == (99, 1, "pybroker")
    assert header.header_size == len(raw) - 3  # header v2: its tag buffer was read too
    with pytest.raises(UnsupportedVersionError):
        decode_request(18, 99, bytes(raw), header.header_size)
    with pytest.raises(InvalidRequestError):
        decode_request(4242, 0, b"", 0)
    # ...and answered with an ApiVersions v0 body, the one every client can read (KIP-511)
    body = {"error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]}
    assert encode_response(18, 99, 1, body) == encode_response(18, 0, 1, body)
    assert encode_response(18, 99, 1, body)[8:] == \
        b"\x00\x23" + b"\x00\x00\x00\x01" + b"\x00\x12\x00\x00\x00\x04"


def test_with_defaults_fills_left_out_fields_at_every_depth():
    body = with_defaults(0, 9, {"responses": [{"name": "t", "partition_responses": [
        {"index": 0}]}]}, response=True)
    frame = encode_response(0, 9, 1, body)
    buf = frame[4:]
    _, size = read_response_header(0, 9, buf)
    part = decode_response(0, 9, buf, size)["responses"][0]["partition_responses"][0]
    assert part["log_append_time_ms"] == -1 and part["log_start_offset"] == -1
    assert part["error_message"] is None and part["record_errors"] == []
    assert part["current_leader"] == {"leader_id": -1, "leader_epoch": -1}
    # fields newer than the version decode to their defaults too
    frame = encode_request(0, 3, 1, {"acks": -1, "timeout_ms": 5, "topic_data": []})
    assert decode_request(0, 3, frame[4:], read_request_header(frame[4:]).header_size)[
        "transactional_id"] is None


def test_records_decode_as_views_of_the_frame():
    records = bytes(range(256)) * 4
    frame = bytearray(encode_request(0, 9, 1, {"acks": 1, "timeout_ms": 1, "topic_data": [
        {"name": "t", "partition_data": [{"index": 3, "records": records}]}]}))
    body = memoryview(frame)[4:]
    req = decode_request(0, 9, body, read_request_header(body).header_size)
    view = req["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(view, memoryview) and view == records
    frame[-4] ^= 0xFF  # the view shares the frame's memory (3 empty tag buffers follow)
    assert view[-1] == records[-1] ^ 0xFF


def test_tagged_fields_round_trip_and_unknown_tags_are_skipped():
    body = with_defaults(0, 10, {"responses": [{"name": "t", "partition_responses": [
        {"index": 1, "current_leader": {"leader_id": 4, "leader_epoch": 9}}]}]}, response=True)
    frame = encode_response(0, 10, 1, body)
    buf = frame[4:]
    _, size = read_response_header(0, 10, buf)
    part = decode_response(0, 10, buf, size)["responses"][0]["partition_responses"][0]
    assert part["current_leader"] == {"leader_id": 4, "leader_epoch": 9}
    # an unknown tag 7 with 3 bytes of payload added to the top-level tagged fields
    frame = encode_request(18, 3, 1, {"client_software_name": "a", "client_software_version": "b"})
    buf = frame[4:-1] + b"\x01\x07\x03xyz"
    header = read_request_header(buf)
    assert decode_request(18, 3, buf, header.header_size) == {
        "client_software_name": "a", "client_software_version": "b"}


def test_file_regions_become_segments():
    region = FileRegion(fd=5, position=4096, length=1000)
    body = {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "high_watermark": 10, "records": [b"head", region]}]}]}
    out = encode_response(1, 11, 3, with_defaults(1, 11, body, response=True))
    assert isinstance(out, list) and out[1] == region and len(out) == 2  # v11: records last
    wire = sum(s.length if isinstance(s, FileRegion) else len(s) for s in out)
    assert struct.unpack(">i", out[0][:4])[0] == wire - 4
    # the same response with the region's bytes inline decodes to the same thing
    data = b"head" + b"r" * 1000
    inline = encode_response(1, 11, 3, with_defaults(1, 11, {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "high_watermark": 10, "records": data}]}]}, response=True))
    assert out[0] + b"r" * 1000 == inline
    flexible = encode_response(1, 12, 3, with_defaults(1, 12, body, response=True))  # v12: tagged-field bytes follow the region
    assert len(flexible) == 3 and flexible[1] == region and flexible[2] == b"\0\0\0"

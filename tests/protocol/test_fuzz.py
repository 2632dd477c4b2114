"""Truncated, mutated and random frames raise InvalidRequestError and nothing else, and a
decoder never reads past the frame it is given."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker._native.wire import parse_produce
from pybroker.errors import InvalidRequestError, UnsupportedVersionError
from pybroker.net.protocol import decode_request, encode_request, read_request_header
from tests.protocol.samples import all_versions, sample

VERSIONS = list(all_versions())
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _decode_or_invalid(api_key, version, buf, offset):
    try:
        return decode_request(api_key, version, buf, offset)
    except InvalidRequestError:
        return None


@FUZZ
@given(st.sampled_from(VERSIONS), st.binary(max_size=200))
def test_random_bodies(api_version, garbage):
    api_key, version = api_version
    _decode_or_invalid(api_key, version, garbage, 0)


@FUZZ
@given(st.binary(max_size=64))
def test_random_headers(garbage):
    try:
        header = read_request_header(garbage)
    except InvalidRequestError:
        return
    assert 8 <= header.header_size <= len(garbage)


@FUZZ
@given(st.sampled_from(VERSIONS), st.integers(0, 3), st.data())
def test_truncated_and_mutated_frames(api_version, seed, data):
    api_key, version = api_version
    frame = encode_request(api_key, version, 7, sample(api_key, version, False, seed))
    # the frame sits inside a larger buffer: bytes past its end must never be read
    backing = bytearray(frame[4:] + b"\x7f" * 64)
    length = len(frame) - 4
    header = read_request_header(memoryview(backing)[:length])
    cut = data.draw(st.integers(header.header_size, max(header.header_size, length - 1)))
    if cut < length:
        try:
            decode_request(api_key, version, memoryview(backing)[:cut], header.header_size)
            raise AssertionError("a truncated body decoded")
        except InvalidRequestError:
            pass
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, length - 1))
        backing[pos] = data.draw(st.integers(0, 255))
    try:
        header = read_request_header(memoryview(backing)[:length])
    except InvalidRequestError:
        return
    try:
        decode_request(header.api_key, header.api_version, memoryview(backing)[:length],
                       header.header_size)
    except (InvalidRequestError, UnsupportedVersionError):
        pass


@FUZZ
@given(st.integers(3, 11), st.integers(0, 9), st.data())
def test_produce_fast_path_fuzz(version, seed, data):
    frame = encode_request(0, version, 7, sample(0, version, False, seed))
    backing = bytearray(frame[4:] + b"\x7f" * 64)
    length = len(frame) - 4
    start = read_request_header(memoryview(backing)[:length]).header_size
    for _ in range(data.draw(st.integers(0, 4))):
        backing[data.draw(st.integers(start, length - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(start, length))
    view = memoryview(backing)[:cut]
    try:
        fast = parse_produce(view, start, version)
    except InvalidRequestError:
        fast = None
    generic = _decode_or_invalid(0, version, view, start)
    assert (fast is None) == (generic is None)

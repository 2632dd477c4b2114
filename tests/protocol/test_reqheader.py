"""The native request header parser (``pybroker._native.reqheader``) against an encoder
written here from the protocol guide, independent of the codec's writer."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker._native.reqheader import parse_request_header, set_first_flexible
from pybroker.errors import InvalidRequestError
from pybroker.net.protocol import codec, request_header_version

TAIL = b"\x7f" * 16  # bytes after the header: the body, never read by the parser


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _header(api_key: int, version: int, correlation_id: int, client_id: bytes | None,
            tags: list[tuple[int, bytes]], header_version: int) -> bytes:
    out = struct.pack(">hhi", api_key, version, correlation_id)
    if header_version >= 1:
        out += struct.pack(">h", -1) if client_id is None else \
            struct.pack(">h", len(client_id)) + client_id
    if header_version >= 2:
        out += _uvarint(len(tags))
        for tag, value in tags:
            out += _uvarint(tag) + _uvarint(len(value)) + value
    return out


HEADERS = st.tuples(
    st.integers(-2**15, 2**15 - 1), st.integers(-2**15, 2**15 - 1),
    st.integers(-2**31, 2**31 - 1),
    st.none() | st.text(max_size=40).map(lambda s: s.encode()),
    st.lists(st.tuples(st.integers(0, 2**20), st.binary(max_size=20)), max_size=3))


@settings(max_examples=500, deadline=None)
@given(HEADERS)
def test_parses_what_the_guide_encodes(fields):
    api_key, version, correlation_id, client_id, tags = fields
    hv = request_header_version(api_key, version)
    raw = _header(api_key, version, correlation_id, client_id, tags, hv)
    expected = (api_key, version, correlation_id,
                None if client_id is None or hv == 0 else client_id.decode(), len(raw))
    assert parse_request_header(bytearray(raw + TAIL)) == expected
    assert parse_request_header(memoryview(raw + TAIL)[:len(raw)]) == expected
    for cut in range(len(raw)):  # every strict prefix is truncated
        with pytest.raises(InvalidRequestError):
            parse_request_header(raw[:cut])


def test_header_version_follows_the_table():
    assert request_header_version(3, 8) == 1 and request_header_version(3, 9) == 2
    assert request_header_version(18, 2) == 1 and request_header_version(18, 99) == 2
    assert request_header_version(7, 0) == 0 and request_header_version(7, 1) == 1
    assert request_header_version(4242, 0) == 1 and request_header_version(-5, 30) == 1


def test_bad_client_id_and_tags():
    good = _header(0, 8, 1, b"ok", [], 1)
    with pytest.raises(InvalidRequestError, match="utf-8"):
        parse_request_header(good[:8] + struct.pack(">h", 2) + b"\xff\xfe")
    with pytest.raises(InvalidRequestError, match="negative length"):
        parse_request_header(good[:8] + struct.pack(">h", -2))
    flexible = _header(3, 12, 1, b"c", [], 2)
    with pytest.raises(InvalidRequestError, match="varint"):
        parse_request_header(flexible[:-1] + b"\xff" * 6)  # an endless tag count


def test_codec_header_is_the_native_one():
    frame = codec.encode_request(1, 12, 42, {}, client_id="consumer-1")
    header = codec.read_request_header(frame[4:])
    assert header == codec.RequestHeader(*parse_request_header(frame[4:]))
    assert (header.api_key, header.correlation_id, header.client_id) == (1, 42, "consumer-1")


def test_a_bad_table_is_refused_whole():
    with pytest.raises(ValueError):
        set_first_flexible({3: 0, 5000: 0})
    with pytest.raises(ValueError):
        set_first_flexible({3: -1})
    assert request_header_version(3, 8) == 1  # the codec's table still in force
    assert request_header_version(3, 9) == 2

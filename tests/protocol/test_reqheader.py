"""The native request header parser (``pybroker._native.reqheader``) against an encoder
written here from the protocol guide, independent of the codec's writer."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker._native.reqheader import parse_request_header
from pybroker.errors import InvalidRequestError
from pybroker.net.protocol import codec, messages, request_header_version

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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
    frame = codec.encode_request(1, 12, 42, codec.with_defaults(1, 12, {}), client_id="consumer-1")
    header = codec.read_request_header(frame[4:])
    assert header == codec.RequestHeader(*parse_request_header(frame[4:]))
    assert (header.api_key, header.correlation_id, header.client_id) == (1, 42, "consumer-1")


def test_the_compiled_flexible_table_agrees_with_the_message_table():
    for key, api in messages.APIS.items():
        for version in range(api.versions[0], api.versions[1] + 2):  # one past the specs too
            flexible = api.request_flexible is not None and version >= api.request_flexible
            expected = 0 if (key, version) == (7, 0) else 2 if flexible else 1
            assert request_header_version(key, version) == expected, (api.name, version)
    assert request_header_version(max(messages.APIS) + 1, 0) == 1  # a key of no spec
    assert request_header_version(-1, 0) == 1


def test_the_parser_needs_no_other_module_imported_first():
    # the flexible versions are compiled in (csrc/pb_protocol.h), not handed over by the
    # codec at its import, so a fresh interpreter parses a flexible header right away
    code = (
        "import sys\n"
        "from pybroker._native.reqheader import parse_request_header\n"
        "frame = bytes.fromhex('0003000c00000007ffff00') + b'body'\n"
        "assert parse_request_header(frame) == (3, 12, 7, None, 11), parse_request_header(frame)\n"
        "assert 'pybroker.net.protocol.codec' not in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                            text=True, timeout=60, env={**os.environ, "PYTHONPATH": REPO})
    assert result.returncode == 0, result.stderr

"""Misspelt fields fail loudly: at run time the encoder rejects a key its struct does not
have in any version (``UnknownFieldError``, naming message, version, struct and key), and
mypy rejects it in a dict typed with the generated ``typed.py``."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from pybroker.broker import handlers
from pybroker.broker.broker import Broker
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode
from pybroker.net.connection import CloseConnection
from pybroker.net.protocol import (
    UnknownFieldError,
    decode_response,
    encode_request,
    encode_response,
    read_response_header,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_misspelt_response_field_is_an_error_not_success():
    # the example: "error_cod" would have been dropped and error_code 0 sent
    with pytest.raises(UnknownFieldError) as e:
        encode_response(3, 12, 7, {"topics": [{"error_cod": 3, "name": "t"}]})
    text = str(e.value)
    assert "MetadataResponse v12, topics[]" in text and "'error_cod'" in text
    assert "error_code" in text  # the fields it has, to spot the typo


def test_misspelt_fields_are_found_at_every_depth_and_in_tagged_structs():
    with pytest.raises(UnknownFieldError, match=r"MetadataResponse v9: no field 'topic'"):
        encode_response(3, 9, 1, {"topic": []})
    with pytest.raises(UnknownFieldError, match=r"topics\[\]\.partitions\[\]: no field 'leader'"):
        encode_response(3, 12, 1, {"topics": [{"partitions": [{"leader": 1}]}]})
    tagged = {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "current_leader": {"leader": 4}}]}]}
    with pytest.raises(UnknownFieldError, match=r"current_leader: no field 'leader'"):
        encode_response(0, 10, 1, tagged)
    with pytest.raises(UnknownFieldError, match=r"MetadataRequest v12.*'topic'"):
        encode_request(3, 12, 1, {"topic": None})


def test_fields_of_other_versions_are_accepted_and_absent_fields_take_defaults():
    # one dict serves every version: cluster_id (v2+) and topic_id (v10+) are ignored at v1
    body = {"brokers": [], "cluster_id": "c", "controller_id": 2,
            "topics": [{"name": "t", "topic_id": uuid.UUID(int=7), "is_internal": False}]}
    for version in (1, 12):
        frame = encode_response(3, version, 1, body)
        _, size = read_response_header(3, version, frame[4:])
        topic = decode_response(3, version, frame[4:], size)["topics"][0]
        assert topic["name"] == "t" and topic["error_code"] == 0


@pytest.mark.parametrize("api_key", sorted(handlers.load_all()))
def test_the_brokers_whole_request_error_body_encodes_for_every_api(api_key):
    """The body the dispatcher answers a failed handler with (``Broker._error_body``) has
    only fields of the API's response, in every version the broker serves."""
    low, high = handlers.HANDLERS[api_key].versions
    for version in range(low, high + 1):
        ctx = RequestContext(None, api_key, version, 1, None, "test")
        try:
            body = Broker._error_body(ctx, ErrorCode.UNKNOWN_SERVER_ERROR, "boom")
        except CloseConnection:  # no top-level error_code: the connection is closed instead
            continue
        frame = encode_response(api_key, version, 1, body)
        _, size = read_response_header(api_key, version, frame[4:])
        decoded = decode_response(api_key, version, frame[4:], size)
        assert decoded["error_code"] == ErrorCode.UNKNOWN_SERVER_ERROR


def test_mypy_rejects_a_misspelt_field_of_a_generated_type(tmp_path):
    source = tmp_path / "handler_with_typo.py"
    source.write_text(
        "from pybroker.net.protocol.typed import MetadataResponse\n"
        "ok: MetadataResponse = {'topics': [{'error_code': 3, 'name': 't'}]}\n"
        "typo: MetadataResponse = {'topics': [{'error_cod': 3, 'name': 't'}]}\n")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--follow-imports=silent",
         str(source)], cwd=REPO, capture_output=True, text=True, timeout=240,
        env={**os.environ, "PYTHONPATH": REPO})
    # only errors: mypy also notes the project's per-package sections this file leaves unused
    lines = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert len(lines) == 1, result.stdout + result.stderr
    assert ":3:" in lines[0] and '"error_cod"' in lines[0], lines[0]

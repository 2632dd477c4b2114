"""Misspelt and forgotten fields fail loudly: at run time the encoder rejects a key its
struct does not have in any version (``UnknownFieldError``) and a field of the version it
writes that the spec gives no default (``MissingFieldError``), each naming message,
version, struct and key; mypy rejects both in a dict typed with the generated ``typed.py``."""

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
    MissingFieldError,
    UnknownFieldError,
    decode_response,
    encode_request,
    encode_response,
    read_response_header,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def metadata(topics: list) -> dict:
    return {"throttle_time_ms": 0, "brokers": [], "topics": topics}


def a_topic(**fields: object) -> dict:
    return {"error_code": 0, "name": "t", "topic_id": uuid.UUID(int=0), "partitions": [],
            **fields}


def test_a_misspelt_response_field_is_an_error_not_success():
    # the example: "error_cod" would have been dropped and error_code 0 sent
    with pytest.raises(UnknownFieldError) as e:
        encode_response(3, 12, 7, metadata([{"error_cod": 3, "name": "t"}]))
    text = str(e.value)
    assert "MetadataResponse v12, topics[]" in text and "'error_cod'" in text
    assert "error_code" in text  # the fields it has, to spot the typo


def test_misspelt_fields_are_found_at_every_depth_and_in_tagged_structs():
    with pytest.raises(UnknownFieldError, match=r"MetadataResponse v9: no field 'topic'"):
        encode_response(3, 9, 1, {**metadata([]), "topic": []})
    with pytest.raises(UnknownFieldError, match=r"topics\[\]\.partitions\[\]: no field 'leader'"):
        encode_response(3, 12, 1, metadata([a_topic(partitions=[{"leader": 1}])]))
    tagged = {"throttle_time_ms": 0, "responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 0, "record_errors": [],
         "current_leader": {"leader": 4}}]}]}
    with pytest.raises(UnknownFieldError, match=r"current_leader: no field 'leader'"):
        encode_response(0, 10, 1, tagged)
    with pytest.raises(UnknownFieldError, match=r"MetadataRequest v12.*'topic'"):
        encode_request(3, 12, 1, {"topic": None})


def test_a_forgotten_field_is_an_error_not_its_default():
    # error_code left out would have gone out as 0, success
    with pytest.raises(MissingFieldError) as e:
        encode_response(3, 12, 7, metadata([{"name": "t", "topic_id": uuid.UUID(int=0),
                                              "partitions": []}]))
    assert "MetadataResponse v12, topics[]: missing error_code" in str(e.value)
    with pytest.raises(MissingFieldError, match=r"MetadataResponse v12: missing brokers"):
        encode_response(3, 12, 1, {"throttle_time_ms": 0, "topics": []})
    # required at the versions that have it only: throttle_time_ms is v3+
    encode_response(3, 2, 1, {"brokers": [], "topics": []})
    with pytest.raises(MissingFieldError, match=r"MetadataResponse v3: missing throttle_time_ms"):
        encode_response(3, 3, 1, {"brokers": [], "topics": []})


def test_fields_of_other_versions_are_accepted_and_defaulted_fields_may_be_absent():
    # one dict serves every version: cluster_id (v2+) and topic_id (v10+) are ignored at v1;
    # the spec gives is_internal and cluster_id defaults, so they may be left out
    body = {"throttle_time_ms": 0, "brokers": [], "controller_id": 2, "topics": [
        a_topic(topic_id=uuid.UUID(int=7))]}
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
        "ok: MetadataResponse = {'brokers': [], 'topics': [\n"
        "    {'error_code': 3, 'name': 't', 'partitions': []}]}\n"
        "typo: MetadataResponse = {'brokers': [], 'topics': [\n"
        "    {'error_cod': 3, 'name': 't', 'partitions': []}]}\n"
        "forgot: MetadataResponse = {'brokers': [], 'topics': [{'name': 't', 'partitions': []}]}\n")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--follow-imports=silent",
         str(source)], cwd=REPO, capture_output=True, text=True, timeout=240,
        env={**os.environ, "PYTHONPATH": REPO})
    # only errors: mypy also notes the project's per-package sections this file leaves unused
    lines = [line for line in result.stdout.splitlines() if ": error:" in line]
    by_line = {int(line.split(":")[1]) for line in lines}
    assert by_line == {5, 6}, result.stdout + result.stderr  # ok (lines 2-3) is fine
    assert any(":5:" in line and 'Extra key "error_cod"' in line for line in lines), lines
    assert any(":6:" in line and 'Missing key "error_code"' in line for line in lines), lines

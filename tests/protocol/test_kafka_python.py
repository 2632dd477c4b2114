"""Differential tests against kafka-python, an implementation nobody here wrote (STYLE 22).

Two oracles from kafka-python 3.x: the hand-written Struct classes of ``kafka.protocol.old``
(independent of Kafka's JSON specs; non-flexible and early flexible versions) and the
JSON-driven ``ApiMessage`` classes (``kafka.protocol.*``; every version up to the ones it
knows). Requests encoded by kafka-python must be byte-identical to ours and decode with our
codec; responses we encode must decode with kafka-python to the same values.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import kafka.protocol.old as old_pkg
import pytest
from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.old.types import Array, Schema
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from pybroker.net.protocol import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    messages,
    read_request_header,
    read_response_header,
)
from tests.protocol.samples import plain, positional, sample

API_KEYS = {"ApiVersions": 18, "Metadata": 3, "Produce": 0, "Fetch": 1, "ListOffsets": 2,
            "FindCoordinator": 10, "JoinGroup": 11, "OffsetCommit": 8, "CreateTopics": 19}
NEW_CLASSES = {
    18: (ApiVersionsRequest, ApiVersionsResponse), 3: (MetadataRequest, MetadataResponse),
    0: (ProduceRequest, ProduceResponse), 1: (FetchRequest, FetchResponse),
    2: (ListOffsetsRequest, ListOffsetsResponse),
    10: (FindCoordinatorRequest, FindCoordinatorResponse),
    11: (JoinGroupRequest, JoinGroupResponse), 8: (OffsetCommitRequest, OffsetCommitResponse),
    19: (CreateTopicsRequest, CreateTopicsResponse),
}


def _old_classes():
    found = {}
    for info in pkgutil.iter_modules(old_pkg.__path__):
        module = importlib.import_module(f"{old_pkg.__name__}.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            key, version = getattr(cls, "API_KEY", None), getattr(cls, "API_VERSION", None)
            if key in API_KEYS.values() and isinstance(version, int) and \
                    cls.__name__.endswith(f"_v{version}"):
                found[(key, version, cls.is_request())] = cls
    return found


OLD = _old_classes()
OLD_CASES = sorted({(k, v) for k, v, _ in OLD if v >= messages.APIS[k].versions[0]})
NEW_CASES = sorted((k, v) for k, (req, _) in NEW_CLASSES.items()
                   for v in range(max(req.min_version, messages.APIS[k].versions[0]),
                                  min(req.max_version, messages.APIS[k].versions[1]) + 1))


def test_the_oracles_cover_the_required_apis():
    assert {k for k, _ in OLD_CASES} == set(API_KEYS.values())
    assert {k for k, _ in NEW_CASES} == set(API_KEYS.values())
    assert len(OLD_CASES) >= 60 and len(NEW_CASES) >= 90


def _response_sample(api_key, version, seed, hand_written=False):
    body = sample(api_key, version, True, seed, tagged=False)
    if api_key == 18:
        body["error_code"] = 0  # kafka-python re-reads an ApiVersions error response as v0
    if hand_written:
        _no_int_min_bitfields(body)
    return body


def _no_int_min_bitfields(d):
    """kafka-python's hand-written Metadata decodes an authorized-operations bit field of
    INT32_MIN (Kafka's "not requested") as None; use another value so both sides compare."""
    for key, value in d.items():
        if key.endswith("authorized_operations") and value == -(2**31):
            d[key] = 5
        elif isinstance(value, dict):
            _no_int_min_bitfields(value)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    _no_int_min_bitfields(item)


def _fit(kp_type, value):
    """Our positional value in the shape of a hand-written schema: where kafka-python
    declares an array of a primitive for a one-field struct (Metadata topics, say), the
    elements are the bare values."""
    if value is None:
        return None
    if isinstance(kp_type, Schema):
        return tuple(_fit(t, v) for t, v in zip(kp_type.fields, value, strict=True))
    if isinstance(kp_type, Array):
        if isinstance(kp_type.array_of, (Schema, Array)):
            return [_fit(kp_type.array_of, v) for v in value]
        return [v[0] if isinstance(v, tuple) else v for v in value]
    return value


def _old_positional(cls, body, api_key, version, response):
    return _fit(cls.SCHEMA, positional(body, api_key, version, response))


def _comparable(value):
    """Both sides in one shape: empty tag buffers dropped (kafka-python keeps them only at
    some levels), bit sets (its authorized-operations fields) as the int32 on the wire."""
    if isinstance(value, (tuple, list)):
        items = [_comparable(v) for v in value if not (isinstance(v, dict) and not v)]
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, set):
        bits = sum(1 << b for b in value)
        return bits - (1 << 32) if bits >= 1 << 31 else bits
    return value


def _old_struct_values(obj) -> tuple:
    return _comparable(plain(tuple(getattr(obj, name) for name in obj.SCHEMA.names)))


@pytest.mark.parametrize("api_key,version", OLD_CASES)
def test_hand_written_kafka_python_requests(api_key, version):
    cls = OLD[(api_key, version, True)]
    for seed in range(4):
        body = sample(api_key, version, False, seed, tagged=False)
        request = cls(*_old_positional(cls, body, api_key, version, False))
        request.with_header(correlation_id=seed, client_id="kp")
        theirs = request.encode(header=True, framed=True)
        assert theirs == encode_request(api_key, version, seed, body, client_id="kp")
        header = read_request_header(theirs[4:])
        assert (header.api_key, header.api_version, header.client_id) == (api_key, version, "kp")
        assert plain(decode_request(api_key, version, theirs[4:], header.header_size)) == body


@pytest.mark.parametrize("api_key,version", OLD_CASES)
def test_hand_written_kafka_python_responses(api_key, version):
    cls = OLD[(api_key, version, False)]
    for seed in range(4):
        body = _response_sample(api_key, version, seed, hand_written=True)
        ours = encode_response(api_key, version, 1000 + seed, body)
        theirs = cls.decode(ours, header=True, framed=True)
        assert theirs.header.correlation_id == 1000 + seed
        assert _old_struct_values(theirs) == _comparable(
            _old_positional(cls, body, api_key, version, True))


def _our_name(name: str, d: dict) -> str:
    """kafka-python shortens a few names (Metadata's topic_authorized_operations and
    cluster_authorized_operations are both authorized_operations)."""
    if name in d:
        return name
    matches = [k for k in d if k.endswith("_" + name)]
    assert len(matches) == 1, (name, sorted(d))
    return matches[0]


def _kp_shape(container_cls, d: dict, version: int, build: bool, top: bool = True):
    """Our dict in kafka-python's terms, fields of this version only (it leaves the others
    out): ``build`` makes ApiMessage/DataContainer objects to encode, otherwise a dict to
    compare with what it decoded (tagged structs, default in our samples, are None)."""
    values = {}
    for field in container_cls._struct._fields:
        if not field.for_version_q(version):
            continue
        v = d[_our_name(field.name, d)]
        sub = getattr(container_cls, field.type_str, None)
        if v is not None and field.is_struct_array():
            v = [_kp_shape(sub, x, version, build, False) for x in v]
        elif v is not None and field.is_struct():
            v = None if field._tag is not None and not build else \
                _kp_shape(sub, v, version, build, False)
        elif build and field.name.endswith("authorized_operations"):
            v = None if v == -(2**31) else {b for b in range(32) if (v & 0xFFFFFFFF) >> b & 1}
        values[field.name] = v
    if not build:
        return values
    return container_cls(version=version, **values) if top else container_cls(**values)


def _from_kp(obj) -> dict:
    return _bitfields_as_ints(plain(obj.to_dict(json=False)))


def _bitfields_as_ints(value):
    """kafka-python decodes authorized-operations bit fields as sets of bit numbers, and
    INT32_MIN ("not requested") as None; back to the int32 on the wire."""
    if isinstance(value, dict):
        return {k: -(2**31) if k.endswith("authorized_operations") and v is None
                else _bitfields_as_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_bitfields_as_ints(v) for v in value]
    return _comparable(value)


@pytest.mark.parametrize("api_key,version", NEW_CASES)
def test_kafka_python_api_messages(api_key, version):
    req_cls, resp_cls = NEW_CLASSES[api_key]
    for seed in range(3):
        body = sample(api_key, version, False, seed)
        request = _kp_shape(req_cls, body, version, build=True)
        request.with_header(correlation_id=seed, client_id="kp")
        theirs = bytes(request.encode(header=True, framed=True))
        ours = encode_request(api_key, version, seed, body, client_id="kp")
        assert theirs == ours
        header = read_request_header(theirs[4:])
        assert plain(decode_request(api_key, version, theirs[4:], header.header_size)) == body

        body = _response_sample(api_key, version, seed)
        frame = encode_response(api_key, version, 7, body)
        decoded = resp_cls.decode(frame, version=version, header=True, framed=True)
        assert _from_kp(decoded) == _kp_shape(resp_cls, body, version, build=False)
        response = _kp_shape(resp_cls, body, version, build=True)
        response.with_header(correlation_id=7)
        theirs = bytes(response.encode(header=True, framed=True))
        correlation_id, size = read_response_header(api_key, version, theirs[4:])
        assert correlation_id == 7
        assert plain(decode_response(api_key, version, theirs[4:], size)) == body

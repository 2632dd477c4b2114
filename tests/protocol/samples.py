"""Deterministic sample bodies for every message version, built from the generated table.

Every field present at the version gets a non-default value (so tagged fields really go on
the wire); fields absent at the version hold their defaults, which is exactly what the
decoder fills in, so ``decode(encode(sample)) == sample``.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from pybroker.net.protocol import codec, messages
from pybroker.net.protocol.schema import TYPE_DEFAULT, F, in_range

_RANGES = {"int8": (-128, 127), "int16": (-32768, 32767), "uint16": (0, 65535),
           "int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1),
           "int64": (-(2**63), 2**63 - 1)}


def all_versions():
    """(api_key, version) for every API version in the specs."""
    for key, api in sorted(messages.APIS.items()):
        for v in range(api.versions[0], api.versions[1] + 1):
            yield key, v


def _value(f: F, t: str, version: int, flexible: bool, rnd: random.Random) -> Any:
    if t in _RANGES:
        lo, hi = _RANGES[t]
        return rnd.choice([lo, hi, rnd.randint(lo, hi), 1])
    if t == "bool":
        return True
    if t == "float64":
        return rnd.choice([0.5, -1e300, 3.25])
    if t == "uuid":
        return uuid.UUID(int=rnd.getrandbits(128) | 1)
    if t == "string":
        return rnd.choice(["", "topic-é", f.name * rnd.randint(1, 3)])
    if t in ("bytes", "records"):
        return bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 40)))
    raise AssertionError(t)


def sample_struct(fields: tuple[F, ...], version: int, flexible: bool,
                  rnd: random.Random, depth: int = 0, tagged: bool = True) -> dict:
    """``tagged=False`` leaves tagged fields at their defaults (off the wire)."""
    d = {}
    for f in fields:
        is_tagged = f.tag is not None and in_range(f.tagged, version)
        present = in_range(f.versions, version) and (flexible or not is_tagged)
        present = present and (tagged or not is_tagged)
        if not present:
            d[f.name] = codec._type_default(f)
            continue
        flex = flexible if f.flexible is TYPE_DEFAULT else in_range(f.flexible, version)
        if in_range(f.nullable, version) and rnd.random() < 0.25:
            d[f.name] = None
            continue
        t = f.type
        if t == "struct":
            d[f.name] = sample_struct(f.fields, version, flex, rnd, depth + 1, tagged)
        elif t == "[]struct":
            n = rnd.randint(0, 2) if depth < 3 else 0
            d[f.name] = [sample_struct(f.fields, version, flex, rnd, depth + 1, tagged)
                         for _ in range(n)]
        elif t.startswith("[]"):
            d[f.name] = [_value(f, t[2:], version, flex, rnd) for _ in range(rnd.randint(0, 3))]
        else:
            d[f.name] = _value(f, t, version, flex, rnd)
    return d


def sample(api_key: int, version: int, response: bool, seed: int = 0,
           tagged: bool = True) -> dict:
    api = messages.APIS[api_key]
    first = api.response_flexible if response else api.request_flexible
    flexible = first is not None and version >= first
    rnd = random.Random(f"{api_key}/{version}/{response}/{seed}")
    return sample_struct(api.response if response else api.request, version, flexible, rnd,
                         tagged=tagged)


def positional(body: dict, api_key: int, version: int, response: bool) -> tuple:
    """The body as nested tuples in wire order (tagged fields left out, an empty dict
    where a flexible struct ends), the shape of kafka-python's hand-written Structs."""
    api = messages.APIS[api_key]
    first = api.response_flexible if response else api.request_flexible
    flexible = first is not None and version >= first
    return _positional(body, api.response if response else api.request, version, flexible)


def _positional(d: dict, fields: tuple[F, ...], version: int, flexible: bool) -> tuple:
    out = []
    for f in fields:
        if not in_range(f.versions, version) or (
                f.tag is not None and in_range(f.tagged, version) and flexible):
            continue
        v = plain(d[f.name])
        if f.type == "[]struct" and v is not None:
            v = [_positional(x, f.fields, version, flexible) for x in v]
        elif f.type == "struct" and v is not None:
            v = _positional(v, f.fields, version, flexible)
        out.append(v)
    if flexible:
        out.append({})
    return tuple(out)


def plain(value: Any) -> Any:
    """Memoryviews (decoded records) as bytes, for comparisons."""
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value
